import { DOCUMENT_FIELDS, LOKI_FIELDS, OTLP_ATTRIBUTES, RECORD_FLAGS, type RecordField } from '../contract/record.ts';
import { httpLines, httpText, under, type HttpOptions } from './http.ts';
import { pager } from './pager.ts';
import { formatTimeNs, lineOf, parseTimeNs, QueryError, type JobRun, type LogLine, type LogQuery, type QueryClient, type TailOptions } from './types.ts';

/** Where each sink's metadata lands in VictoriaLogs: the names the sidecar's encoders write (src/contract/record.ts). */
export type FieldMap = Record<RecordField, string>;

const pick = (m: Record<RecordField, string>): FieldMap => Object.fromEntries((Object.keys(OTLP_ATTRIBUTES) as RecordField[]).map((k) => [k, m[k]])) as FieldMap;

export const FIELD_MAPS = {
  /** Loki push: labels plus structured metadata. */
  loki: pick(LOKI_FIELDS),
  /** The JSON document of the http and elasticsearch sinks. */
  document: pick(DOCUMENT_FIELDS),
  /** OTLP: the same k8s attributes, OpenTelemetry's names for stream and id. */
  otlp: pick(OTLP_ATTRIBUTES),
} satisfies Record<string, FieldMap>;

export type FieldPreset = keyof typeof FIELD_MAPS;

const quote = (s: string) => JSON.stringify(s);
const field = (name: string) => (/^[A-Za-z_][A-Za-z0-9_.]*$/.test(name) ? name : quote(name));

/** The LogsQL filter for a query, exact matches only: no value is ever parsed as LogsQL. */
export function logsqlFilter(q: LogQuery, f: FieldMap): string {
  const parts = [`${field(f.namespace)}:=${quote(q.namespace)}`, `${field(f.job)}:=${quote(q.job)}`];
  if (q.pod !== undefined) parts.push(`${field(f.pod)}:=${quote(q.pod)}`);
  if (q.containers !== undefined) parts.push(`${field(f.container)}:in(${q.containers.map(quote).join(',')})`);
  return parts.join(' ');
}

/** The namespace's Jobs whose names match an RE2 pattern, anchored at both ends. */
function jobsFilter(namespace: string, pattern: string, f: FieldMap): string {
  return `${field(f.namespace)}:=${quote(namespace)} ${field(f.job)}:~${quote(`^(?:${pattern})$`)}`;
}

/**
 * Which writer's field names hold this Job's lines: the sink that wrote them
 * is not always known to the reader (a query endpoint set by hand, a sink
 * changed since), and one `limit 1` query per candidate settles it.
 */
export async function detectFields(base: string, q: LogQuery, preferred: FieldPreset, http: HttpOptions = {}, jobPattern?: string): Promise<FieldPreset> {
  const order = [preferred, ...(Object.keys(FIELD_MAPS) as FieldPreset[]).filter((p) => p !== preferred)];
  for (const preset of order) {
    const f = FIELD_MAPS[preset];
    const filter = jobPattern === undefined ? logsqlFilter({ namespace: q.namespace, job: q.job }, f) : jobsFilter(q.namespace, jobPattern, f);
    const params = new URLSearchParams({ query: `${filter} | limit 1 | fields _time`, start: '0' });
    const text = await httpText(under(base, '/select/logsql/query'), http, 'POST', { type: 'application/x-www-form-urlencoded', text: params.toString() });
    if (text.trim()) return preset;
  }
  return preferred;
}

/** Where a VictoriaLogs page resumes: after the `k`-th row at `ns`, which has the record id `id`. */
interface VlCursor {
  ns: bigint;
  id: string;
  k: number;
}

/**
 * VictoriaLogs' LogsQL `/select/logsql/query`: sorted on the server by
 * (`_time`, record id) with a `limit` (a top-k, so a page costs the server no
 * more than its offset and size), which is CRI order: the natural string
 * order VictoriaLogs sorts by puts one file's offsets in numeric order. A page
 * resumes after a complete cursor: `start` at the last row's timestamp, an
 * `offset` past the rows of that timestamp already read, and the first row
 * checked against the last one's record id. A page never grows, however many
 * lines share one nanosecond.
 */
export class VictoriaLogsClient implements QueryClient {
  readonly kind = 'victorialogs';
  constructor(
    private readonly base: string,
    private readonly fields: FieldMap,
    private readonly http: HttpOptions = {},
  ) {}

