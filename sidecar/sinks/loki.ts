// Loki push API (JSON). Labels stay low-cardinality (namespace, job, pod,
// container, stream, and only the carried labels the operator names);
// everything else rides along as structured metadata, which Loki indexes
// per entry without making streams. The original CRI timestamp is sent in
// nanoseconds.
import { ENV } from '../../src/contract/env.ts';
import { LOKI_LABELS as L, LOKI_METADATA as M, SHAPED_FIELDS, lokiName } from '../../src/contract/record.ts';
import { log } from '../log.ts';
import { nanosText, nowTime, parseTimestamp } from '../records/timestamp.ts';
import { FLAG_INCOMPLETE, FLAG_MALFORMED, FLAG_TRUNCATED, type FileMeta, type LogRecord } from '../records/record.ts';
import { withPath } from './http/client.ts';
import { attempt } from './http/result.ts';
import type { Sink } from '../delivery/sink.ts';
import type { SinkContext } from './types.ts';
import type { Identity } from '../config.ts';

export const LOKI_PUSH_PATH = '/loki/api/v1/push';

interface StreamGroup {
  readonly head: string;
  body: string;
}

export interface LokiOptions {
  /** Carried label keys that also become stream labels. */
  readonly streamLabels?: readonly string[];
  /** Most JSON and carried fields per entry as structured metadata; the rest stay in the line only. */
  readonly maxMetadata?: number;
}

const S = SHAPED_FIELDS.loki;
const DEFAULT_MAX_METADATA = Number(ENV.LOKI_MAX_METADATA.default);

/** What the pod's carried labels and annotations add to every stream and entry, worked out once per pod. */
interface Carried {
  readonly labels: Readonly<Record<string, string>>;
  /** `,"label_x":"v"...`, ready to append to an entry's metadata. */
  readonly meta: string;
  /** Room left for JSON fields. */
  readonly room: number;
}

const carriedCache = new WeakMap<Identity, Map<string, Carried>>();

function carriedOf(identity: Identity, o: LokiOptions): Carried {
  const max = o.maxMetadata ?? DEFAULT_MAX_METADATA;
  const cacheKey = `${max}\0${(o.streamLabels ?? []).join(',')}`;
  let byOptions = carriedCache.get(identity);
  const hit = byOptions?.get(cacheKey);
  if (hit) return hit;
  const labels: Record<string, string> = {};
  const names = new Set<string>();
  let meta = '';
  const stream = new Set(o.streamLabels ?? []);
  const add = (name: string, v: string): void => {
    if (names.has(name) || names.size >= max) return;
    names.add(name);
    meta += `,${jsonKey(name)}${JSON.stringify(v)}`;
  };
  for (const [k, v] of Object.entries(identity.labels ?? {})) {
    const name = lokiName(S.label, k);
    // A stream label is on every entry already: not repeated as metadata.
    if (stream.has(k)) labels[name] = v;
    else add(name, v);
  }
  for (const [k, v] of Object.entries(identity.annotations ?? {})) add(lokiName(S.annotation, k), v);
  const c: Carried = { labels, meta, room: max - names.size };
  if (!byOptions) carriedCache.set(identity, (byOptions = new Map()));
  byOptions.set(cacheKey, c);
  return c;
}

function labelsFor(identity: Identity, file: FileMeta, stream: string, carried: Carried): Record<string, string> {
  const labels: Record<string, string> = { [L.namespace]: identity.namespace };
  if (identity.job) labels[L.job] = identity.job;
  labels[L.pod] = identity.pod;
  labels[L.container] = file.container;
  labels[L.stream] = stream;
  return { ...labels, ...carried.labels };
}

/**
 * `json_<key>` for each top-level scalar field, up to the room the carried
 * fields left. Nested values and whatever does not fit are still in the
 * line, which LogQL's `| json` reads.
 */
