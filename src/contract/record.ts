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

/**
 * OTLP resource attributes beyond the fields every format carries: the rest
 * of OpenTelemetry's Kubernetes set (k8s.job.uid, and k8s.cronjob.* for a
 * CronJob's run) and service.name.
 */
export const OTLP_RESOURCE = {
  jobUid: 'k8s.job.uid',
  cronJobName: 'k8s.cronjob.name',
  cronJobUid: 'k8s.cronjob.uid',
  serviceName: 'service.name',
} as const;

/** The pod template annotation OpenTelemetry reads service.name from first. */
export const SERVICE_NAME_ANNOTATION = 'resource.opentelemetry.io/service.name';
/** Then this label of the pod template. */
export const SERVICE_NAME_LABEL = 'app.kubernetes.io/name';

/**
 * service.name by OpenTelemetry's Kubernetes rules, as far as a Job's pod
 * goes: what the pod template names (SERVICE_NAME_ANNOTATION, then
 * SERVICE_NAME_LABEL; the webhook reads them), else the owning CronJob's
 * name, else the Job's, else the pod's.
 */
export function serviceNameOf(o: { named?: string | undefined; cronJob?: string | undefined; job?: string | undefined; pod: string }): string {
  return o.named || o.cronJob || o.job || o.pod;
}

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

/**
 * The Job's carried labels and annotations (JOBHARVEST_JOB_LABELS /
 * JOBHARVEST_JOB_ANNOTATIONS), named as OpenTelemetry's Kubernetes semantic
 * conventions name them: a per-pod attribute beside k8s.job.name in the
 * document, the OTLP resource, the forward record and the syslog element.
 */
export const JOB_LABEL_PREFIX = 'k8s.job.label.';
export const JOB_ANNOTATION_PREFIX = 'k8s.job.annotation.';

/**
 * Where a record's parsed JSON fields and its line count go, per format.
 * The fields always sit under a name of their own, never beside
 * jobharvest's: a tenant's line `{"k8s.pod.name":"evil"}` must not be able
 * to overwrite the pod the record came from.
 */
export const SHAPED_FIELDS = {
  /** The flat JSON document: the fields as one nested object (Elasticsearch maps `json.level`, VictoriaLogs flattens it to `json.level`). */
  document: { json: 'json', lines: 'jobharvest.lines' },
  /** OTLP: the body becomes the fields' map; the line as written stays an attribute. */
  otlp: { original: 'log.record.original', lines: 'jobharvest.lines' },
  /** Loki structured metadata: `json_<key>` per top-level scalar field, `label_<key>` / `annotation_<key>` per carried one. */
  loki: { json: 'json_', label: 'label_', annotation: 'annotation_', lines: 'lines' },
  /** Fluentd forward: one record key holding the map. */
  forward: { json: 'json', lines: 'jobharvest.lines' },
  /**
   * syslog: structured-data elements of their own, `json@`, `label@` and
   * `annotation@` the enterprise number of JOBHARVEST_SYSLOG_SD_ID, with the
   * bare key as PARAM-NAME: RFC 5424 caps a PARAM-NAME at 32 characters,
   * and `k8s.job.label.` would leave a key 18 of them.
   */
  syslog: { sdName: 'json', labelSdName: 'label', annotationSdName: 'annotation', lines: 'jobharvest.lines' },
} as const;

/** JSON fields whose value sets the OTLP severity, first found wins. */
export const SEVERITY_KEYS = ['level', 'severity', 'lvl'] as const;

/** A Loki label or structured-metadata name made of what Loki accepts: `[A-Za-z0-9_]`. */
export function lokiName(prefix: string, key: string): string {
  return prefix + key.replace(/[^A-Za-z0-9_]/g, '_');
}
