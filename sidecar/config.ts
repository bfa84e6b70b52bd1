// Turns the environment (the contract in src/contract/env.ts) into one typed
// settings object, collecting every problem so that a bad pod spec fails with
// one clear line instead of a crash somewhere deep in the pipeline.
import type { LookupFunction } from 'node:net';
import { isEndpointScheme } from '../src/contract/endpoint.ts';
import { esIndexProblem, headerNameProblem, headerValueProblem, lokiTenantProblem } from '../src/contract/values.ts';
import { ENV, MODES, SINKS, type EnvKey, type SinkType, type SourceMode } from '../src/contract/env.ts';
import { parseShaping, shapingOn, type ShapingSettings } from './shaping-settings.ts';
import { CODECS, codecFor, configuredCodec, type Codec } from '../src/contract/codec.ts';
import { zstdAvailable } from './encode/compress.ts';
import { LOG_LEVELS, type LogLevel } from '../src/contract/log.ts';

export type { LogLevel };
export type OtlpEncoding = 'protobuf' | 'json';

export interface Identity {
  readonly namespace: string;
  readonly pod: string;
  readonly podUid: string;
  readonly node: string;
  readonly job: string;
  /** The Job's uid (from the pod's label); absent: unknown. */
  readonly jobUid?: string;
  /** The CronJob that owns the Job, as the webhook read it at admission; absent: none. */
  readonly cronJob?: { readonly name: string; readonly uid: string };
  /** service.name as the pod template names it; absent: the fallback of serviceNameOf (src/contract/record.ts). */
  readonly serviceName?: string;
  /** The Job's labels the operator chose to carry, set at admission; absent: none. */
  readonly labels?: Readonly<Record<string, string>>;
  /** The Job's annotations the operator chose to carry; absent: none. */
  readonly annotations?: Readonly<Record<string, string>>;
}

export interface TlsSettings {
  readonly caFile?: string;
  readonly certFile?: string;
  readonly keyFile?: string;
  readonly insecureSkipVerify: boolean;
}

export interface AuthSettings {
  readonly token?: string;
  readonly scheme: string;
  readonly username?: string;
  readonly password?: string;
}

/** The bearer token and the CA for the Kubernetes API, read again as they rotate. */
export interface KubeCredentials {
  readonly token: string;
  readonly ca?: Buffer;
}

/**
 * api mode: where the Kubernetes API is and how to authenticate. The sidecar
 * reads its pod's service-account token from `tokenDir`; a program that uses
 * the engine as a library (the harvester) passes its own `credentials`.
 */
export type KubeSettings = { readonly apiUrl: URL } & (
  | { readonly tokenDir: string; readonly credentials?: undefined }
  | { readonly credentials: () => Promise<KubeCredentials>; readonly tokenDir?: undefined }
);

/**
 * What the engine needs to run, whoever embeds it: the sidecar builds it from
 * the env contract (loadConfig), the harvester from its own settings. Process
 * concerns (log level, metrics port, termination message, exit code) are not
 * here: they are the sidecar's Config below.
 */
