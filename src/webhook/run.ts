import { readFileSync, writeFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import { build } from '../http/app.ts';
import { createMetrics } from '../http/metrics.ts';
import { loadConfig } from '../cli/options.ts';
import { generateBundle } from '../tls/generate.ts';
import type { ReviewDeps } from '../core/admission.ts';
import { JobharvestError, ERROR_CODES } from '../core/errors.ts';
import type { CertMode, Edge } from '../k8s/edge.ts';

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
  certIntervalSeconds?: string;
  cabundleIntervalSeconds?: string;
}

const list = (s: string | undefined) => (s ? s.split(',').map((x) => x.trim()).filter(Boolean) : []);

function bad(msg: string): never {
  throw new JobharvestError(ERROR_CODES.BAD_CONFIG, msg);
}

function seconds(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) bad(`--${name} ${v}: not a positive number of seconds`);
  return n * 1000;
}

/** Runs the webhook until SIGTERM/SIGINT, then finishes in-flight requests and exits. */
export async function runWebhook(flags: WebhookFlags): Promise<void> {
  const config = loadConfig({ ...(flags.config ? { config: flags.config } : {}) });
  const port = Number(flags.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) bad(`--port ${flags.port}: not a port`);
  if (flags.certMode && !['auto', 'cert-manager', 'provided'].includes(flags.certMode)) bad(`--cert-mode ${flags.certMode}: expected auto, cert-manager or provided`);
  if (flags.failurePolicy && !['Ignore', 'Fail'].includes(flags.failurePolicy)) bad(`--failure-policy ${flags.failurePolicy}: expected Ignore or Fail`);
  if (Boolean(flags.tlsCert) !== Boolean(flags.tlsKey)) bad('--tls-cert and --tls-key go together');

  const metrics = createMetrics({ defaultMetrics: true });
  const logger = { level: process.env.LOG_LEVEL ?? 'info', base: { app: 'jobharvest-webhook' } };
  const early = (level: string, msg: string, extra?: object) =>
    process.stderr.write(JSON.stringify({ level, time: Date.now(), app: 'jobharvest-webhook', msg, ...extra }) + '\n');

  let edge: Edge | undefined;
  if (!flags.standalone) {
    const { startEdge } = await import('../k8s/edge.ts');
    const namespace = flags.namespace ?? process.env.POD_NAMESPACE ?? config.webhookNamespace;
    const certIntervalMs = seconds('cert-interval-seconds', flags.certIntervalSeconds);
    const caBundleIntervalMs = seconds('cabundle-interval-seconds', flags.cabundleIntervalSeconds);
    const certMode: CertMode = flags.webhookUrl ? 'local' : ((flags.certMode as CertMode | undefined) ?? 'auto');
    edge = await startEdge({
      config,
      kubeconfig: flags.kubeconfig,
      certMode,
      namespace,
      serviceName: flags.serviceName,
      certSecret: flags.certSecret ?? `${flags.serviceName}-tls`,
      extraDnsNames: list(flags.extraDnsNames),
      extraIps: list(flags.extraIps),
      webhookConfigName: flags.webhookConfigName ?? (flags.webhookUrl ? 'jobharvest' : undefined),
      webhookUrl: flags.webhookUrl,
      ...(flags.failurePolicy ? { failurePolicy: flags.failurePolicy as 'Ignore' | 'Fail' } : {}),
      logReaderClusterRole: flags.logReaderClusterrole,
      apiRbac: flags.apiRbac,
      tlsCertFile: flags.tlsCert,
      tlsKeyFile: flags.tlsKey,
      ...(certIntervalMs ? { certIntervalMs } : {}),
      ...(caBundleIntervalMs ? { caBundleIntervalMs } : {}),
      log: early,
      onCertExpiry: (s) => metrics.certExpiry.set(s),
      onCaBundle: (ok) => metrics.caBundleMismatch.set(ok ? 0 : 1),
    });
    if (!edge) early('info', 'no kubeconfig found: running standalone (every namespace not excluded counts as opted in)');
  }

  let tls: { cert: string; key: string };
  let deps: ReviewDeps;
  if (edge) {
    tls = edge.tls;
    deps = edge.deps;
  } else {
    if (flags.tlsCert && flags.tlsKey) {
      tls = { cert: readFileSync(flags.tlsCert, 'utf8'), key: readFileSync(flags.tlsKey, 'utf8') };
    } else {
      const bundle = await generateBundle({ dnsNames: ['localhost', ...list(flags.extraDnsNames)], ipAddresses: ['127.0.0.1', '::1', ...list(flags.extraIps)] });
      tls = bundle.serving;
      if (flags.caOut) writeFileSync(flags.caOut, bundle.ca.cert, { mode: 0o644 });
    }
    deps = { config, namespace: () => undefined, serverVersion: () => undefined, assumeOptedIn: true };
  }

  const app: FastifyInstance = build({ deps, tls, logger, metrics, ...(edge ? { readiness: edge.readiness } : {}) });
  edge?.onTls((p) => {
    // New handshakes get the new certificate; open connections keep theirs.
    (app.server as unknown as import("node:tls").Server).setSecureContext({ cert: p.cert, key: p.key, minVersion: 'TLSv1.2' });
    app.log.info('serving certificate reloaded');
  });
  await app.listen({ host: flags.host, port });
  const addr = app.server.address();
  const bound = typeof addr === 'object' && addr ? addr.port : port;
  app.log.info({ url: `https://${flags.host}:${bound}/mutate`, standalone: !edge, caOut: flags.caOut }, 'webhook listening');

  let closing = false;
  const shutdown = (signal: string) => {
    if (closing) return;
    closing = true;
    app.log.info({ signal }, 'shutting down: finishing in-flight requests');
    void Promise.allSettled([app.close(), edge?.stop()]).then(() => process.exit(0));
  };
  process.once('SIGTERM', () => shutdown('SIGTERM'));
  process.once('SIGINT', () => shutdown('SIGINT'));
}
