import Fastify, { LogController, type FastifyInstance, type FastifyServerOptions } from 'fastify';
import { Transform } from 'node:stream';
import type { SecureContextOptions } from 'node:tls';
import { parseReview, review, type ReviewDeps } from '../core/admission.ts';
import { ERROR_CODES, JobharvestError } from '../core/errors.ts';
import { NAMESPACE_MAX, NAME_MAX, cut, serverLimits, type ServerLimits } from './limits.ts';
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
  /** The webhook configuration's timeoutSeconds: the server's timeouts and connection cap follow from it (src/http/limits.ts). */
  timeoutSeconds?: number;
  /** Overrides, for tests. */
  limits?: Partial<ServerLimits>;
}

export { BODY_LIMIT } from './limits.ts';
const DEFAULT_TIMEOUT_SECONDS = 10;

/** Builds the app without listening, so tests drive it with inject(). */
export function build(opts: AppOptions): FastifyInstance {
  const metrics = opts.metrics ?? createMetrics();
  const limits: ServerLimits = { ...serverLimits(opts.timeoutSeconds ?? DEFAULT_TIMEOUT_SECONDS), ...opts.limits };
  const nodeServer = {
    requestTimeout: limits.requestTimeoutMs,
    headersTimeout: limits.headersTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    connectionsCheckingInterval: limits.checkIntervalMs,
  };
  const app = Fastify({
    bodyLimit: limits.bodyLimit,
    requestTimeout: limits.requestTimeoutMs,
    connectionTimeout: limits.connectionTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
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
            handshakeTimeout: limits.handshakeTimeoutMs,
            ...nodeServer,
          },
        }
      : { http: nodeServer }),
  }) as unknown as FastifyInstance;
  // Past the cap Node closes new connections at once, before the TLS handshake.
  app.server.maxConnections = limits.maxConnections;

  // Bytes of request bodies held at once, over all connections. A request
  // reserves its declared length as it starts (so a body sent slowly, or never
  // finished, holds its share from the first byte) and any bytes beyond it as
  // they come; it gives them back when its response is done or its connection
  // is gone.
  let inFlight = 0;
  app.addHook('preParsing', async (req, reply, payload) => {
    const declared = Number(req.headers['content-length'] ?? 0);
    let held = Number.isFinite(declared) && declared > 0 && declared <= limits.bodyLimit ? declared : 0;
    if (inFlight + held > limits.inFlightBytes) throw overloaded();
    inFlight += held;
    reply.raw.once('close', () => {
      inFlight -= held;
      held = 0;
    });
    if (held > 0) return payload;
    let seen = 0;
    return payload.pipe(
      new Transform({
        transform(chunk: Buffer, _enc, done) {
          seen += chunk.length;
          const more = seen - held;
          if (more > 0) {
            if (inFlight + more > limits.inFlightBytes) return done(overloaded());
            inFlight += more;
            held += more;
          }
          done(null, chunk);
        },
      }),
    );
  });

  // The one place that answers a request with an error: Fastify's own (bad JSON,
  // body too large, wrong content type) and ours (JobharvestError) both carry
  // their status; anything else is a bug and answers 500.
  app.setErrorHandler((err: Error & { statusCode?: number; code?: string }, req, reply) => {
    const status = err.statusCode && ((err.statusCode >= 400 && err.statusCode < 500) || err.statusCode === 503) ? err.statusCode : 500;
    if (status === 400) metrics.badRequests.inc();
    // A refused body may still be arriving: close the connection rather than read it.
    if (status === 413 || status === 503) void reply.header('connection', 'close');
    req.log.warn({ err: { message: err.message, code: err.code } }, 'request rejected');
    const code = err instanceof JobharvestError ? err.code : status === 503 ? ERROR_CODES.OVERLOADED : status === 500 ? ERROR_CODES.INTERNAL : ERROR_CODES.BAD_REQUEST;
    void reply.code(status).send({ code, message: err.message });
  });

  app.post('/mutate', async (req, reply) => {
    const started = process.hrtime.bigint();
    const request = parseReview(req.body);
    const result = await review(request, opts.deps);
    const o = result.disposition;
    metrics.requests.inc({ operation: operationLabel(request.operation), kind: kindLabel(request.kind) });
    const log = req.log;
    const ids = { uid: cut(result.uid, NAME_MAX), namespace: cut(request.namespace, NAMESPACE_MAX), name: cut(nameOf(request.object), NAME_MAX) };
    if (o.kind === 'injected') {
      const d = o.decision;
      if (d.action === 'inject') metrics.injected.inc({ mode: d.mode, sink: d.settings.sink, dry_run: String(!!request.dryRun) });
      log.info({ ...ids, decision: 'inject', dryRun: !!request.dryRun, ops: o.patch.length }, 'job injected');
    } else if (o.kind === 'skipped') {
      metrics.skipped.inc({ reason: o.reason });
      if (o.decision?.action === 'skip') log.info({ ...ids, decision: 'skip', reason: o.reason, detail: cut(o.decision.detail, DETAIL_MAX) }, 'job skipped');
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

// A skip's detail quotes names and values from the review.
const DETAIL_MAX = 1024;

function overloaded(): Error {
  return Object.assign(new Error('too many request bytes in flight; try again'), { statusCode: 503 });
}

function nameOf(o: unknown): string | undefined {
  const m = (o as { metadata?: { name?: string; generateName?: string } } | undefined)?.metadata;
  return m?.name ?? (m?.generateName ? `${m.generateName}*` : undefined);
}
