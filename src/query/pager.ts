import { compareLines, type LogLine } from './types.ts';

/** One page as the server sorted it: each row with the key the server sorted by. */
export interface Page<C> {
  rows: Array<{ line: LogLine; key: bigint; cursor: C }>;
}

/**
 * Streams every line of a paginated, server-sorted query in CRI order with
 * memory bounded by the page size.
 *
 * The server sorts by a coarse key (VictoriaLogs and Loki: ns; Elasticsearch:
 * ms), and many lines can share one value. A full page may end in the middle
 * of such a group, so the rows of its last key are held back and fetched again
 * from the cursor of the last row before them; only then is a group known to
 * be whole, and sorted finely. A page that is one single group is fetched again
 * twice as large, which only an extreme burst at one instant ever needs.
 */
export async function* pager<C>(fetchPage: (after: C | undefined, limit: number) => Promise<Page<C>>, pageSize: number): AsyncIterable<LogLine> {
  let after: C | undefined;
  let limit = pageSize;
  for (;;) {
    const { rows } = await fetchPage(after, limit);
    if (rows.length < limit) {
      yield* rows.map((r) => r.line).sort(compareLines);
      return;
    }
    const lastKey = rows[rows.length - 1]!.key;
    let cut = rows.length;
    while (cut > 0 && rows[cut - 1]!.key === lastKey) cut--;
    if (cut === 0) {
      limit *= 2;
      continue;
    }
    yield* rows.slice(0, cut).map((r) => r.line).sort(compareLines);
    after = rows[cut - 1]!.cursor;
    limit = pageSize;
  }
}
