import { readFileSync, writeFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import { keyFromText } from '../contract/signature.ts';
import { build } from '../http/app.ts';
import { createMetrics, kubernetesVersionLabel } from '../http/metrics.ts';
import { earlyLog, webhookLogger } from '../http/logging.ts';
import { generateBundle } from '../tls/generate.ts';
import { ERROR_CODES, JobharvestError } from '../core/errors.ts';
import type { ReviewDeps } from '../core/admission.ts';
import type { Config } from '../core/config.ts';
import type { CertMode, Edge } from '../k8s/edge.ts';

/** The `webhook` command's settings, already checked (see cli/webhook-flags.ts). */
export interface WebhookOptions {
  config: Config;
  host: string;
  port: number;
  standalone: boolean;
  certMode: 'auto' | 'cert-manager' | 'provided';
  failurePolicy: 'Ignore' | 'Fail' | undefined;
  tlsCert: string | undefined;
  tlsKey: string | undefined;
  caOut: string | undefined;
  kubeconfig: string | undefined;
  webhookUrl: string | undefined;
  namespace: string | undefined;
  serviceName: string;
  certSecret: string | undefined;
  extraDnsNames: string[];
  extraIps: string[];
  webhookConfigName: string | undefined;
  logReaderClusterRole: string;
  apiRbac: boolean;
  /** The harvester's service account, bound to the log reader in opted-in namespaces. */
  harvesterServiceAccount: string | undefined;
  /** The key injections are signed with; the harvester verifies with the same one. */
  signingKeyFile: string | undefined;
  /** In cluster: the Secret the key is read from, created once if absent (k8s/signing-secret.ts). */
  signingSecret: string | undefined;
  certIntervalMs: number | undefined;
  caBundleIntervalMs: number | undefined;
  /** The webhook configuration's timeoutSeconds: the HTTP server's timeouts and connection cap follow from it. */
  timeoutSeconds: number;
  /**
   * After SIGTERM, how long the webhook keeps answering reviews (while /readyz
   * says not ready) before it stops listening: the API server learns that the
   * pod is going from its endpoints, later than the kubelet sends the signal,
   * and a review sent to a closed port lets a Job through without the sidecar.
   */
  shutdownDelayMs: number;
}

export const SERVICE_ACCOUNT_TOKEN = '/var/run/secrets/kubernetes.io/serviceaccount/token';

/** Why the webhook will not start without a cluster, and what to do. */
export function noClusterMessage(env: NodeJS.ProcessEnv): string {
  if (env.KUBERNETES_SERVICE_HOST) {
    return `running in a pod with no service-account token at ${SERVICE_ACCOUNT_TOKEN}: set automountServiceAccountToken: true on the pod (the chart does), or pass --standalone to serve without a cluster (every namespace not excluded counts as opted in)`;
  }
  return 'no kubeconfig found (--kubeconfig, $KUBECONFIG, ~/.kube/config): pass one, or --standalone to serve without a cluster (every namespace not excluded counts as opted in)';
}

/** Runs the webhook until SIGTERM/SIGINT, then finishes in-flight requests and exits. */
export async function runWebhook(flags: WebhookOptions): Promise<void> {
  const { config, port } = flags;

  const metrics = createMetrics({ defaultMetrics: true });
  const logger = webhookLogger({ level: process.env.LOG_LEVEL ?? 'info' });
  const early = earlyLog;

  const signingKey = flags.signingKeyFile ? keyFromText(readFileSync(flags.signingKeyFile)) : undefined;
  let edge: Edge | undefined;
  if (!flags.standalone) {
    const { startEdge } = await import('../k8s/edge.ts');
    const namespace = flags.namespace ?? process.env.POD_NAMESPACE ?? config.webhookNamespace;
    const { certIntervalMs, caBundleIntervalMs } = flags;
    const certMode: CertMode = flags.webhookUrl ? 'local' : flags.certMode;
    edge = await startEdge({
      config,
      kubeconfig: flags.kubeconfig,
      certMode,
      namespace,
      serviceName: flags.serviceName,
      certSecret: flags.certSecret ?? `${flags.serviceName}-tls`,
      extraDnsNames: flags.extraDnsNames,
      extraIps: flags.extraIps,
      webhookConfigName: flags.webhookConfigName ?? (flags.webhookUrl ? 'jobharvest' : undefined),
      webhookUrl: flags.webhookUrl,
      ...(flags.failurePolicy ? { failurePolicy: flags.failurePolicy } : {}),
      logReaderClusterRole: flags.logReaderClusterRole,
      apiRbac: flags.apiRbac,
      harvesterServiceAccount: flags.harvesterServiceAccount,
      signingKey,
      signingSecret: flags.signingSecret,
      tlsCertFile: flags.tlsCert,
      tlsKeyFile: flags.tlsKey,
      ...(certIntervalMs ? { certIntervalMs } : {}),
      ...(caBundleIntervalMs ? { caBundleIntervalMs } : {}),
      log: early,
      onCertExpiry: (s) => metrics.certExpiry.set(s),
      onCaBundle: (ok) => metrics.caBundleMismatch.set(ok ? 0 : 1),
      onKubernetesSupport: (version, supported) => metrics.kubernetesSupported.set({ version: kubernetesVersionLabel(version) }, supported ? 1 : 0),
      onNamespaceLiveRead: (trigger, result) => metrics.namespaceLiveReads.inc({ trigger, result }),
    });
    // Without a cluster every namespace not excluded counts as opted in: in a
    // pod whose token was not mounted that would inject, set TTLs on and mount
    // a hostPath into Jobs the operator never opted in. Only an explicit
    // --standalone runs that way.
    if (!edge) throw new JobharvestError(ERROR_CODES.BAD_CONFIG, noClusterMessage(process.env));
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
      const bundle = await generateBundle({ dnsNames: ['localhost', ...flags.extraDnsNames], ipAddresses: ['127.0.0.1', '::1', ...flags.extraIps] });
      tls = bundle.serving;
      if (flags.caOut) writeFileSync(flags.caOut, bundle.ca.cert, { mode: 0o644 });
    }
    deps = { config, namespace: () => undefined, serverVersion: () => undefined, assumeOptedIn: true, signingKey };
  }

  // Known once the edge has read or created the Secret: from here on it never changes.
  metrics.signingKey.set(deps.signingKey ? 1 : 0);
  let closing = false;
  const readiness = () => (closing ? { ready: false, reason: 'shutting down' } : edge ? edge.readiness() : { ready: true });
  const app: FastifyInstance = build({ deps, tls, logger, metrics, timeoutSeconds: flags.timeoutSeconds, readiness });
  edge?.onTls((p) => {
    // New handshakes get the new certificate; open connections keep theirs.
    (app.server as unknown as import("node:tls").Server).setSecureContext({ cert: p.cert, key: p.key, minVersion: 'TLSv1.2' });
    app.log.info('serving certificate reloaded');
  });
  await app.listen({ host: flags.host, port });
  const addr = app.server.address();
  const bound = typeof addr === 'object' && addr ? addr.port : port;
  app.log.info({ url: `https://${flags.host}:${bound}/mutate`, standalone: !edge, caOut: flags.caOut }, 'webhook listening');

  const shutdown = (signal: string) => {
    if (closing) return;
    closing = true;
    app.log.info({ signal, delayMs: flags.shutdownDelayMs }, 'shutting down: not ready, still serving until the delay is over');
    setTimeout(() => {
      app.log.info('shutting down: finishing in-flight requests');
      void Promise.allSettled([app.close(), edge?.stop()]).then(() => process.exit(0));
    }, flags.shutdownDelayMs);
  };
  process.once('SIGTERM', () => shutdown('SIGTERM'));
  process.once('SIGINT', () => shutdown('SIGINT'));
}
