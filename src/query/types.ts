import type { RecordFlag } from '../contract/record.ts';

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
}

export class QueryError extends Error {}

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
 * to the record id, whose offset part is compared as a number.
 */
export function compareLines(a: LogLine, b: LogLine): number {
  if (a.ns !== b.ns) return a.ns < b.ns ? -1 : 1;
  const [pa, oa] = splitId(a.id);
  const [pb, ob] = splitId(b.id);
  if (pa !== pb) return pa < pb ? -1 : 1;
  return oa - ob;
}

function splitId(id: string): [string, number] {
  const dash = id.lastIndexOf('-');
  const off = Number(id.slice(dash + 1));
  return dash >= 0 && Number.isFinite(off) ? [id.slice(0, dash), off] : [id, 0];
}