export interface EngineOptions {
  readonly identity: Identity;
  /** The container the engine does not read: the sidecar's own. */
  readonly selfContainer: string;
  readonly mode: SourceMode;
  /** node mode: the pod's log directory. */
  readonly logDir?: string;
  /** node mode: how often a file at its end is looked at again. */
  readonly pollMs?: number;
  /** Where the default checkpoint and dead-letter files go; needed only when the pipeline is not given both backends. */
  readonly stateDir?: string;
  readonly sink: SinkType;
  readonly endpoint?: URL;
  readonly headers: Readonly<Record<string, string>>;
  /** The request body codec, already one the sink takes (src/contract/codec.ts). */
  readonly compression: Codec;
  /** Why `compression` differs from what the env asked for, logged once at start. */
  readonly compressionNote?: string;
  readonly gzipLevel: number;
  readonly tls: TlsSettings;
  readonly auth: AuthSettings;
  readonly esIndex: string;
  readonly otlpEncoding: OtlpEncoding;
  readonly lokiTenant?: string;
  /** Carried label keys that become Loki stream labels too; absent: none (the harvester sets neither). */
  readonly lokiStreamLabels?: readonly string[];
  /** Most JSON and carried fields a Loki entry carries as structured metadata; absent: the contract default. */
  readonly lokiMaxMetadata?: number;
  readonly drainMs: number;
  readonly maxRecordBytes: number;
  readonly batchMaxBytes: number;
  readonly batchMaxRecords: number;
  readonly batchMaxWaitMs: number;
  readonly maxInFlight: number;
  readonly requestTimeoutMs: number;
  /** Cap on the default dead-letter file in the state directory. */
  readonly deadLetterMaxBytes?: number;
  /** Set in api mode only. */
  readonly kube?: KubeSettings;
  /** Cap on a successful answer kept in memory; default 32 MiB. Error answers are always cut at 64 KiB. */
  readonly maxResponseBytes?: number;
  /**
   * Multiline joining, JSON fields, masking; absent when all are off (the
   * default), and then no shaping code is loaded. RE2 patterns in it are
   * compiled, and refused with a ConfigError, when the stage is built.
   */
  readonly shaping?: ShapingSettings;
  /**
   * Resolves the sink endpoint's name when a sink connection is dialled;
   * absent (the sidecar): the system resolver. The harvester passes one that
   * refuses addresses its destination does not allow. Never used for the
   * Kubernetes API.
   */
  readonly lookup?: LookupFunction;
}

/** The sidecar process's settings: the engine's, with its node-mode and state settings always set, and what only the process uses. */
export interface Config extends EngineOptions {
  readonly logDir: string;
  readonly pollMs: number;
  readonly stateDir: string;
  readonly deadLetterMaxBytes: number;
  readonly metricsPort: number;
  readonly logLevel: LogLevel;
  /** Exit code of a drain that did not deliver everything. */
  readonly failureExitCode: number;
  /** The termination message file; empty: none. */
  readonly terminationLog: string;
}

export class ConfigError extends Error {
  constructor(readonly problems: readonly string[]) {
    super(`invalid configuration: ${problems.join('; ')}`);
    this.name = 'ConfigError';
  }
}

type Env = Readonly<Record<string, string | undefined>>;

class Reader {
  readonly problems: string[] = [];
  constructor(private readonly env: Env) {}

  raw(key: EnvKey): string | undefined {
    const v = this.env[ENV[key].name];
    if (v !== undefined && v.trim() !== '') return v.trim();
    const d: string | undefined = (ENV[key] as { default?: string }).default;
    return d;
  }

  str(key: EnvKey): string {
    return this.raw(key) ?? '';
  }

  /** A value the sink puts on the wire as is: refused here, not by every request later. */
  checkedRaw(key: EnvKey, problem: (v: string) => string | undefined): string | undefined {
    const v = this.raw(key);
    const why = v === undefined ? undefined : problem(v);
    if (why !== undefined) this.problems.push(`${ENV[key].name}: ${why}`);
    return why === undefined ? v : undefined;
  }

  checked(key: EnvKey, problem: (v: string) => string | undefined): string {
    return this.checkedRaw(key, problem) ?? '';
  }

  required(key: EnvKey): string {
    const v = this.raw(key);
    if (v === undefined || v === '') this.problems.push(`${ENV[key].name} is required`);
    return v ?? '';
  }

  int(key: EnvKey, min: number, max: number): number {
    const v = this.raw(key) ?? '';
    const n = /^-?\d+$/.test(v) ? Number(v) : NaN;
    if (!Number.isSafeInteger(n) || n < min || n > max) {
      this.problems.push(`${ENV[key].name} must be an integer from ${min} to ${max}, got '${v}'`);
      return min;
    }
    return n;
  }

