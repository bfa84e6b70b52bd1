import { ERROR_CODES, JobharvestError } from '../core/errors.ts';
import type { WebhookOptions } from '../webhook/run.ts';
import { loadConfig } from './options.ts';

/** The `webhook` command's flags as commander hands them over: all text. */
export interface WebhookFlags {
  config?: string;
  host: string;
  port: string;
  tlsCert?: string;
  tlsKey?: string;
  caOut?: string;
  kubeconfig?: string;
  standalone?: boolean;
  webhookUrl?: string;
  failurePolicy?: string;
  certMode?: string;
  namespace?: string;
  serviceName: string;
  certSecret?: string;
  extraDnsNames?: string;
  extraIps?: string;
  webhookConfigName?: string;
  logReaderClusterrole: string;
  apiRbac: boolean;
  harvesterServiceAccount?: string;
  signingKeyFile?: string;
  signingSecret?: string;
  certIntervalSeconds?: string;
  cabundleIntervalSeconds?: string;
  timeoutSeconds?: string;
  shutdownDelaySeconds?: string;
}

const list = (s: string | undefined) => (s ? s.split(',').map((x) => x.trim()).filter(Boolean) : []);

function bad(msg: string): never {
  throw new JobharvestError(ERROR_CODES.BAD_CONFIG, msg);
}

function millis(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) bad(`--${name} ${v}: not a positive number of seconds`);
  return n * 1000;
}

function oneOf<T extends string>(name: string, v: string | undefined, allowed: readonly T[]): T | undefined {
  if (v === undefined) return undefined;
  if (!(allowed as readonly string[]).includes(v)) bad(`--${name} ${v}: expected ${allowed.join(', ')}`);
  return v as T;
}

/** Checks every flag before anything starts, so a typo fails at once with JH_BAD_CONFIG. */
export function webhookOptions(flags: WebhookFlags): WebhookOptions {
  const config = loadConfig({ ...(flags.config ? { config: flags.config } : {}) });
  const port = Number(flags.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) bad(`--port ${flags.port}: not a port`);
  const certMode = oneOf('cert-mode', flags.certMode, ['auto', 'cert-manager', 'provided'] as const);
  const failurePolicy = oneOf('failure-policy', flags.failurePolicy, ['Ignore', 'Fail'] as const);
  if (Boolean(flags.tlsCert) !== Boolean(flags.tlsKey)) bad('--tls-cert and --tls-key go together');
  if (flags.signingKeyFile && flags.signingSecret) bad('--signing-key-file and --signing-secret cannot both be given');
  if (flags.standalone && flags.signingSecret) bad('--signing-secret needs a cluster: with --standalone, use --signing-key-file');
  const timeoutSeconds = Number(flags.timeoutSeconds ?? 10);
  if (!Number.isInteger(timeoutSeconds) || timeoutSeconds < 1 || timeoutSeconds > 30) bad(`--timeout-seconds ${flags.timeoutSeconds}: expected 1-30, the webhook configuration's timeoutSeconds`);
  const shutdownDelaySeconds = Number(flags.shutdownDelaySeconds ?? 0);
  if (!Number.isInteger(shutdownDelaySeconds) || shutdownDelaySeconds < 0 || shutdownDelaySeconds > 60) bad(`--shutdown-delay-seconds ${flags.shutdownDelaySeconds}: expected 0-60`);
  return {
    config,
    host: flags.host,
    port,
    standalone: Boolean(flags.standalone),
    certMode: certMode ?? 'auto',
    failurePolicy,
    tlsCert: flags.tlsCert,
    tlsKey: flags.tlsKey,
    caOut: flags.caOut,
    kubeconfig: flags.kubeconfig,
    webhookUrl: flags.webhookUrl,
    namespace: flags.namespace,
    serviceName: flags.serviceName,
    certSecret: flags.certSecret,
    extraDnsNames: list(flags.extraDnsNames),
    extraIps: list(flags.extraIps),
    webhookConfigName: flags.webhookConfigName,
    logReaderClusterRole: flags.logReaderClusterrole,
    apiRbac: flags.apiRbac,
    harvesterServiceAccount: flags.harvesterServiceAccount,
    signingKeyFile: flags.signingKeyFile,
    signingSecret: flags.signingSecret,
    certIntervalMs: millis('cert-interval-seconds', flags.certIntervalSeconds),
    caBundleIntervalMs: millis('cabundle-interval-seconds', flags.cabundleIntervalSeconds),
    timeoutSeconds,
    shutdownDelayMs: shutdownDelaySeconds * 1000,
  };
}
