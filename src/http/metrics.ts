import { Counter, Histogram, Registry, Gauge, collectDefaultMetrics } from 'prom-client';
import { ERROR_CODES } from '../core/errors.ts';

/**
 * Label values come only from these fixed sets, never straight from a request:
 * anyone who can reach /mutate chooses `operation` and `kind`, and every new
 * value would be a new series held in memory for the life of the process.
 */
const OPERATIONS = new Set(['CREATE', 'UPDATE', 'DELETE', 'CONNECT']);

export function operationLabel(op: unknown): string {
  return typeof op === 'string' && OPERATIONS.has(op) ? op : 'other';
}

/** Only batch/v1 Jobs are registered with the webhook; anything else is one bucket. */
export function kindLabel(kind: { group?: unknown; kind?: unknown } | undefined): string {
  return kind?.group === 'batch' && kind.kind === 'Job' ? 'Job' : 'other';
}

/**
 * The API server's gitVersion as a label value. It is read once at start, so
 * it makes one series per process; the cap only keeps an odd build string from
 * filling the exposition.
 */
export function kubernetesVersionLabel(gitVersion: string): string {
  return gitVersion.slice(0, 64);
}

/**
 * One registry per app instance, never the global one: tests build many apps in
 * one process and each must count only its own requests.
 */
export function createMetrics(opts: { defaultMetrics?: boolean } = {}) {
  const registry = new Registry();
  if (opts.defaultMetrics) collectDefaultMetrics({ register: registry, prefix: 'jobharvest_' });
  const requests = new Counter({
    name: 'jobharvest_admission_requests_total',
    help: 'AdmissionReview requests answered, by operation (CREATE, UPDATE, DELETE, CONNECT or other) and kind (Job or other).',
    labelNames: ['operation', 'kind'] as const,
    registers: [registry],
  });
  const injected = new Counter({
    name: 'jobharvest_injected_total',
    help: 'Jobs patched with the log sidecar, by source mode and sink.',
    labelNames: ['mode', 'sink', 'dry_run'] as const,
    registers: [registry],
  });
  const skipped = new Counter({
    name: 'jobharvest_skipped_total',
    help: 'Admissions allowed without a patch, by reason.',
    labelNames: ['reason'] as const,
    registers: [registry],
  });
  const errors = new Counter({
    name: 'jobharvest_errors_total',
    help: 'Internal errors; each Job was allowed unpatched. By stable error code.',
    labelNames: ['code'] as const,
    registers: [registry],
  });
  // At 0 from the start: an alert's increase() then sees the first error,
  // which a series born at 1 would hide.
  for (const code of [ERROR_CODES.INTERNAL, ERROR_CODES.PATCH_FAILED]) errors.labels({ code }).inc(0);
  const badRequests = new Counter({
    name: 'jobharvest_bad_requests_total',
    help: 'Requests answered with HTTP 400 because they were not a usable AdmissionReview.',
    registers: [registry],
  });
  const warnings = new Counter({
    name: 'jobharvest_warnings_total',
    help: 'Warnings returned to clients in AdmissionResponses.',
    registers: [registry],
  });
  const latency = new Histogram({
    name: 'jobharvest_admission_duration_seconds',
    help: 'Time to answer one AdmissionReview, from parsed body to response.',
    // Sub-millisecond buckets: a healthy answer takes well under 1 ms, and the
    // API server's timeout is seconds away, so the interesting range is small.
    // 5 and 10 reach the timeout's half for every timeoutSeconds (at most 10),
    // so the chart's latency alert (p99 above half the timeout) can fire:
    // histogram_quantile never answers above the highest finite bucket.
    buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 2.5, 5, 10],
    registers: [registry],
  });
  const certExpiry = new Gauge({
    name: 'jobharvest_certificate_expiry_seconds',
    help: 'Seconds until the serving certificate expires.',
    registers: [registry],
  });
  const caBundleMismatch = new Gauge({
    name: 'jobharvest_cabundle_mismatch',
    help: '1 when the MutatingWebhookConfiguration caBundle does not trust the serving certificate.',
    registers: [registry],
  });
  const namespaceLiveReads = new Counter({
    name: 'jobharvest_namespace_live_reads_total',
    help: 'Namespaces read from the API server during an admission, because the cache had not seen them (trigger unseen) or said not opted in for one created or changed a moment ago (trigger recent). By result: opted-in, not-opted-in, not-found, error or timeout (the last three fall back to the cached answer), or throttled (an unseen namespace not read: more than 10 a second, burst 20).',
    labelNames: ['trigger', 'result'] as const,
    registers: [registry],
  });
  const kubernetesSupported = new Gauge({
    name: 'jobharvest_webhook_kubernetes_supported',
    help: '1 when the API server\'s release (label version, its /version gitVersion, read at start) is one jobharvest supports (see MIN_KUBERNETES), 0 when it is older. Absent when /version could not be read.',
    labelNames: ['version'] as const,
    registers: [registry],
  });
  const ready = new Gauge({ name: 'jobharvest_ready', help: '1 when /readyz answers ready.', registers: [registry] });
  const signingKey = new Gauge({
    name: 'jobharvest_signing_key_loaded',
    help: '1 when injections are signed; 0: no signing key, so the harvester verifies none of them and harvests none.',
    registers: [registry],
  });
  return { registry, requests, injected, skipped, errors, badRequests, warnings, latency, ready, certExpiry, caBundleMismatch, namespaceLiveReads, kubernetesSupported, signingKey };
}

export type Metrics = ReturnType<typeof createMetrics>;