  bool(key: EnvKey): boolean {
    const v = (this.raw(key) ?? '').toLowerCase();
    if (['true', '1', 'yes', 'on'].includes(v)) return true;
    if (['false', '0', 'no', 'off', ''].includes(v)) return false;
    this.problems.push(`${ENV[key].name} must be true or false, got '${v}'`);
    return false;
  }

  oneOf<T extends string>(key: EnvKey, allowed: readonly T[]): T {
    const v = this.raw(key) ?? '';
    if ((allowed as readonly string[]).includes(v)) return v as T;
    this.problems.push(`${ENV[key].name} must be one of ${allowed.join(', ')}, got '${v}'`);
    return allowed[0] as T;
  }
}

/**
 * A JSON object of string values, as the webhook writes the carried labels
 * and annotations. Anything else is refused here: a value shipped as a field
 * of every record must not turn out to be an object at the log server.
 */
function parseStringMap(r: Reader, key: 'JOB_LABELS' | 'JOB_ANNOTATIONS'): Record<string, string> | undefined {
  const text = r.raw(key);
  if (text === undefined || text === '') return undefined;
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    r.problems.push(`${ENV[key].name} is not valid JSON`);
    return undefined;
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) {
    r.problems.push(`${ENV[key].name} must be a JSON object of key to value`);
    return undefined;
  }
  const out: Record<string, string> = {};
  for (const [k, x] of Object.entries(v)) {
    if (typeof x !== 'string') {
      r.problems.push(`${ENV[key].name}: the value of '${k.slice(0, 63)}' must be a string`);
      continue;
    }
    if (k === '') {
      r.problems.push(`${ENV[key].name}: an empty key`);
      continue;
    }
    out[k] = x;
  }
  return Object.keys(out).length > 0 ? out : undefined;
}

/** Header names and values go on the wire as given; reject what Node would throw on later. */
function parseHeaders(text: string, problems: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  if (!text) return out;
  for (const part of text.split(',')) {
    if (part.trim() === '') continue;
    const eq = part.indexOf('=');
    const name = eq > 0 ? part.slice(0, eq).trim() : '';
    const value = eq > 0 ? part.slice(eq + 1).trim() : '';
    const why = eq > 0 ? (headerNameProblem(name) ?? headerValueProblem(value)) : 'want name=value';
    if (why !== undefined) {
      problems.push(`${ENV.HEADERS.name} has an invalid entry '${part.trim().slice(0, 40)}' (${why})`);
      continue;
    }
    out[name.toLowerCase()] = value;
  }
  return out;
}

function compression(r: Reader, sink: SinkType): { compression: Codec; compressionNote?: string } {
  const asked = r.raw('COMPRESSION');
  const wanted = configuredCodec(asked, r.bool('GZIP'));
  if (wanted === undefined) {
    r.problems.push(`${ENV.COMPRESSION.name} must be one of ${CODECS.join(', ')}, got '${asked}'`);
    return { compression: codecFor(sink, 'gzip').codec };
  }
  if (wanted === 'zstd' && !zstdAvailable()) {
    r.problems.push(`${ENV.COMPRESSION.name}=zstd: this Node.js has no zlib.zstdCompressSync (Node 22.15 or newer has it)`);
  }
  const { codec, note } = codecFor(sink, wanted);
  return note ? { compression: codec, compressionNote: note } : { compression: codec };
}

