import { LOKI_FIELDS as L } from '../contract/record.ts';
import { redactUrls } from '../contract/redact.ts';
import { authHeaders, httpText, under, type HttpOptions } from './http.ts';
import { pager } from './pager.ts';
import { lineOf, QueryError, type JobRun, type LogLine, type LogQuery, type QueryClient, type TailOptions } from './types.ts';

export const DEFAULT_RANGE_NS = 720n * 3600n * 1_000_000_000n;


// LogQL string literals: backquoted raw strings cannot hold a backquote, so
// use double quotes with Go escaping, which JSON's is a subset of.
const q = (s: string) => JSON.stringify(s);
const re = (s: string) => s.replace(/[\\^$.|?*+()[\]{}]/g, '\\$&');

export function logqlSelector(query: LogQuery): string {
  const m = [`${L.namespace}=${q(query.namespace)}`, `${L.job}=${q(query.job)}`];
  if (query.pod !== undefined) m.push(`${L.pod}=${q(query.pod)}`);
  if (query.containers !== undefined) m.push(query.containers.length === 1 ? `${L.container}=${q(query.containers[0]!)}` : `${L.container}=~${q(query.containers.map(re).join('|'))}`);
  return `{${m.join(', ')}}`;
}

type Value = [string, string] | [string, string, { structuredMetadata?: Record<string, string>; parsed?: Record<string, string> }];
interface StreamResult {
  stream: Record<string, string>;
  values: Value[];
}

/** A Loki answer as JSON; anything else is a QueryError that quotes its start. */
function lokiJson<T>(body: string, who: string): T {
  try {
    return JSON.parse(body) as T;
  } catch {
    throw new QueryError(`${who} something that is not JSON: ${body.slice(0, 120)}`);
  }
}

/** Parses a `query_range` response (resultType streams) into lines, in either of Loki's label encodings. */
export function parseQueryRange(body: string): LogLine[] {
  const doc = lokiJson<{ status?: string; data?: { resultType?: string; result?: StreamResult[] } }>(body, 'Loki answered with');
  if (doc.status !== 'success' || doc.data?.resultType !== 'streams') throw new QueryError(`Loki answered status ${doc.status}, resultType ${doc.data?.resultType}: expected success with streams`);
  return streamLines(doc.data.result ?? []);
}

/** One message of `/loki/api/v1/tail`: `{"streams": [...], "dropped_entries": ...}`, streams as in query_range. */
export function parseTailMessage(body: string): LogLine[] {
  const doc = lokiJson<{ streams?: StreamResult[] }>(body, "Loki's tail sent");
  return streamLines(doc.streams ?? []);
}

function streamLines(result: StreamResult[]): LogLine[] {
  const out: LogLine[] = [];
  for (const s of result) {
    for (const v of s.values) {
      // Without the categorize-labels encoding flag Loki folds structured
      // metadata into the stream's labels; with it, it comes as a third element.
      const labels = { ...s.stream, ...(v[2]?.structuredMetadata ?? {}), ...(v[2]?.parsed ?? {}) };
      out.push(lineOf(BigInt(v[0]), v[1], (f) => labels[L[f]]));
    }
  }
  return out.sort((a, b) => (a.ns < b.ns ? -1 : a.ns > b.ns ? 1 : 0));
}

/**
 * Loki's `/loki/api/v1/query_range`, direction forward: Loki returns at most
 * `limit` entries across all streams, oldest first, so the pager can move
 * `start` past the last line it emitted.
 */
export class LokiClient implements QueryClient {
  readonly kind = 'loki';
  constructor(
    private readonly base: string,
    private readonly http: HttpOptions = {},
    private readonly tenant?: string,
    private readonly now: () => bigint = () => BigInt(Date.now()) * 1_000_000n,
  ) {}

