import { RECORD_FLAGS, type RecordField, type RecordFlag } from '../contract/record.ts';

/** One log line as a query API returns it: what `kubectl logs` prints, what orders it, and the record's other fields where the server kept them. */
export interface LogLine {
  /** CRI timestamp in nanoseconds since the epoch. */
  ns: bigint;
  stream: string;
  message: string;
  pod: string;
  container: string;
  restart: number;
  /** The sidecar's deterministic record id: `<file prefix>-<byte offset>`. */
  id: string;
  namespace?: string;
  job?: string;
  podUid?: string;
  node?: string;
  /** The flags the sidecar set on the record, in contract order; absent when none. */
  flags?: RecordFlag[];
}

/** The flags a record's fields say are set, from any format's names for them. */
export function readFlags(get: (flag: RecordFlag) => unknown, names: readonly RecordFlag[]): RecordFlag[] | undefined {
  const set = names.filter((f) => {
    const v = get(f);
    return v === true || v === 'true';
  });
  return set.length ? set : undefined;
}

/**
 * A line from one stored record, whichever server returned it: `get` reads a
 * field by its contract name (each client maps that to the names its sink's
 * encoder wrote, src/contract/record.ts). The required fields read as '' (and
 * restart as 0) when absent; an optional one is kept when `present` says so.
 * Every client reads the same fields the same way here, so a line from Loki,
 * VictoriaLogs or Elasticsearch prints alike.
 */
export function lineOf(ns: bigint, message: string, get: (field: RecordField) => unknown, present: (value: unknown) => boolean = (v) => v !== undefined): LogLine {
  const text = (f: RecordField) => String(get(f) ?? '');
  const line: LogLine = { ns, message, stream: text('stream'), pod: text('pod'), container: text('container'), restart: Number(get('restart') ?? 0), id: text('id') };
  for (const k of ['namespace', 'job', 'podUid', 'node'] as const) {
    const v = get(k);
    if (present(v)) line[k] = String(v);
  }
  const flags = readFlags(get, RECORD_FLAGS);
  if (flags) line.flags = flags;
  return line;
}

/** What to fetch: one Job's lines, narrowed as the kubectl-like flags ask. */
export interface LogQuery {
  namespace: string;
  job: string;
  /** Only this pod. */
  pod?: string;
  /** Only these containers; undefined means all that were shipped. */
  containers?: string[];
  /** Inclusive lower bound, ns. */
  fromNs?: bigint;
  /** Exclusive upper bound, ns. */
  toNs?: bigint;
}

/** A query client pages through a backend; pager() turns its pages into one ordered stream. */
export interface QueryClient {
  readonly kind: string;
  lines(q: LogQuery, pageSize?: number): AsyncIterable<LogLine>;
  /**
   * The server's live tail, where it has one: lines from `fromNs` on as they
   * arrive, each once it is `lagMs` old, until `signal` aborts.
   */
  tail?(q: LogQuery, o: TailOptions): AsyncIterable<LogLine>;
  /**
   * The names of the Jobs of a namespace whose name matches `pattern` (an RE2
   * pattern anchored at both ends), with what the server counts of each, where
   * it can list them: a CronJob's runs after the TTL deleted their Jobs.
   */
  jobs?(namespace: string, pattern: string): Promise<JobRun[]>;
}

/** One Job as the log server knows it. */
export interface JobRun {
  job: string;
  /** Its lines, and the first and last line's time, where the server counts them. */
  lines?: number;
  firstNs?: bigint;
  lastNs?: bigint;
}

export interface TailOptions {
  fromNs: bigint;
  lagMs: number;
  refreshMs: number;
  nowMs: number;
  signal: AbortSignal;
}

export class QueryError extends Error {
  constructor(
    message: string,
    /** The HTTP status the server answered with, when it answered. */
    readonly status?: number,
    /** The server could not be reached or did not answer in time. */
    readonly network = false,
  ) {
    super(message);
  }
}

/** An error worth another try a moment later: unreachable, 429, or a 5xx but 501 (a shard still starting, say). */
export function transient(e: unknown): boolean {
  if (!(e instanceof QueryError)) return false;
  if (e.network) return true;
  return e.status === 429 || (e.status !== undefined && e.status >= 500 && e.status !== 501);
}

/** RFC 3339 with up to nine fraction digits → ns. */
export function parseTimeNs(text: string): bigint | undefined {
  const m = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$/.exec(text);
  if (!m) return undefined;
  const ms = Date.parse(`${m[1]}${m[3]}`);
  if (Number.isNaN(ms)) return undefined;
  return BigInt(ms) * 1_000_000n + BigInt((m[2] ?? '').padEnd(9, '0'));
}

/** ns → RFC 3339 in UTC with trailing fraction zeros trimmed: Go's RFC3339Nano, as the kubelet prints it. */
export function formatTimeNs(ns: bigint): string {
  const sec = ns / 1_000_000_000n;
  const frac = ns % 1_000_000_000n;
  const base = new Date(Number(sec) * 1000).toISOString().slice(0, 19);
  const f = frac === 0n ? '' : `.${frac.toString().padStart(9, '0').replace(/0+$/, '')}`;
  return `${base}${f}Z`;
}

/**
 * The order `kubectl logs` has within one file is byte order; across files,
 * pods and restarts the CRI timestamp decides. Ties at one nanosecond fall back
 * to the record id (`<file prefix>-<byte offset>`) in natural order, digit runs
 * compared as numbers: one file's offsets in numeric order, and the order
 * VictoriaLogs sorts strings in, so a server-sorted page and a local sort agree.
 */
export function compareLines(a: LogLine, b: LogLine): number {
  if (a.ns !== b.ns) return a.ns < b.ns ? -1 : 1;
  return compareNatural(a.id, b.id);
}

const RUN = /\d+|\D+/g;

/** Natural string order: digit runs by value (then by length, so `01` follows `1`), other runs by code unit. */
export function compareNatural(a: string, b: string): number {
  if (a === b) return 0;
  const ra = a.match(RUN) ?? [];
  const rb = b.match(RUN) ?? [];
  for (let i = 0; i < Math.min(ra.length, rb.length); i++) {
    const x = ra[i]!;
    const y = rb[i]!;
    if (x === y) continue;
    const dx = x.charCodeAt(0) >= 48 && x.charCodeAt(0) <= 57;
    const dy = y.charCodeAt(0) >= 48 && y.charCodeAt(0) <= 57;
    if (dx && dy) {
      const tx = x.replace(/^0+(?=\d)/, '');
      const ty = y.replace(/^0+(?=\d)/, '');
      if (tx.length !== ty.length) return tx.length - ty.length;
      if (tx !== ty) return tx < ty ? -1 : 1;
      return x.length - y.length;
    }
    if (dx !== dy) return dx ? -1 : 1;
    return x < y ? -1 : 1;
  }
  return ra.length - rb.length;
}
