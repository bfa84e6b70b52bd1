/**
 * The field names a shipped record carries, in each format the sidecar
 * writes and the logs command reads back. Written once: the sidecar's
 * encoders (sidecar/encode/, sidecar/sinks/loki.ts) and the query clients
 * (src/query/) import them, and test/integration/record-contract.test.ts
 * writes through the real sidecar and reads every field back.
 *
 * The sidecar may import src/contract/ only, so this module imports nothing.
 */

/** What a record says about itself, whatever the format. */
export type RecordField = 'namespace' | 'job' | 'pod' | 'podUid' | 'container' | 'restart' | 'node' | 'stream' | 'id' | 'truncated' | 'malformed' | 'incomplete';

/** The three flags a record may carry, in the order every format writes them. */
export const RECORD_FLAGS = ['truncated', 'malformed', 'incomplete'] as const;
export type RecordFlag = (typeof RECORD_FLAGS)[number];

/**
 * The flat JSON document of the http, elasticsearch and stdout sinks and of
 * the dead-letter file: OpenTelemetry's Kubernetes attribute names, and
 * Elasticsearch's `@timestamp` (the http sink's time field is configurable).
 */
export const DOCUMENT_FIELDS = {
  time: '@timestamp',
  message: 'message',
  namespace: 'k8s.namespace.name',
  job: 'k8s.job.name',
  pod: 'k8s.pod.name',
  podUid: 'k8s.pod.uid',
  container: 'k8s.container.name',
  restart: 'k8s.container.restart_count',
  node: 'k8s.node.name',
  stream: 'stream',
  id: 'id',
  truncated: 'jobharvest.truncated',
  malformed: 'jobharvest.malformed',
  incomplete: 'jobharvest.incomplete',
} as const satisfies Record<RecordField | 'time' | 'message', string>;

/**
 * OTLP: the Kubernetes names as resource attributes; stream, id and flags as
 * log record attributes, with OpenTelemetry's names for stream and id.
 */
export const OTLP_ATTRIBUTES = {
  namespace: DOCUMENT_FIELDS.namespace,
  job: DOCUMENT_FIELDS.job,
  pod: DOCUMENT_FIELDS.pod,
  podUid: DOCUMENT_FIELDS.podUid,
  container: DOCUMENT_FIELDS.container,
  restart: DOCUMENT_FIELDS.restart,
  node: DOCUMENT_FIELDS.node,
  stream: 'log.iostream',
  id: 'log.record.uid',
  truncated: DOCUMENT_FIELDS.truncated,
  malformed: DOCUMENT_FIELDS.malformed,
  incomplete: DOCUMENT_FIELDS.incomplete,
} as const satisfies Record<RecordField, string>;

/** Loki stream labels: low cardinality only. */
export const LOKI_LABELS = {
  namespace: 'namespace',
  job: 'job',
  pod: 'pod',
  container: 'container',
  stream: 'stream',
} as const satisfies Partial<Record<RecordField, string>>;

/** Loki structured metadata: everything else, per entry. */
export const LOKI_METADATA = {
  podUid: 'pod_uid',
  node: 'node',
  restart: 'restart_count',
  id: 'id',
  truncated: 'truncated',
  malformed: 'malformed',
  incomplete: 'incomplete',
} as const satisfies Partial<Record<RecordField, string>>;

/** Every field of a Loki entry, labels and structured metadata alike, as a reader sees them folded together. */
export const LOKI_FIELDS = { ...LOKI_LABELS, ...LOKI_METADATA } as const satisfies Record<RecordField, string>;
