import { compareLines, formatTimeNs, QueryError, type LogLine } from './types.ts';

/** One row as the server sorted it: the line, the key the server sorted by, and the cursor that resumes after it. */
export interface Row<C> {
  line: LogLine;
  key: bigint;
  cursor: C;
}

/** One page as the server sorted it. */
export interface Page<C> {
  rows: Array<Row<C>>;
  /** Whether the server may hold rows after these; by default, whether the page is full. */
  more?: boolean;
}

export interface PagerOptions {
  /**
   * How the server orders rows that share a key. `exact`: as compareLines
   * does (VictoriaLogs sorting by (_time, id), whose natural string order
   * puts one file's offsets in order), so rows are printed as they come.
   * `any`: in some other order (Elasticsearch's millisecond date, Loki), so a
   * key's rows are only printed once all of them are known.
   */
  ties: 'exact' | 'any';
  /**
   * What a cursor resumes after. `complete`: one row, by its key and record id
   * (Elasticsearch's search_after, VictoriaLogs' (timestamp, id)). `key`: a
   * whole key only (Loki's start), so a key with more rows than a page cannot
   * be read.
   */
  cursor: 'complete' | 'key';
}

/**
 * Streams every line of a paginated, server-sorted query in CRI order. Every
 * page asked for holds at most `pageSize` rows, and memory is bounded by a
 * small multiple of it, however many rows share one key.
 *
 * With ties in any order, a full page may end inside a group of rows sharing
 * its last key: the group is held back and fetched again from the cursor of
 * the last row before it, then printed sorted. A group larger than a page is
 * read with the complete cursor, page by page, as often as it takes to print
 * it in order, `pageSize` lines per pass; a page never grows.
 */
export async function* pager<C>(fetchPage: (after: C | undefined, limit: number) => Promise<Page<C>>, pageSize: number, opts: PagerOptions): AsyncIterable<LogLine> {
  if (!Number.isInteger(pageSize) || pageSize < 1) throw new QueryError(`page size ${pageSize}: expected a whole number of at least 1`);
  let after: C | undefined;
  for (;;) {
    const page = await fetchPage(after, pageSize);
    const { rows } = page;
    if (opts.ties === 'exact') {
      for (const r of rows) yield r.line;
      if (!(page.more ?? rows.length >= pageSize) || rows.length === 0) return;
      after = rows[rows.length - 1]!.cursor;
      continue;
    }
    if (rows.length < pageSize) {
      yield* rows.map((r) => r.line).sort(compareLines);
      return;
    }
    const lastKey = rows[rows.length - 1]!.key;
    let cut = rows.length;
    while (cut > 0 && rows[cut - 1]!.key === lastKey) cut--;
    if (cut > 0) {
      yield* rows.slice(0, cut).map((r) => r.line).sort(compareLines);
      after = rows[cut - 1]!.cursor;
      continue;
    }
    // The whole page is one key, and there may be more of it.
    if (opts.cursor === 'key') throw new QueryError(`more than ${pageSize} lines share the timestamp ${formatTimeNs(lastKey)}, and this server cannot page within one timestamp: narrow the query (--pod, -c) or raise the page size`);
    const end = yield* largeGroup(fetchPage, pageSize, after, lastKey);
    after = end;
  }
}

/**
 * Prints every row of one key, starting after `before`, in CRI order: each
 * pass reads the whole group in pages and keeps the `pageSize` smallest lines
 * after the last one printed. Returns the cursor of the group's last row.
 */
async function* largeGroup<C>(fetchPage: (after: C | undefined, limit: number) => Promise<Page<C>>, pageSize: number, before: C | undefined, key: bigint): AsyncGenerator<LogLine, C> {
  let printed: LogLine | undefined;
  for (;;) {
    let best: LogLine[] = [];
    let cursor = before;
    let last: C | undefined;
    scan: for (;;) {
      const { rows } = await fetchPage(cursor, pageSize);
      for (const r of rows) {
        if (r.key !== key) break scan;
        last = r.cursor;
        if (printed === undefined || compareLines(r.line, printed) > 0) best.push(r.line);
        if (best.length >= 2 * pageSize) best = best.sort(compareLines).slice(0, pageSize);
      }
      if (rows.length < pageSize) break;
      cursor = rows[rows.length - 1]!.cursor;
    }
    best = best.sort(compareLines).slice(0, pageSize);
    yield* best;
    if (best.length < pageSize) {
      if (last === undefined) throw new QueryError(`the lines at ${formatTimeNs(key)} disappeared while they were read`);
      return last;
    }
    printed = best[best.length - 1];
  }
}