  /** The job label's values in the namespace's streams over the last 30 days (Loki counts no lines here). */
  async jobs(namespace: string, pattern: string): Promise<JobRun[]> {
    const http: HttpOptions = this.tenant ? { ...this.http, headers: { ...this.http.headers, 'x-scope-orgid': this.tenant } } : this.http;
    const u = under(this.base, `/loki/api/v1/label/${encodeURIComponent(L.job)}/values`);
    const end = this.now() + 1n;
    u.searchParams.set('query', `{${L.namespace}=${q(namespace)}, ${L.job}=~${q(pattern)}}`);
    u.searchParams.set('start', String(end - DEFAULT_RANGE_NS));
    u.searchParams.set('end', String(end));
    let doc: { status?: string; data?: unknown };
    try {
      doc = JSON.parse(await httpText(u, http)) as typeof doc;
    } catch (e) {
      if (e instanceof QueryError) throw e;
      throw new QueryError('Loki answered the label values query with something that is not JSON');
    }
    if (doc.status !== 'success' || !Array.isArray(doc.data)) throw new QueryError(`Loki answered status ${doc.status} to the label values query`);
    return doc.data.filter((v): v is string => typeof v === 'string').map((job) => ({ job }));
  }

  lines(query: LogQuery, pageSize = 5000): AsyncIterable<LogLine> {
    const url = under(this.base, '/loki/api/v1/query_range');
    const http: HttpOptions = this.tenant ? { ...this.http, headers: { ...this.http.headers, 'x-scope-orgid': this.tenant } } : this.http;
    const end = query.toNs ?? this.now() + 1n;
    // Loki refuses a range longer than max_query_length (721h by default), so
    // with no lower bound ask for the 30 days before the end; --since-time reaches further.
    const first = query.fromNs ?? end - DEFAULT_RANGE_NS;
    return pager<bigint>(async (after, limit) => {
      const start = after !== undefined ? after + 1n : first;
      const u = new URL(url);
      u.searchParams.set('query', logqlSelector(query));
      u.searchParams.set('start', String(start));
      u.searchParams.set('end', String(end));
      u.searchParams.set('limit', String(limit));
      u.searchParams.set('direction', 'forward');
      const lines = parseQueryRange(await httpText(u, http));
      return { rows: lines.map((line) => ({ line, key: line.ns, cursor: line.ns })) };
    }, pageSize, { ties: 'any', cursor: 'key' });
  }

  /**
   * Loki's live tail, `/loki/api/v1/tail` over a websocket: entries from
   * `start` on as Loki ingests them, held back `delay_for` seconds (Loki's
   * maximum is 5) so that a message holds them in order. Not with a private
   * CA: the command then polls.
   */
  async *tail(query: LogQuery, o: TailOptions): AsyncIterable<LogLine> {
    if (this.http.ca) return;
    const u = under(this.base, '/loki/api/v1/tail');
    u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
    u.searchParams.set('query', logqlSelector(query));
    u.searchParams.set('start', String(o.fromNs));
    u.searchParams.set('delay_for', String(Math.min(5, Math.max(0, Math.ceil(o.lagMs / 1000)))));
    u.searchParams.set('limit', '5000');
    const headers: Record<string, string> = { ...this.http.headers, ...authHeaders(this.http.credentials), ...(this.tenant ? { 'x-scope-orgid': this.tenant } : {}) };
    // Node's WebSocket (undici's) takes a WebSocketInit with headers; @types/node declares only protocols.
    const ws = new WebSocket(u, { headers } as unknown as string[]);
    const queue: Array<{ lines?: LogLine[]; error?: Error; end?: true }> = [];
    let wake: (() => void) | undefined;
    const push = (x: (typeof queue)[number]) => {
      queue.push(x);
      wake?.();
    };
    ws.addEventListener('message', (e) => {
      try {
        push({ lines: parseTailMessage(typeof e.data === 'string' ? e.data : Buffer.from(e.data as ArrayBuffer).toString('utf8')) });
      } catch (err) {
        push({ error: err as Error });
      }
    });
    ws.addEventListener('error', () => push({ error: new QueryError(`${redactUrls(u.href)}: the tail websocket failed`, undefined, true) }));
    ws.addEventListener('close', () => push({ end: true }));
    const abort = () => {
      ws.close();
      push({ end: true });
    };
    o.signal.addEventListener('abort', abort);
    try {
      for (;;) {
        while (queue.length === 0) await new Promise<void>((r) => (wake = r));
        const x = queue.shift()!;
        if (x.error) {
          if (o.signal.aborted) return;
          throw x.error;
        }
        if (x.end) return;
        yield* x.lines!;
      }
    } finally {
      o.signal.removeEventListener('abort', abort);
      ws.close();
    }
  }
}
