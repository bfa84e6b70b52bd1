import { DOCUMENT_FIELDS as F, RECORD_FLAGS } from '../contract/record.ts';
import { httpText, under, type HttpOptions } from './http.ts';
import { pager } from './pager.ts';
import { lineOf, parseTimeNs, QueryError, type LogLine, type LogQuery, type QueryClient } from './types.ts';

type SortValue = string | number;
interface Hit {
  _source?: Record<string, unknown>;
  sort?: SortValue[];
}

/**
 * The `_search` body. Dynamic mapping makes the string fields `text` with a
 * `.keyword` sub-field, so exact matches and the tiebreak sort use that; the
 * sink's own index template may map them as keyword directly, hence the
 * `keywordSuffix` option.
 */
export function searchBody(q: LogQuery, size: number, after: SortValue[] | undefined, keywordSuffix = '.keyword'): Record<string, unknown> {
  const k = (name: string) => `${name}${keywordSuffix}`;
  const filter: unknown[] = [{ term: { [k(F.namespace)]: q.namespace } }, { term: { [k(F.job)]: q.job } }];
  if (q.pod !== undefined) filter.push({ term: { [k(F.pod)]: q.pod } });
  if (q.containers !== undefined) filter.push({ terms: { [k(F.container)]: q.containers } });
  if (q.fromNs !== undefined || q.toNs !== undefined) {
    const range: Record<string, unknown> = { format: 'strict_date_optional_time_nanos' };
    if (q.fromNs !== undefined) range.gte = nsText(q.fromNs);
    if (q.toNs !== undefined) range.lt = nsText(q.toNs);
    filter.push({ range: { [F.time]: range } });
  }
  return {
    size,
    query: { bool: { filter } },
    // The id breaks ties in one millisecond (a date field's resolution) so
    // that search_after never skips or repeats a hit.
    // unmapped_type: an index whose first documents are still on their way has no mapping to sort on yet.
    sort: [{ [F.time]: { order: 'asc', unmapped_type: 'date' } }, { [k(F.id)]: { order: 'asc', unmapped_type: 'keyword' } }],
    _source: [F.time, F.message, F.namespace, F.job, F.pod, F.podUid, F.container, F.restart, F.node, F.stream, F.id, ...RECORD_FLAGS.map((x) => F[x])],
    track_total_hits: false,
    ...(after ? { search_after: after } : {}),
  };
}

function nsText(ns: bigint): string {
  const ms = ns / 1_000_000n;
  const frac = (ns % 1_000_000_000n).toString().padStart(9, '0');
  return `${new Date(Number(ms)).toISOString().slice(0, 19)}.${frac}Z`;
}

export function parseHits(body: string): Array<{ line: LogLine; key: bigint; cursor: SortValue[] }> {
  const doc = JSON.parse(body) as { hits?: { hits?: Hit[] }; timed_out?: boolean; _shards?: { failed?: number } };
  if (doc._shards?.failed) throw new QueryError(`_search: ${doc._shards.failed} shard(s) failed; results would be incomplete`);
  const out = [];
  for (const h of doc.hits?.hits ?? []) {
    const s = h._source ?? {};
    const get = (name: string) => (s[name] ?? nested(s, name)) as string | number | undefined;
    const t = String(get(F.time) ?? '');
    const ns = parseTimeNs(t);
    if (ns === undefined || !h.sort) throw new QueryError(`_search returned a hit without a usable ${F.time} or sort values: ${JSON.stringify(h).slice(0, 200)}`);
    out.push({
      line: lineOf(ns, String(get(F.message) ?? ''), (f) => get(F[f])),
      // The first sort value is what the server ordered by: epoch ms for a date, ns for date_nanos.
      key: BigInt(Math.trunc(Number(h.sort[0]))),
      cursor: h.sort,
    });
  }
  return out;
}

/** Dotted names may arrive as nested objects when another writer shaped the document. */
function nested(o: Record<string, unknown>, dotted: string): unknown {
  let cur: unknown = o;
  for (const p of dotted.split('.')) {
    if (cur === null || typeof cur !== 'object') return undefined;
    cur = (cur as Record<string, unknown>)[p];
  }
  return cur;
}

/** Elasticsearch or OpenSearch `_search`, paged with `search_after` on (@timestamp, id). */
export class ElasticsearchClient implements QueryClient {
  readonly kind = 'elasticsearch';
  constructor(
    private readonly base: string,
    private readonly index: string,
    private readonly http: HttpOptions = {},
    private readonly keywordSuffix = '.keyword',
  ) {}

  lines(q: LogQuery, pageSize = 5000): AsyncIterable<LogLine> {
    const url = under(this.base, `/${encodeURIComponent(this.index)}/_search`);
    // An index that does not exist yet (--follow from a Job's first second) holds no lines: not an error.
    url.searchParams.set('ignore_unavailable', 'true');
    url.searchParams.set('allow_no_indices', 'true');
    return pager<SortValue[]>(async (after, limit) => {
      const body = JSON.stringify(searchBody(q, limit, after, this.keywordSuffix));
      return { rows: parseHits(await httpText(url, this.http, 'POST', { type: 'application/json', text: body })) };
    }, pageSize, { ties: 'any', cursor: 'complete' });
  }
}
