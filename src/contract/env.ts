/**
 * The contract between the webhook and the sidecar: every environment variable
 * the webhook may set on the sidecar container, and what it means. The webhook
 * writes these names; the sidecar reads them. Both import this file, so a rename
 * breaks the build instead of silently breaking delivery.
 *
 * `source` tells who fills the variable:
 * - `downward`: the webhook wires it to the Downward API (fieldRef/label);
 * - `settings`: the webhook copies it from the resolved settings (plain env);
 * - `secret`:   only ever set through `valueFrom.secretKeyRef`, never inline.
 */

export type EnvSource = 'downward' | 'settings' | 'secret';

export interface EnvVarSpec {
  readonly name: string;
  readonly source: EnvSource;
  /** Default the sidecar applies when the variable is unset, as text. */
  readonly default?: string;
  readonly description: string;
}

function spec<const T extends EnvVarSpec>(s: T): T {
  return s;
}

export const ENV = {
  // --- identity, from the Downward API -----------------------------------
  POD_NAME: spec({ name: 'POD_NAME', source: 'downward', description: 'Pod name (metadata.name). Also used in the node-mode subPathExpr.' }),
  POD_NAMESPACE: spec({ name: 'POD_NAMESPACE', source: 'downward', description: 'Pod namespace (metadata.namespace). Also used in the node-mode subPathExpr.' }),
  POD_UID: spec({ name: 'POD_UID', source: 'downward', description: 'Pod uid (metadata.uid). Also used in the node-mode subPathExpr.' }),
  NODE_NAME: spec({ name: 'NODE_NAME', source: 'downward', description: 'Node the pod runs on (spec.nodeName).' }),
  JOB_NAME: spec({ name: 'JOBHARVEST_JOB_NAME', source: 'downward', description: "Job name, from the pod label batch.kubernetes.io/job-name." }),
  JOB_UID: spec({ name: 'JOBHARVEST_JOB_UID', source: 'downward', description: "Job uid, from the pod label batch.kubernetes.io/controller-uid (a Job has no uid yet at admission). OTLP resource attribute k8s.job.uid." }),
  CRONJOB_NAME: spec({ name: 'JOBHARVEST_CRONJOB_NAME', source: 'settings', description: "The name of the CronJob that owns the Job (its controller ownerReference, read at admission); set only then. OTLP resource attribute k8s.cronjob.name." }),
  CRONJOB_UID: spec({ name: 'JOBHARVEST_CRONJOB_UID', source: 'settings', description: "That CronJob's uid; set only with JOBHARVEST_CRONJOB_NAME. OTLP resource attribute k8s.cronjob.uid." }),
  SERVICE_NAME: spec({ name: 'JOBHARVEST_SERVICE_NAME', source: 'settings', description: "OTLP service.name as the pod template names it: its annotation resource.opentelemetry.io/service.name, else its label app.kubernetes.io/name; set only then. Unset, the sidecar falls back to the CronJob's name, the Job's, then the pod's (OpenTelemetry's Kubernetes service.name rules)." }),
  SELF_CONTAINER: spec({ name: 'JOBHARVEST_SELF_CONTAINER', source: 'settings', default: 'jobharvest', description: "The sidecar's own container name; its own logs are not shipped, to avoid a feedback loop." }),

  // --- source --------------------------------------------------------------
  MODE: spec({ name: 'JOBHARVEST_MODE', source: 'settings', default: 'node', description: 'Where logs are read: `node` (the pod log directory) or `api` (pods/log through the API server). The webhook resolves `auto` before setting it.' }),
  LOG_DIR: spec({ name: 'JOBHARVEST_LOG_DIR', source: 'settings', default: '/var/log/jobharvest/pod', description: "node mode: the mounted pod log directory (<ns>_<pod>_<uid>)." }),
  STATE_DIR: spec({ name: 'JOBHARVEST_STATE_DIR', source: 'settings', default: '/var/lib/jobharvest', description: 'Checkpoints and the dead-letter file; an emptyDir so they survive sidecar restarts.' }),

  // --- sink ----------------------------------------------------------------
  SINK: spec({ name: 'JOBHARVEST_SINK', source: 'settings', default: 'stdout', description: 'Sink type: http, loki, elasticsearch, otlp, syslog, forward, stdout.' }),
  ENDPOINT: spec({ name: 'JOBHARVEST_ENDPOINT', source: 'settings', description: 'Sink endpoint URL (http/https/tcp/tls). Required for every sink but stdout.' }),
  HEADERS: spec({ name: 'JOBHARVEST_HEADERS', source: 'settings', description: 'Extra request headers as comma-separated name=value pairs (not for secrets).' }),
  COMPRESSION: spec({ name: 'JOBHARVEST_COMPRESSION', source: 'settings', description: 'Request body codec: `gzip` (the default, at JOBHARVEST_GZIP_LEVEL), `zstd` (level 1; otlp and http sinks, falling back to gzip when the server refuses it) or `none`. A sink that does not take the codec uses gzip (loki, elasticsearch, forward) or nothing (syslog, stdout).' }),
  GZIP: spec({ name: 'JOBHARVEST_GZIP', source: 'settings', default: 'true', description: 'Older switch, read only when JOBHARVEST_COMPRESSION is unset: `false` means `none`.' }),
  TLS_CA_FILE: spec({ name: 'JOBHARVEST_TLS_CA_FILE', source: 'settings', description: 'PEM file of CAs trusted for the sink endpoint.' }),
  TLS_CERT_FILE: spec({ name: 'JOBHARVEST_TLS_CERT_FILE', source: 'settings', description: 'PEM client certificate for mutual TLS.' }),
  TLS_KEY_FILE: spec({ name: 'JOBHARVEST_TLS_KEY_FILE', source: 'settings', description: 'PEM client key for mutual TLS.' }),
  TLS_INSECURE: spec({ name: 'JOBHARVEST_TLS_INSECURE_SKIP_VERIFY', source: 'settings', default: 'false', description: 'Skip server certificate verification (testing only).' }),
  AUTH_TOKEN: spec({ name: 'JOBHARVEST_AUTH_TOKEN', source: 'secret', description: 'Bearer token sent as Authorization. Only from a Secret.' }),
  AUTH_USERNAME: spec({ name: 'JOBHARVEST_AUTH_USERNAME', source: 'secret', description: 'Basic-auth user name. Only from a Secret.' }),
  AUTH_PASSWORD: spec({ name: 'JOBHARVEST_AUTH_PASSWORD', source: 'secret', description: 'Basic-auth password. Only from a Secret.' }),
  SHARED_KEY: spec({ name: 'JOBHARVEST_SHARED_KEY', source: 'secret', description: 'forward sink: shared key for Fluentd authentication. Only from a Secret.' }),

  // --- sink-specific -------------------------------------------------------
  ES_INDEX: spec({ name: 'JOBHARVEST_ES_INDEX', source: 'settings', default: 'jobharvest', description: 'elasticsearch sink: target index or data stream.' }),
  OTLP_ENCODING: spec({ name: 'JOBHARVEST_OTLP_ENCODING', source: 'settings', default: 'protobuf', description: 'otlp sink: protobuf or json.' }),
  LOKI_TENANT: spec({ name: 'JOBHARVEST_LOKI_TENANT', source: 'settings', description: 'loki sink: X-Scope-OrgID tenant.' }),
  FORWARD_TAG: spec({ name: 'JOBHARVEST_FORWARD_TAG', source: 'settings', default: 'kube.${namespace}.${job}.${container}', description: 'forward sink: tag template; ${namespace} ${pod} ${container} ${job} ${stream} are replaced.' }),
  SYSLOG_SEVERITY: spec({ name: 'JOBHARVEST_SYSLOG_SEVERITY', source: 'settings', default: 'stdout=info,stderr=err', description: 'syslog sink: severity per stream.' }),
  SYSLOG_MAX_MESSAGE_BYTES: spec({ name: 'JOBHARVEST_SYSLOG_MAX_MESSAGE_BYTES', source: 'settings', default: '65536', description: "syslog sink: receiver's message size limit; longer messages are truncated with a marker." }),

  // --- pipeline --------------------------------------------------------------
  DRAIN_SECONDS: spec({ name: 'JOBHARVEST_DRAIN_SECONDS', source: 'settings', default: '25', description: 'After SIGTERM, how long the sidecar may spend reading to EOF, flushing and waiting for acks.' }),
  MAX_RECORD_BYTES: spec({ name: 'JOBHARVEST_MAX_RECORD_BYTES', source: 'settings', default: '262144', description: 'Cap on one reassembled record; longer ones are truncated with a marker.' }),
  BATCH_MAX_BYTES: spec({ name: 'JOBHARVEST_BATCH_MAX_BYTES', source: 'settings', default: '1048576', description: 'Flush a batch when it reaches this many bytes.' }),
  BATCH_MAX_RECORDS: spec({ name: 'JOBHARVEST_BATCH_MAX_RECORDS', source: 'settings', default: '5000', description: 'Flush a batch when it reaches this many records.' }),
  BATCH_MAX_WAIT_MS: spec({ name: 'JOBHARVEST_BATCH_MAX_WAIT_MS', source: 'settings', default: '1000', description: 'Flush a non-empty batch after this long.' }),
  MAX_IN_FLIGHT: spec({ name: 'JOBHARVEST_MAX_IN_FLIGHT', source: 'settings', default: '4', description: 'Requests in flight at once; more pauses reading (backpressure).' }),
  METRICS_PORT: spec({ name: 'JOBHARVEST_METRICS_PORT', source: 'settings', default: '0', description: 'Serve Prometheus metrics on this port; 0 turns it off. The webhook always sets it, so that a Service named jobharvest-metrics cannot set it through service links (src/contract/service-links.ts).' }),
  POLL_MS: spec({ name: 'JOBHARVEST_POLL_MS', source: 'settings', default: '500', description: 'node mode: how often directories and files are re-checked besides file-system events (at most 1000).' }),
  REQUEST_TIMEOUT_MS: spec({ name: 'JOBHARVEST_REQUEST_TIMEOUT_MS', source: 'settings', default: '30000', description: 'A request with no answer after this long is abandoned and retried.' }),
  AUTH_SCHEME: spec({ name: 'JOBHARVEST_AUTH_SCHEME', source: 'settings', default: 'Bearer', description: 'Scheme put before JOBHARVEST_AUTH_TOKEN in Authorization (e.g. Bearer, ApiKey).' }),
  GZIP_LEVEL: spec({ name: 'JOBHARVEST_GZIP_LEVEL', source: 'settings', default: '1', description: 'gzip level 1-9 for request bodies; 1 trades a little size for much less CPU.' }),
  FAILURE_EXIT_CODE: spec({ name: 'JOBHARVEST_FAILURE_EXIT_CODE', source: 'settings', default: '3', description: "Exit code when the sidecar ends without having delivered everything (outcome=incomplete), 1-255. The webhook sets it only for a Job whose podFailurePolicy has onExitCodes rules without containerName, to a code none of them matches." }),
  DEAD_LETTER_MAX_BYTES: spec({ name: 'JOBHARVEST_DEAD_LETTER_MAX_BYTES', source: 'settings', default: '33554432', description: 'Cap on the dead-letter file in the state volume, in bytes (half the default 64Mi emptyDir, which the kubelet evicts the pod for exceeding); records past it are counted, not written.' }),
  TERMINATION_LOG: spec({ name: 'JOBHARVEST_TERMINATION_LOG', source: 'settings', default: '/dev/termination-log', description: "File the outcome and the resume positions are written to (the container's terminationMessagePath); rewritten after every checkpoint and at exit. A file that cannot be written is reported once and then left alone." }),
  LOG_LEVEL: spec({ name: 'JOBHARVEST_LOG_LEVEL', source: 'settings', default: 'info', description: "The sidecar's own stderr log level: debug, info, warn, error." }),

  // --- syslog and forward sinks ------------------------------------------------
  SYSLOG_PROTOCOL: spec({ name: 'JOBHARVEST_SYSLOG_PROTOCOL', source: 'settings', default: 'octet-counting', description: 'syslog sink: `octet-counting` (RFC 6587 framing over the tcp:// or tls:// endpoint; no acknowledgements) or `relp` (RELP; the receiver acknowledges every message).' }),
  SYSLOG_FACILITY: spec({ name: 'JOBHARVEST_SYSLOG_FACILITY', source: 'settings', default: 'user', description: 'syslog sink: facility, by name (kern, user, daemon, local0..local7, ...) or number 0-23.' }),
  SYSLOG_SD_ID: spec({ name: 'JOBHARVEST_SYSLOG_SD_ID', source: 'settings', default: 'k8s@32473', description: 'syslog sink: SD-ID of the structured-data element carrying the Kubernetes metadata (name@<private enterprise number>).' }),
  FORWARD_MODE: spec({ name: 'JOBHARVEST_FORWARD_MODE', source: 'settings', default: 'packed-forward', description: 'forward sink: `packed-forward` (entries as one msgpack stream, gzip-compressed unless JOBHARVEST_COMPRESSION is none) or `forward` (entries as a msgpack array).' }),

  // --- record shaping (all off by default) ---------------------------------------
  MULTILINE: spec({ name: 'JOBHARVEST_MULTILINE', source: 'settings', default: '', description: 'Join consecutive lines of one container stream into one record: a comma-separated list of built-in rules (python, java, go, nodejs). Empty turns joining off unless JOBHARVEST_MULTILINE_START is set.' }),
  MULTILINE_START: spec({ name: 'JOBHARVEST_MULTILINE_START', source: 'settings', description: 'A custom start-of-event pattern (RE2 syntax, matched in linear time against the first 1024 bytes of each line, at most 320 instructions): a line that matches starts a new record, any other line joins the one before. An invalid pattern stops the sidecar at start-up with a configuration error.' }),
  MULTILINE_MAX_LINES: spec({ name: 'JOBHARVEST_MULTILINE_MAX_LINES', source: 'settings', default: '500', description: 'A joined record ends after this many lines.' }),
  MULTILINE_MAX_BYTES: spec({ name: 'JOBHARVEST_MULTILINE_MAX_BYTES', source: 'settings', default: '262144', description: 'A joined record ends before it would exceed this many message bytes (at most JOBHARVEST_MAX_RECORD_BYTES).' }),
  MULTILINE_FLUSH_MS: spec({ name: 'JOBHARVEST_MULTILINE_FLUSH_MS', source: 'settings', default: '1000', description: 'A joined record with no new line for this long is sent as it is.' }),
  PARSE: spec({ name: 'JOBHARVEST_PARSE', source: 'settings', default: 'none', description: '`json`: a line that is a JSON object also becomes fields (kept under a fixed namespace per sink); any other line stays a plain message. `none`: every line is a plain message.' }),
  JSON_MAX_FIELDS: spec({ name: 'JOBHARVEST_JSON_MAX_FIELDS', source: 'settings', default: '64', description: 'json parsing: at most this many fields (all levels counted); a wider object stays a plain message.' }),
  JSON_MAX_DEPTH: spec({ name: 'JOBHARVEST_JSON_MAX_DEPTH', source: 'settings', default: '4', description: 'json parsing: objects nested deeper than this are kept as JSON text in their field.' }),
  JSON_ORIGINAL: spec({ name: 'JOBHARVEST_JSON_ORIGINAL', source: 'settings', default: 'lossy', description: 'json parsing, otlp sink: when a JSON record also carries its line as written (`log.record.original`). `lossy`: only when its map body cannot hold every value of the line exactly (a number a double cannot carry, an escaped surrogate half, keys JSON.parse merges or reorders, a mask rewrote a field). `always`: on every JSON record.' }),
  MASK: spec({ name: 'JOBHARVEST_MASK', source: 'settings', default: '', description: 'Built-in masks applied before a record leaves the pod: a comma-separated list of bearer, aws-access-key, private-key, password, url-userinfo, or `all`. Empty: off. Masks read what a JSON reader reads (escapes decoded, serialized bodies inside strings read again).' }),
  MASK_PATTERNS: spec({ name: 'JOBHARVEST_MASK_PATTERNS', source: 'settings', description: "Operator masks: a JSON array of RE2 patterns (matched in linear time); every match, in the message and in JSON field values, is replaced by JOBHARVEST_MASK_REPLACEMENT. Set from the chart only, never from a tenant's annotation." }),
  MASK_REPLACEMENT: spec({ name: 'JOBHARVEST_MASK_REPLACEMENT', source: 'settings', default: '[MASKED]', description: 'What a masked match is replaced with.' }),
  JOB_LABELS: spec({ name: 'JOBHARVEST_JOB_LABELS', source: 'settings', description: "The Job's labels the operator chose to carry, read at admission: a JSON object of key to value. Shipped as fields (k8s.job.label.<key>), Loki structured metadata." }),
  JOB_ANNOTATIONS: spec({ name: 'JOBHARVEST_JOB_ANNOTATIONS', source: 'settings', description: "The Job's annotations the operator chose to carry, read at admission: a JSON object of key to value. Shipped as fields (k8s.job.annotation.<key>)." }),
  LOKI_STREAM_LABELS: spec({ name: 'JOBHARVEST_LOKI_STREAM_LABELS', source: 'settings', description: 'loki sink: comma-separated carried label keys to make stream labels as well (each value adds streams: mind the cardinality).' }),
  LOKI_MAX_METADATA: spec({ name: 'JOBHARVEST_LOKI_MAX_METADATA', source: 'settings', default: '32', description: 'loki sink: at most this many JSON and carried fields become structured metadata per entry.' }),

  // --- api mode ------------------------------------------------------------------
  KUBE_API_URL: spec({ name: 'JOBHARVEST_KUBE_API_URL', source: 'settings', description: 'api mode: base URL of the Kubernetes API (https://host:port). Unset, the sidecar uses https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, which the kubelet sets in every container.' }),
  KUBE_TOKEN_DIR: spec({ name: 'JOBHARVEST_KUBE_TOKEN_DIR', source: 'settings', default: '/var/run/secrets/kubernetes.io/serviceaccount', description: 'api mode: directory with the service-account `token` (re-read every minute and after a 401, because projected tokens rotate) and `ca.crt`, the CA of the API server.' }),
} as const;