export function loadConfig(env: Env): Config {
  const r = new Reader(env);
  let identity: Identity = {
    namespace: r.required('POD_NAMESPACE'),
    pod: r.required('POD_NAME'),
    podUid: r.required('POD_UID'),
    node: r.str('NODE_NAME'),
    job: r.str('JOB_NAME'),
  };
  const jobUid = r.str('JOB_UID');
  const cronJobName = r.str('CRONJOB_NAME');
  const serviceName = r.str('SERVICE_NAME');
  if (jobUid) identity = { ...identity, jobUid };
  if (cronJobName) identity = { ...identity, cronJob: { name: cronJobName, uid: r.str('CRONJOB_UID') } };
  if (serviceName) identity = { ...identity, serviceName };
  const labels = parseStringMap(r, 'JOB_LABELS');
  const annotations = parseStringMap(r, 'JOB_ANNOTATIONS');
  if (labels) identity = { ...identity, labels };
  if (annotations) identity = { ...identity, annotations };
  const lokiStreamLabels = r
    .str('LOKI_STREAM_LABELS')
    .split(',')
    .map((k) => k.trim())
    .filter((k) => k !== '');
  // No check against the carried labels: the setting is the operator's for every Job, and a Job without one of the keys simply gets no such label.
  const sink = r.oneOf<SinkType>('SINK', SINKS);
  const endpointText = r.raw('ENDPOINT');
  let endpoint: URL | undefined;
  if (endpointText) {
    try {
      endpoint = new URL(endpointText);
      if (!isEndpointScheme(endpoint.protocol)) {
        r.problems.push(`${ENV.ENDPOINT.name} has an unsupported scheme '${endpoint.protocol}'`);
      }
    } catch {
      r.problems.push(`${ENV.ENDPOINT.name} is not a valid URL`);
    }
  } else if (sink !== 'stdout') {
    r.problems.push(`${ENV.ENDPOINT.name} is required for sink '${sink}'`);
  }
  const tls: TlsSettings = {
    caFile: r.raw('TLS_CA_FILE'),
    certFile: r.raw('TLS_CERT_FILE'),
    keyFile: r.raw('TLS_KEY_FILE'),
    insecureSkipVerify: r.bool('TLS_INSECURE'),
  };
  if (Boolean(tls.certFile) !== Boolean(tls.keyFile)) {
    r.problems.push(`${ENV.TLS_CERT_FILE.name} and ${ENV.TLS_KEY_FILE.name} must be set together`);
  }
  const auth: AuthSettings = {
    token: r.raw('AUTH_TOKEN'),
    scheme: r.str('AUTH_SCHEME'),
    username: r.raw('AUTH_USERNAME'),
    password: r.raw('AUTH_PASSWORD'),
  };
  if (auth.token && auth.username) {
    r.problems.push(`set either ${ENV.AUTH_TOKEN.name} or ${ENV.AUTH_USERNAME.name}, not both`);
  }
  if (auth.password && !auth.username) {
    r.problems.push(`${ENV.AUTH_PASSWORD.name} needs ${ENV.AUTH_USERNAME.name}`);
  }
  const cfg: Config = {
    identity,
    selfContainer: r.str('SELF_CONTAINER'),
    mode: r.oneOf<SourceMode>('MODE', MODES),
    logDir: r.str('LOG_DIR'),
    stateDir: r.str('STATE_DIR'),
    sink,
    endpoint,
    headers: parseHeaders(r.str('HEADERS'), r.problems),
    ...compression(r, sink),
    gzipLevel: r.int('GZIP_LEVEL', 1, 9),
    tls,
    auth,
    esIndex: r.checked('ES_INDEX', esIndexProblem),
    otlpEncoding: r.oneOf<OtlpEncoding>('OTLP_ENCODING', ['protobuf', 'json']),
    lokiTenant: r.checkedRaw('LOKI_TENANT', lokiTenantProblem),
    lokiStreamLabels,
    lokiMaxMetadata: r.int('LOKI_MAX_METADATA', 0, 1000),
    drainMs: r.int('DRAIN_SECONDS', 1, 86_400) * 1000,
    maxRecordBytes: r.int('MAX_RECORD_BYTES', 1024, 64 * 1024 * 1024),
    batchMaxBytes: r.int('BATCH_MAX_BYTES', 1024, 64 * 1024 * 1024),
    batchMaxRecords: r.int('BATCH_MAX_RECORDS', 1, 1_000_000),
    batchMaxWaitMs: r.int('BATCH_MAX_WAIT_MS', 1, 600_000),
    maxInFlight: r.int('MAX_IN_FLIGHT', 1, 256),
    metricsPort: r.int('METRICS_PORT', 0, 65_535),
    pollMs: r.int('POLL_MS', 10, 1000),
    requestTimeoutMs: r.int('REQUEST_TIMEOUT_MS', 100, 3_600_000),
    logLevel: r.oneOf<LogLevel>('LOG_LEVEL', LOG_LEVELS),
    failureExitCode: r.int('FAILURE_EXIT_CODE', 0, 255),
    deadLetterMaxBytes: r.int('DEAD_LETTER_MAX_BYTES', 0, 1024 * 1024 * 1024),
    terminationLog: r.str('TERMINATION_LOG'),
  };
  const kube = cfg.mode === 'api' ? kubeSettings(r, env) : undefined;
  const shaping = parseShaping(env, cfg.maxRecordBytes);
  r.problems.push(...shaping.problems);
  if (r.problems.length > 0) throw new ConfigError(r.problems);
  const withShaping = shapingOn(shaping.settings) ? { ...cfg, shaping: shaping.settings } : cfg;
  return kube ? { ...withShaping, kube } : withShaping;
}