function jsonMetadata(fields: NonNullable<LogRecord['fields']>, carried: Carried): string {
  let out = '';
  let room = carried.room;
  let taken: Set<string> | undefined;
  for (const k in fields) {
    if (room <= 0) break;
    const v = fields[k];
    if (typeof v !== 'string' && typeof v !== 'number' && typeof v !== 'boolean') continue;
    const name = lokiName(S.json, k);
    // Two keys may sanitise to one name ("a.b", "a_b"): Loki would keep either, so the first is kept.
    taken ??= new Set();
    if (taken.has(name)) continue;
    taken.add(name);
    out += `,${jsonKey(name)}${JSON.stringify(String(v))}`;
    room--;
  }
  return out;
}

const jsonKey = (name: string) => `${JSON.stringify(name)}:`;
const TRUNCATED = `,${jsonKey(M.truncated)}"true"`;
const MALFORMED = `,${jsonKey(M.malformed)}"true"`;
const INCOMPLETE = `,${jsonKey(M.incomplete)}"true"`;
const LINES = jsonKey(S.lines);

export function encodeLokiPush(identity: Identity, records: readonly LogRecord[], options: LokiOptions = {}): string {
  const groups = new Map<string, StreamGroup>();
  const carried = carriedOf(identity, options);
  const podMeta = `${jsonKey(M.podUid)}${JSON.stringify(identity.podUid)}${identity.node ? `,${jsonKey(M.node)}${JSON.stringify(identity.node)}` : ''}`;
  for (const r of records) {
    const key = `${r.file.container}\0${r.stream}`;
    let g = groups.get(key);
    if (!g) {
      g = { head: `{"stream":${JSON.stringify(labelsFor(identity, r.file, r.stream, carried))},"values":[`, body: '' };
      groups.set(key, g);
    }
    const t = parseTimestamp(r.ts) ?? nowTime();
    let meta = `{${podMeta},${jsonKey(M.restart)}"${r.file.restart}",${jsonKey(M.id)}"${r.file.idPrefix}${r.offset}"`;
    if (r.flags & FLAG_TRUNCATED) meta += TRUNCATED;
    if (r.flags & FLAG_MALFORMED) meta += MALFORMED;
    if (r.flags & FLAG_INCOMPLETE) meta += INCOMPLETE;
    meta += carried.meta;
    if (r.lines !== undefined && r.lines > 1) meta += `,${LINES}"${r.lines}"`;
    if (r.fields !== undefined) meta += jsonMetadata(r.fields, carried);
    g.body += (g.body ? ',' : '') + `["${nanosText(t)}",${JSON.stringify(r.message)},${meta}}]`;
  }
  let out = '{"streams":[';
  let first = true;
  for (const g of groups.values()) {
    out += (first ? '' : ',') + g.head + g.body + ']}';
    first = false;
  }
  return out + ']}';
}

export function createSink(ctx: SinkContext): Sink {
  const url = withPath(ctx.config.endpoint!, LOKI_PUSH_PATH);
  const client = ctx.http();
  // VictoriaLogs' Loki endpoint turns a JSON line into fields of its own and
  // drops it as the message (its _msg then reads "missing _msg field"), and a
  // tenant's "id" would replace jobharvest's: the line is sent to be kept as
  // written. Loki ignores the header. Fields are jobharvest's to give
  // (structured metadata, JOBHARVEST_PARSE=json).
  const headers: Record<string, string> = { 'vl-loki-disable-message-parsing': 'true', ...(ctx.config.lokiTenant ? { 'x-scope-orgid': ctx.config.lokiTenant } : {}) };
  const options: LokiOptions = { streamLabels: ctx.config.lokiStreamLabels ?? [], maxMetadata: ctx.config.lokiMaxMetadata ?? DEFAULT_MAX_METADATA };
  const streamLabels = (options.streamLabels ?? []).filter((k) => ctx.config.identity.labels?.[k] !== undefined);
  if (streamLabels.length > 0) {
    // Every distinct value of such a label is a new Loki stream, for every Job: the operator should know it is on.
    log.warn('carried labels become Loki stream labels; each distinct value adds streams (cardinality)', { labels: streamLabels.map((k) => lokiName(S.label, k)) });
  }
  return {
    async send(records, signal) {
      const body = encodeLokiPush(ctx.config.identity, records, options);
      const { result } = await attempt(() => client.post(url, body, { contentType: 'application/json', headers, signal }));
      return result;
    },
  };
}