export type EnvKey = keyof typeof ENV;

/** All variable names, for docs and the docs-vs-code test. */
export const ENV_NAMES: readonly string[] = Object.values(ENV).map((v) => v.name);

/** Names of the Downward-API variables the node-mode subPathExpr is built from. */
export const SUBPATH_EXPR = `$(${ENV.POD_NAMESPACE.name})_$(${ENV.POD_NAME.name})_$(${ENV.POD_UID.name})`;

/** Container, volume and annotation names shared by both sides. */
export const NAMES = {
  container: 'jobharvest',
  stateVolume: 'jobharvest-state',
  logVolume: 'jobharvest-pod-logs',
  tokenVolume: 'jobharvest-token',
  stateMountPath: '/var/lib/jobharvest',
  logMountPath: '/var/log/jobharvest/pod',
  tokenMountPath: '/var/run/secrets/kubernetes.io/serviceaccount',
  tlsVolume: 'jobharvest-tls',
  tlsMountPath: '/etc/jobharvest/tls',
} as const;

export const SINKS = ['http', 'loki', 'elasticsearch', 'otlp', 'syslog', 'forward', 'stdout'] as const;
export type SinkType = (typeof SINKS)[number];

/** Values of JOBHARVEST_JSON_ORIGINAL. */
export const JSON_ORIGINAL = ['lossy', 'always'] as const;
export type JsonOriginal = (typeof JSON_ORIGINAL)[number];

export const MODES = ['node', 'api'] as const;
export type SourceMode = (typeof MODES)[number];
