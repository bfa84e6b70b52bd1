import Fastify, { LogController, type FastifyInstance, type FastifyServerOptions } from 'fastify';
import type { SecureContextOptions } from 'node:tls';
import { parseReview, review, type ReviewDeps } from '../core/admission.ts';
import { ERROR_CODES, JobharvestError } from '../core/errors.ts';
import { createMetrics, kindLabel, operationLabel, type Metrics } from './metrics.ts';

export interface Readiness {
  ready: boolean;
  reason?: string;
}

export interface AppOptions {
  deps: ReviewDeps;
  /** Serving certificate; absent for tests that use inject(). */
  tls?: SecureContextOptions & { key: string | Buffer; cert: string | Buffer };
  logger?: FastifyServerOptions['logger'];
  metrics?: Metrics;
  readiness?: () => Readiness;
  /** Adds POST /allow, which answers allowed: true without work: the benchmark's baseline. */
  baselineRoute?: boolean;
}

// The API server accepts request bodies up to 3 MiB; an AdmissionReview wraps
// the object, so leave room for the envelope.
export const BODY_LIMIT = 6 * 1024 * 1024;

/** Builds the app without listening, so tests drive it with inject(). */
export function build(opts: AppOptions): FastifyInstance {
  const metrics = opts.metrics ?? createMetrics();
  const app = Fastify({
    bodyLimit: BODY_LIMIT,
    logger: opts.logger ?? false,
    // One line per admission is logged by the handler itself, with the request uid.
    logController: new LogController({ disableRequestLogging: true }),
    // Graceful shutdown: refuse new connections, finish the requests in flight.
    forceCloseConnections: 'idle',
    return503OnClosing: true,
    ...(opts.tls
      ? {
          https: {
            ...opts.tls,
            minVersion: 'TLSv1.2' as const,
          },
        }
      : {}),
  }) as unknown as FastifyInstance;

  // The one place that answers a request with an error: Fastify's own (bad JSON,
  // body too large, wrong content type) and ours (JobharvestError) both carry
  // their status; anything else is a bug and answers 500.
  app.setErrorHandler((err: Error & { statusCode?: number; code?: string }, req, reply) => {
    const status = err.statusCode && err.statusCode >= 400 && err.statusCode < 500 ? err.statusCode : 500;
    if (status === 400) metrics.badRequests.inc();
    req.log.warn({ err: { message: err.message, code: err.code } }, 'request rejected');
    const code = err instanceof JobharvestError ? err.code : status === 500 ? ERROR_CODES.INTERNAL : ERROR_CODES.BAD_REQUEST;
    void reply.code(status).send({ code, message: err.message });
  });

  app.post('/mutate', async (req, reply) => {
    const started = process.hrtime.bigint();
    const request = parseReview(req.body);
    const result = await review(request, opts.deps);
    const o = result.outcome;
    metrics.requests.inc({ operation: operationLabel(request.operation), kind: kindLabel(request.kind) });
    const log = req.log;
    const ids = { uid: result.uid, namespace: request.namespace, name: nameOf(request.object) };
    if (o.kind === 'injected') {
      const d = o.decision;
      if (d.action === 'inject') metrics.injected.inc({ mode: d.mode, sink: d.settings.sink, dry_run: String(!!request.dryRun) });
      log.info({ ...ids, decision: 'inject', dryRun: !!request.dryRun, ops: o.patch.length }, 'job injected');
    } else if (o.kind === 'skipped') {
      metrics.skipped.inc({ reason: o.reason });
      if (o.decision?.action === 'skip') log.info({ ...ids, decision: 'skip', reason: o.reason, detail: o.decision.detail }, 'job skipped');
    } else {
      metrics.errors.inc({ code: o.code });
      const e = o.error as Error;
      log.error({ ...ids, code: o.code, err: { message: e?.message, stack: e?.stack } }, 'internal error; job allowed without patch');
    }
    const w = result.review.response.warnings?.length ?? 0;
    if (w) metrics.warnings.inc(w);
    metrics.latency.observe(Number(process.hrtime.bigint() - started) / 1e9);
    return reply.send(result.review);
  });

  if (opts.baselineRoute) {
    app.post('/allow', async (req, reply) => {
      const uid = (req.body as { request?: { uid?: string } })?.request?.uid ?? '';
      return reply.send({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response: { uid, allowed: true } });
    });
  }

  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/readyz', async (_req, reply) => {
    const r = opts.readiness ? opts.readiness() : { ready: true };
    metrics.ready.set(r.ready ? 1 : 0);
    return reply.code(r.ready ? 200 : 503).send(r.ready ? { status: 'ready' } : { status: 'not ready', reason: r.reason });
  });
  app.get('/metrics', async (_req, reply) => {
    return reply.header('content-type', metrics.registry.contentType).send(await metrics.registry.metrics());
  });
  return app;
}

function nameOf(o: unknown): string | undefined {
  const m = (o as { metadata?: { name?: string; generateName?: string } } | undefined)?.metadata;
  return m?.name ?? (m?.generateName ? `${m.generateName}*` : undefined);
}