/**
 * In-cluster settings as client-go reads them: the kubelet puts
 * KUBERNETES_SERVICE_HOST/PORT into every container; JOBHARVEST_KUBE_API_URL
 * overrides them (tests, or a cluster reached through another address).
 */
function kubeSettings(r: Reader, env: Env): KubeSettings | undefined {
  const explicit = r.raw('KUBE_API_URL');
  const host = env.KUBERNETES_SERVICE_HOST?.trim();
  const port = env.KUBERNETES_SERVICE_PORT?.trim() || '443';
  let text: string;
  if (explicit) text = explicit;
  else if (host) text = `https://${host.includes(':') ? `[${host}]` : host}:${port}`;
  else {
    r.problems.push(`${ENV.MODE.name}=api needs KUBERNETES_SERVICE_HOST (set by the kubelet) or ${ENV.KUBE_API_URL.name}`);
    return undefined;
  }
  let apiUrl: URL;
  try {
    apiUrl = new URL(text);
  } catch {
    r.problems.push(`the Kubernetes API address '${text}' is not a valid URL`);
    return undefined;
  }
  if (apiUrl.protocol !== 'https:' && apiUrl.protocol !== 'http:') {
    r.problems.push(`${ENV.KUBE_API_URL.name} must be an http(s) URL, got '${apiUrl.protocol}'`);
    return undefined;
  }
  return { apiUrl, tokenDir: r.str('KUBE_TOKEN_DIR') };
}

/** `--help` text, generated from the contract so it never drifts from it. */
export function usage(): string {
  const lines = [
    'jobharvest sidecar: ships every container log of its own pod to a log server, losing nothing.',
    '',
    'Usage: node sidecar.mjs [--help]',
    '',
    'All settings come from environment variables:',
    '',
  ];
  for (const spec of Object.values(ENV) as Array<{ name: string; source: string; default?: string; description: string }>) {
    const def = spec.default !== undefined ? ` (default: ${spec.default === '' ? '""' : spec.default})` : '';
    const src = spec.source === 'secret' ? ' [secret]' : spec.source === 'downward' ? ' [downward API]' : '';
    lines.push(`  ${spec.name}${src}${def}`, `      ${spec.description}`);
  }
  lines.push('', 'On SIGTERM it reads all files to EOF, flushes, waits for acknowledgements, writes its', 'checkpoint and exits 0 within the drain budget, printing one JSON summary line on stderr.');
  return lines.join('\n') + '\n';
}