  lines(q: LogQuery, pageSize = 5000): AsyncIterable<LogLine> {
    const f = this.fields;
    const filter = logsqlFilter(q, f);
    const url = under(this.base, '/select/logsql/query');
    const fields = `| fields _time, _msg, ${this.fieldList()}`;
    return pager<VlCursor>(async (after, limit) => {
      // Resuming: the row the cursor names comes first again, as a check.
      const skip = after ? after.k - 1 : 0;
      const params = new URLSearchParams({ query: `${filter} | sort by (_time, ${field(f.id)})${skip > 0 ? ` offset ${skip}` : ''} limit ${limit} ${fields}` });
      const from = after?.ns ?? q.fromNs;
      params.set('start', from !== undefined ? formatTimeNs(from) : '0');
      if (q.toNs !== undefined) params.set('end', formatTimeNs(q.toNs - 1n));
      const text = await httpText(url, this.http, 'POST', { type: 'application/x-www-form-urlencoded', text: params.toString() });
      const got: LogLine[] = [];
      for (const raw of text.split('\n')) if (raw) got.push(this.row(raw));
      const more = got.length >= limit;
      let prev = after;
      if (after) {
        const first = got.shift();
        if (!first || first.ns !== after.ns || first.id !== after.id) throw new QueryError(`the lines at ${formatTimeNs(after.ns)} changed while they were read (expected record ${after.id} first, got ${first?.id ?? 'nothing'}); run the command again`);
      }
      const rows = got.map((line) => {
        const cursor: VlCursor = { ns: line.ns, id: line.id, k: prev && prev.ns === line.ns ? prev.k + 1 : 1 };
        prev = cursor;
        return { line, key: line.ns, cursor };
      });
      return { rows, more };
    }, pageSize, { ties: 'exact', cursor: 'complete' });
  }

  async jobs(namespace: string, pattern: string): Promise<JobRun[]> {
    const f = this.fields;
    const query = `${jobsFilter(namespace, pattern, f)} | stats by (${field(f.job)}) count() lines, min(_time) first, max(_time) last`;
    const params = new URLSearchParams({ query, start: '0' });
    const text = await httpText(under(this.base, '/select/logsql/query'), this.http, 'POST', { type: 'application/x-www-form-urlencoded', text: params.toString() });
    const runs: JobRun[] = [];
    for (const raw of text.split('\n')) {
      if (!raw) continue;
      const r = JSON.parse(raw) as Record<string, string | undefined>;
      const job = r[f.job];
      if (!job) continue;
      const run: JobRun = { job, lines: Number(r.lines ?? 0) };
      const first = parseTimeNs(r.first ?? '');
      const last = parseTimeNs(r.last ?? '');
      if (first !== undefined) run.firstNs = first;
      if (last !== undefined) run.lastNs = last;
      runs.push(run);
    }
    return runs;
  }

  private fieldList(): string {
    const f = this.fields;
    return [f.namespace, f.job, f.pod, f.podUid, f.container, f.restart, f.node, f.stream, f.id, ...RECORD_FLAGS.map((x) => f[x])].map(field).join(', ');
  }

  private row(raw: string): LogLine {
    const f = this.fields;
    const r = JSON.parse(raw) as Record<string, string | undefined>;
    const ns = parseTimeNs(r._time ?? '');
    if (ns === undefined) throw new QueryError(`VictoriaLogs returned a row without a usable _time: ${raw.slice(0, 200)}`);
    // VictoriaLogs answers '' for a field a row does not have: an empty optional field is absent.
    return lineOf(ns, r._msg ?? '', (x) => r[f[x]], (v) => !!v);
  }

  /**
   * `/select/logsql/tail`: VictoriaLogs runs the query every `refresh_interval`
   * over the window up to `offset` ago and sends the rows not sent yet, per
   * log stream (`_stream_id` is kept for that). `start_offset` reaches back to
   * `fromNs`, so the tail carries on where a read left off.
   */
  async *tail(q: LogQuery, o: TailOptions): AsyncIterable<LogLine> {
    const params = new URLSearchParams({
      query: `${logsqlFilter(q, this.fields)} | fields _time, _stream_id, _msg, ${this.fieldList()}`,
      start_offset: `${Math.max(1, Math.ceil(o.nowMs - o.lagMs - Number(o.fromNs / 1_000_000n)))}ms`,
      offset: `${o.lagMs}ms`,
      refresh_interval: `${o.refreshMs}ms`,
    });
    for await (const raw of httpLines(under(this.base, '/select/logsql/tail'), this.http, o.signal, 'POST', { type: 'application/x-www-form-urlencoded', text: params.toString() })) yield this.row(raw);
  }
}
