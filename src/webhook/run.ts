import { readFileSync, writeFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import { build } from '../http/app.ts';
import { createMetrics } from '../http/metrics.ts';
import { loadConfig } from '../cli/options.ts';
import { generateBundle } from '../tls/generate.ts';
import type { ReviewDeps } from '../core/admission.ts';
import { JobharvestError, ERROR_CODES } from '../core/errors.ts';

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
}

const logger = { level: process.env.LOG_LEVEL ?? 'info', base: { app: 'jobharvest-webhook' } };

/** Runs the webhook until SIGTERM/SIGINT, then finishes in-flight requests and exits. */
export async function runWebhook(flags: WebhookFlags): Promise<void> {
  const config = loadConfig({ ...(flags.config ? { config: flags.config } : {}) });
  const port = Number(flags.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new JobharvestError(ERROR_CODES.BAD_CONFIG, `--port ${flags.port}: not a port`);

  let tls: { cert: string; key: string };
  if (flags.tlsCert || flags.tlsKey) {
    if (!flags.tlsCert || !flags.tlsKey) throw new JobharvestError(ERROR_CODES.BAD_CONFIG, '--tls-cert and --tls-key go together');
    tls = { cert: readFileSync(flags.tlsCert, 'utf8'), key: readFileSync(flags.tlsKey, 'utf8') };
  } else {
    const bundle = await generateBundle({ dnsNames: ['localhost'], ipAddresses: ['127.0.0.1', '::1'] });
    tls = bundle.serving;
    if (flags.caOut) writeFileSync(flags.caOut, bundle.ca.cert, { mode: 0o644 });
  }

  const metrics = createMetrics({ defaultMetrics: true });
  let deps: ReviewDeps;
  let stopEdge: () => Promise<void> = async () => {};
  if (flags.standalone) {
    deps = { config, namespace: () => undefined, serverVersion: () => undefined, assumeOptedIn: true };
  } else {
    const { startEdge } = await import('../k8s/edge.ts');
    const edge = await startEdge({ config, ...(flags.kubeconfig ? { kubeconfig: flags.kubeconfig } : {}) });
    if (!edge) {
      deps = { config, namespace: () => undefined, serverVersion: () => undefined, assumeOptedIn: true };
    } else {
      deps = edge.deps;
      stopEdge = edge.stop;
    }
  }

  const app: FastifyInstance = build({ deps, tls, logger, metrics });
  await app.listen({ host: flags.host, port });
  const addr = app.server.address();
  const bound = typeof addr === 'object' && addr ? addr.port : port;
  app.log.info(
    { url: `https://${flags.host}:${bound}/mutate`, standalone: deps.assumeOptedIn === true, caOut: flags.caOut },
    'webhook listening',
  );

  let closing = false;
  const shutdown = (signal: string) => {
    if (closing) return;
    closing = true;
    app.log.info({ signal }, 'shutting down: finishing in-flight requests');
    void Promise.allSettled([app.close(), stopEdge()]).then(() => process.exit(0));
  };
  process.once('SIGTERM', () => shutdown('SIGTERM'));
  process.once('SIGINT', () => shutdown('SIGINT'));
}
