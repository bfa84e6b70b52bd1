import fc from 'fast-check';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { ElasticsearchClient, parseHits, searchBody } from '../../src/query/elasticsearch.ts';
import { LokiClient, logqlSelector, parseQueryRange } from '../../src/query/loki.ts';
import { pager } from '../../src/query/pager.ts';
import { notQueryable, resolveTarget } from '../../src/query/resolve.ts';
import { compareLines, compareNatural, formatTimeNs, parseTimeNs, type LogLine } from '../../src/query/types.ts';
import { FIELD_MAPS, logsqlFilter, VictoriaLogsClient } from '../../src/query/victorialogs.ts';

const fixture = (name: string) => readFileSync(new URL(`../fixtures/query/${name}`, import.meta.url), 'utf8');

async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
});

/** A 127.0.0.1 server answering with handler(request, body); returns its base URL and the requests it saw. */
async function serve(handler: (req: IncomingMessage, body: string) => { status?: number; body: string }): Promise<{ url: string; seen: Array<{ url: string; body: string; headers: IncomingMessage['headers'] }> }> {
  const seen: Array<{ url: string; body: string; headers: IncomingMessage['headers'] }> = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString('utf8')));
    req.on('end', () => {
      seen.push({ url: req.url!, body, headers: req.headers });
      const r = handler(req, body);
      res.writeHead(r.status ?? 200, { 'content-type': 'application/json' });
      res.end(r.body);
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

const line = (ns: bigint, id: string, message = id): LogLine => ({ ns, id, message, stream: 'stdout', pod: 'p', container: 'main', restart: 0 });

describe('time and order', () => {
  it('round-trips RFC 3339 with nanoseconds the way Go prints RFC3339Nano', () => {
    expect(parseTimeNs('2025-12-01T07:40:00.000000123Z')).toBe(1764574800000000123n);
    expect(parseTimeNs('2025-12-01T08:40:00.5+01:00')).toBe(1764574800500000000n);
    expect(formatTimeNs(1764574800000000123n)).toBe('2025-12-01T07:40:00.000000123Z');
    expect(formatTimeNs(1764574800120000000n)).toBe('2025-12-01T07:40:00.12Z');
    expect(formatTimeNs(1764574800000000000n)).toBe('2025-12-01T07:40:00Z');
    expect(parseTimeNs('yesterday')).toBeUndefined();
  });

  it('breaks ties at one nanosecond by the record id, its byte offset compared as a number', () => {
    const lines = [line(5n, 'a-10'), line(5n, 'a-9'), line(4n, 'b-0'), line(5n, 'A-100')];
    expect(lines.sort(compareLines).map((l) => l.id)).toEqual(['b-0', 'A-100', 'a-9', 'a-10']);
  });
});

describe('natural order of record ids', () => {
  it('compares digit runs as numbers, as VictoriaLogs sorts strings, so server pages and local sorts agree', () => {
    const ids = ['p10-1', 'p9-10', 'p9-9', 'p9-09', 'q-0', 'P-5', 'p9x-1'];
    expect([...ids].sort(compareNatural)).toEqual(['P-5', 'p9-9', 'p9-09', 'p9-10', 'p9x-1', 'p10-1', 'q-0']);
    expect(compareNatural('a', 'a')).toBe(0);
  });
});

describe('pager', () => {
  const byIdText = (a: LogLine, b: LogLine) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
  /**
   * A server that sorts by a coarse key, then by the record id (in `tie`
   * order), and resumes strictly after a complete cursor (key, id), as
   * Elasticsearch's search_after and VictoriaLogs' sort by (_time, id) do.
   */
  function server(all: LogLine[], coarse: (l: LogLine) => bigint, tie: (a: LogLine, b: LogLine) => number = byIdText) {
    const order = (a: LogLine, b: LogLine) => (coarse(a) < coarse(b) ? -1 : coarse(a) > coarse(b) ? 1 : tie(a, b));
    const sorted = [...all].sort(order);
    let pages = 0;
    let maxRows = 0;
    const fetch = async (after: LogLine | undefined, limit: number) => {
      pages++;
      maxRows = Math.max(maxRows, limit);
      const rows = sorted.filter((l) => after === undefined || order(l, after) > 0).slice(0, limit);
      return { rows: rows.map((l) => ({ line: l, key: coarse(l), cursor: l })) };
    };
    return { fetch, stats: () => ({ pages, maxRows }) };
  }

  const lines = fc.array(fc.record({ t: fc.integer({ min: 0, max: 30 }), file: fc.constantFrom('a', 'b', 'c') }), { maxLength: 200 }).map((specs) => {
    const offsets: Record<string, number> = {};
    return specs.map((s) => {
      offsets[s.file] = (offsets[s.file] ?? 0) + 1 + (s.t % 7);
      return line(BigInt(s.t) * 1000n + BigInt(s.t % 3), `${s.file}-${offsets[s.file]}`);
    });
  });

  it('yields every line exactly once in CRI order, whatever the page size and however many lines share a key, in pages never larger than asked', async () => {
    await fc.assert(
      fc.asyncProperty(lines, fc.integer({ min: 1, max: 17 }), fc.constantFrom('ms', 'ns', 'exact'), async (all, pageSize, kind) => {
        // ms: a date field (Elasticsearch); ns with ids in text order; exact: the server already sorts ties as CRI order does.
        const s = kind === 'ms' ? server(all, (l) => l.ns / 1000n) : kind === 'ns' ? server(all, (l) => l.ns) : server(all, (l) => l.ns, compareLines);
        const got = await collect(pager(s.fetch, pageSize, { ties: kind === 'exact' ? 'exact' : 'any', cursor: 'complete' }));
        expect(got.map((l) => l.id)).toEqual([...all].sort(compareLines).map((l) => l.id));
        expect(s.stats().maxRows).toBeLessThanOrEqual(pageSize);
      }),
      { numRuns: 200 },
    );
  });

  it('never asks for a page larger than the page size, even when every line shares one key', async () => {
    const all = Array.from({ length: 1000 }, (_, i) => line(BigInt(i), `a-${i}`));
    const s = server(all, (l) => l.ns);
    expect(await collect(pager(s.fetch, 100, { ties: 'any', cursor: 'complete' }))).toHaveLength(1000);
    expect(s.stats().maxRows).toBe(100);
    const burst = [...all, ...Array.from({ length: 250 }, (_, i) => line(2000n, `b-${i}`))];
    const b = server(burst, (l) => l.ns);
    expect(await collect(pager(b.fetch, 100, { ties: 'any', cursor: 'complete' }))).toHaveLength(1250);
    expect(b.stats().maxRows).toBe(100);
    // 5,000 lines in one millisecond, written by two files at distinct nanoseconds: read in pages of 100, in CRI order.
    const oneMs = Array.from({ length: 5000 }, (_, i) => line(7_000_000n + BigInt(i * 100), `${i % 2 ? 'z' : 'a'}-${i * 3}`));
    const m = server(oneMs, (l) => l.ns / 1_000_000n);
    const got = await collect(pager(m.fetch, 100, { ties: 'any', cursor: 'complete' }));
    expect(got.map((l) => l.id)).toEqual(oneMs.map((l) => l.id));
    expect(m.stats().maxRows).toBe(100);
    const exact = server(oneMs, (l) => l.ns / 1_000_000n, compareLines);
    expect((await collect(pager(exact.fetch, 100, { ties: 'exact', cursor: 'complete' }))).map((l) => l.id)).toEqual(oneMs.map((l) => l.id));
    expect(exact.stats().pages).toBe(51);
  });

  it('with a cursor that only resumes after a whole key (Loki), refuses a key that outnumbers the page instead of growing it', async () => {
    const all = [line(1n, 'a-0'), ...Array.from({ length: 150 }, (_, i) => line(5n, `b-${i}`)), line(9n, 'c-0')];
    const sorted = [...all];
    let maxRows = 0;
    const fetch = async (after: bigint | undefined, limit: number) => {
      maxRows = Math.max(maxRows, limit);
      return { rows: sorted.filter((l) => after === undefined || l.ns > after).slice(0, limit).map((l) => ({ line: l, key: l.ns, cursor: l.ns })) };
    };
    await expect(collect(pager(fetch, 100, { ties: 'any', cursor: 'key' }))).rejects.toThrow(/more than 100 lines share the timestamp 1970-01-01T00:00:00.000000005Z/);
    expect(maxRows).toBe(100);
    expect(await collect(pager(fetch, 200, { ties: 'any', cursor: 'key' }))).toHaveLength(152);
  });
});

describe('VictoriaLogs LogsQL', () => {
  it('filters by exact values only, quoted, so a name can never inject LogsQL', () => {
    expect(logsqlFilter({ namespace: 'team-a', job: 'x" | delete', containers: ['main', 'init'] }, FIELD_MAPS.loki)).toBe(
      'namespace:="team-a" job:="x\\" | delete" container:in("main","init")',
    );
    expect(logsqlFilter({ namespace: 'n', job: 'j', pod: 'j-abc' }, FIELD_MAPS.document)).toBe('k8s.namespace.name:="n" k8s.job.name:="j" k8s.pod.name:="j-abc"');
  });
});

describe('VictoriaLogs paging', () => {
  it('pages through a burst at one nanosecond in bounded pages, resuming after (timestamp, id)', async () => {
    // 30 lines before, 120 at one nanosecond from two files, 30 after; VictoriaLogs sorts strings naturally.
    const natural = new Intl.Collator('en', { numeric: true });
    const rows = [
      ...Array.from({ length: 30 }, (_, i) => line(1000n + BigInt(i), `a-${i}`)),
      ...Array.from({ length: 120 }, (_, i) => line(5000n, `${i % 2 ? 'b' : 'c'}-${i}`)),
      ...Array.from({ length: 30 }, (_, i) => line(9000n + BigInt(i), `d-${i}`)),
    ].sort((a, b) => (a.ns < b.ns ? -1 : a.ns > b.ns ? 1 : natural.compare(a.id, b.id)));
    const limits: number[] = [];
    const { url } = await serve((req, raw) => {
      const p = new URLSearchParams(raw);
      const query = p.get('query')!;
      const start = parseTimeNs(p.get('start')!) ?? 0n;
      const m = /\| sort by \(_time, id\)(?: offset (\d+))? limit (\d+) \|/.exec(query);
      if (req.url !== '/select/logsql/query' || !m) return { status: 400, body: `this server reads sort by (_time, id) [offset N] limit M only: ${query}` };
      limits.push(Number(m![2]));
      const page = rows.filter((r) => r.ns >= start).slice(Number(m![1] ?? 0), Number(m![1] ?? 0) + Number(m![2]));
      return { body: page.map((r) => JSON.stringify({ _time: formatTimeNs(r.ns), _msg: r.message, pod: r.pod, container: r.container, restart_count: String(r.restart), stream: r.stream, id: r.id })).join('\n') };
    });
    const got = await collect(new VictoriaLogsClient(url, FIELD_MAPS.loki).lines({ namespace: 'n', job: 'j' }, 25));
    expect(got.map((l) => l.id)).toEqual(rows.map((r) => r.id));
    expect(Math.max(...limits)).toBeLessThanOrEqual(25);
  });
});

describe('Loki query_range', () => {
  it('reads the recorded response, with structured metadata folded into the labels', () => {
    const lines = parseQueryRange(fixture('loki-query-range.json'));
    expect(lines.map((l) => [l.ns, l.stream, l.restart, l.message, l.id])).toEqual([
      [1764574800000000000n, 'stdout', 0, 'attempt 0 line 1', 'Qm9vdHN0cmFwMDAw-0'],
      [1764574800000000250n, 'stderr', 0, 'warning: slow disk', 'Qm9vdHN0cmFwMDAw-34'],
      [1764574800000000500n, 'stdout', 0, 'attempt 0 line 2', 'Qm9vdHN0cmFwMDAw-0'],
      [1764574801000000000n, 'stdout', 1, 'attempt 1 line 1', 'UmVzdGFydDAwMDAw-0'],
    ]);
    expect(new Set(lines.map((l) => `${l.pod}/${l.container}`))).toEqual(new Set(['nightly-x7k2p/main']));
  });

  it('reads the categorize-labels encoding the same way', () => {
    const a = parseQueryRange(fixture('loki-query-range.json')).map((l) => [l.ns, l.message, l.restart, l.stream]);
    const b = parseQueryRange(fixture('loki-query-range-categorized.json')).map((l) => [l.ns, l.message, l.restart, l.stream]);
    expect(b).toEqual(a);
  });

  it('refuses anything but a successful streams result', () => {
    expect(() => parseQueryRange('{"status":"success","data":{"resultType":"matrix","result":[]}}')).toThrow(/expected success with streams/);
    expect(() => parseQueryRange('<html>')).toThrow(/not JSON/);
  });

  it('builds a selector of exact matchers; several containers become an escaped regex', () => {
    expect(logqlSelector({ namespace: 'team-a', job: 'nightly' })).toBe('{namespace="team-a", job="nightly"}');
    expect(logqlSelector({ namespace: 'n', job: 'j', pod: 'j-1', containers: ['main', 'a.b'] })).toBe('{namespace="n", job="j", pod="j-1", container=~"main|a\\\\.b"}');
  });

  it('pages forward with start, limit and the tenant header, and sends the credentials', async () => {
    // The recorded lines plus a burst of ties, served with Loki's forward semantics.
    const all = [...parseQueryRange(fixture('loki-query-range.json')), ...Array.from({ length: 5 }, (_, i) => line(1764574802000000000n, `T-${i}`))];
    const { url, seen } = await serve((req) => {
      const u = new URL(req.url!, 'http://x');
      expect(u.pathname).toBe('/loki/loki/api/v1/query_range');
      expect(u.searchParams.get('direction')).toBe('forward');
      const start = BigInt(u.searchParams.get('start')!);
      const limit = Number(u.searchParams.get('limit'));
      const page = all.filter((l) => l.ns >= start).slice(0, limit);
      const result = page.map((l) => ({ stream: { pod: l.pod, container: l.container, stream: l.stream, restart_count: String(l.restart), id: l.id }, values: [[String(l.ns), l.message]] }));
      return { body: JSON.stringify({ status: 'success', data: { resultType: 'streams', result } }) };
    });
    const client = new LokiClient(`${url}/loki`, { credentials: { username: 'reader', password: 'pw' } }, 'team-a', () => 1764574900000000000n);
    // Pages of 6: the tie group is held back from the first page and read whole with the second.
    const got = await collect(client.lines({ namespace: 'team-a', job: 'nightly' }, 6));
    expect(got.map((l) => l.message)).toEqual(['attempt 0 line 1', 'warning: slow disk', 'attempt 0 line 2', 'attempt 1 line 1', 'T-0', 'T-1', 'T-2', 'T-3', 'T-4']);
    expect(seen[0]!.headers['x-scope-orgid']).toBe('team-a');
    expect(seen[0]!.headers.authorization).toBe(`Basic ${Buffer.from('reader:pw').toString('base64')}`);
    const first = new URL(seen[0]!.url, 'http://x').searchParams;
    expect(first.get('end')).toBe('1764574900000000001');
    // Within Loki's default max_query_length of 721h.
    expect(first.get('start')).toBe(String(1764574900000000001n - 720n * 3600n * 1_000_000_000n));
  });
});

describe('Loki tail', () => {
  /** A websocket endpoint that answers the handshake and sends `messages` as text frames, as Loki's /loki/api/v1/tail does. */
  async function tailServer(messages: (req: IncomingMessage) => string[]): Promise<{ url: string; seen: IncomingMessage[] }> {
    const seen: IncomingMessage[] = [];
    const server = createServer();
    server.on('upgrade', (req: IncomingMessage, socket: Duplex) => {
      seen.push(req);
      const accept = createHash('sha1').update(`${req.headers['sec-websocket-key']}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
      socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
      setTimeout(() => {
        for (const m of messages(req)) {
          const payload = Buffer.from(m, 'utf8');
          const head = payload.length < 126 ? Buffer.from([0x81, payload.length]) : Buffer.from([0x81, 126, payload.length >> 8, payload.length & 255]);
          socket.write(Buffer.concat([head, payload]));
        }
      }, 20);
      // A close frame from the client ends the connection.
      socket.on('data', (d: Buffer) => void ((d[0]! & 0x0f) === 8 && socket.end()));
      socket.on('error', () => undefined);
    });
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
  }

  it('reads the entries of each message in order, with the labels and structured metadata, tenant and credentials sent', async () => {
    const msg = (entries: Array<[number, string, string]>) =>
      JSON.stringify({ streams: [{ stream: { namespace: 'n', job: 'j', pod: 'p', container: 'main', stream: 'stdout' }, values: entries.map(([t, l, id]) => [String(t), l, { structuredMetadata: { restart_count: '0', id, node: 'node-a' } }]) }], dropped_entries: null });
    const { url, seen } = await tailServer(() => [msg([[2, 'second', 'a-10'], [1, 'first', 'a-0']]), msg([[3, 'third', 'a-20']])]);
    const client = new LokiClient(url, { credentials: { token: 't0ken' } }, 'team-a');
    const ac = new AbortController();
    const got: LogLine[] = [];
    for await (const l of client.tail!({ namespace: 'n', job: 'j' }, { fromNs: 1n, lagMs: 5000, refreshMs: 1000, nowMs: 0, signal: ac.signal })) {
      got.push(l);
      if (got.length === 3) ac.abort();
    }
    expect(got.map((l) => [l.ns, l.message, l.id, l.node])).toEqual([[1n, 'first', 'a-0', 'node-a'], [2n, 'second', 'a-10', 'node-a'], [3n, 'third', 'a-20', 'node-a']]);
    const u = new URL(seen[0]!.url!, 'http://x');
    expect(u.pathname).toBe('/loki/api/v1/tail');
    expect(u.searchParams.get('query')).toBe('{namespace="n", job="j"}');
    expect([u.searchParams.get('start'), u.searchParams.get('delay_for')]).toEqual(['1', '5']);
    expect(seen[0]!.headers.authorization).toBe('Bearer t0ken');
    expect(seen[0]!.headers['x-scope-orgid']).toBe('team-a');
  });
});

describe('Elasticsearch/OpenSearch _search', () => {
  it('reads the recorded response: flat and nested field names, ns from @timestamp, sort values as the cursor', () => {
    const hits = parseHits(fixture('es-search.json'));
    expect(hits.map((h) => [h.line.ns, h.line.pod, h.line.container, h.line.restart, h.line.stream, h.key])).toEqual([
      [1764574800000000123n, 'nightly-x7k2p', 'main', 0, 'stdout', 1764574800000n],
      [1764574800000000456n, 'nightly-x7k2p', 'main', 0, 'stderr', 1764574800000n],
      [1764574801500000000n, 'nightly-x7k2p', 'main', 1, 'stdout', 1764574801500n],
    ]);
    expect(hits[2]!.cursor).toEqual([1764574801500, 'UmVzdGFydDAwMDAw-0']);
  });

  it('refuses partial results', () => {
    expect(() => parseHits('{"_shards":{"failed":1},"hits":{"hits":[]}}')).toThrow(/shard/);
  });

  it('asks for term filters on keyword fields, sorted by @timestamp then id, with search_after', () => {
    const body = searchBody({ namespace: 'n', job: 'j', containers: ['main'], fromNs: 1764574800000000123n }, 500, [1, 'a-1']);
    expect(body).toMatchObject({
      size: 500,
      sort: [{ '@timestamp': { order: 'asc', unmapped_type: 'date' } }, { 'id.keyword': { order: 'asc', unmapped_type: 'keyword' } }],
      search_after: [1, 'a-1'],
      query: { bool: { filter: [{ term: { 'k8s.namespace.name.keyword': 'n' } }, { term: { 'k8s.job.name.keyword': 'j' } }, { terms: { 'k8s.container.name.keyword': ['main'] } }, { range: { '@timestamp': { gte: '2025-12-01T07:40:00.000000123Z' } } }] } },
    });
  });

  it('pages with search_after through lines that share a millisecond, in ns order', async () => {
    // 40 lines in 4 ms, written by two files whose ids sort differently from their offsets.
    const docs = Array.from({ length: 40 }, (_, i) => {
      const ns = 1764574800000000000n + BigInt(Math.floor(i / 10)) * 1_000_000n + BigInt(i % 10) * 1000n;
      return { '@timestamp': formatTimeNs(ns), message: `m${i}`, 'k8s.pod.name': 'p', 'k8s.container.name': 'main', 'k8s.container.restart_count': 0, stream: 'stdout', id: `${i % 2 ? 'z' : 'a'}-${i * 3}` };
    });
    const key = (d: (typeof docs)[number]): [number, string] => [Math.floor(Number(parseTimeNs(d['@timestamp'])! / 1_000_000n)), d.id];
    const sorted = [...docs].sort((a, b) => key(a)[0] - key(b)[0] || (key(a)[1] < key(b)[1] ? -1 : 1));
    const { url, seen } = await serve((req, raw) => {
      expect(req.url).toBe('/logs-jobs/_search?ignore_unavailable=true&allow_no_indices=true');
      const body = JSON.parse(raw) as { size: number; search_after?: [number, string] };
      const after = body.search_after;
      const rest = sorted.filter((d) => !after || key(d)[0] > after[0] || (key(d)[0] === after[0] && key(d)[1] > after[1]));
      return { body: JSON.stringify({ _shards: { failed: 0 }, hits: { hits: rest.slice(0, body.size).map((d) => ({ _source: d, sort: key(d) })) } }) };
    });
    const client = new ElasticsearchClient(url, 'logs-jobs', { credentials: { token: 't0ken' } });
    const got = await collect(client.lines({ namespace: 'n', job: 'j' }, 7));
    expect(got.map((l) => l.message)).toEqual(docs.map((d) => d.message));
    expect(seen.length).toBeGreaterThan(5);
    expect(seen.map((r) => (JSON.parse(r.body) as { size: number }).size).filter((n) => n > 7)).toEqual([]);
    expect(seen[0]!.headers.authorization).toBe('Bearer t0ken');
  });
});

describe('where to query', () => {
  it('derives the query API from sink endpoints that have one', () => {
    expect(resolveTarget({ sink: 'loki', endpoint: 'http://vl:9428/insert/loki/api/v1/push', esIndex: undefined, lokiTenant: undefined }, { type: undefined, endpoint: undefined })).toMatchObject({ type: 'victorialogs', endpoint: 'http://vl:9428', fields: 'loki' });
    expect(resolveTarget({ sink: 'elasticsearch', endpoint: 'http://vl:9428/insert/elasticsearch/_bulk', esIndex: undefined, lokiTenant: undefined }, { type: undefined, endpoint: undefined })).toMatchObject({ type: 'victorialogs', fields: 'document' });
    expect(resolveTarget({ sink: 'otlp', endpoint: 'http://vl:9428/insert/opentelemetry/v1/logs', esIndex: undefined, lokiTenant: undefined }, { type: undefined, endpoint: undefined })).toMatchObject({ type: 'victorialogs', fields: 'otlp' });
    expect(resolveTarget({ sink: 'loki', endpoint: 'https://loki.logging:3100/loki/api/v1/push', esIndex: undefined, lokiTenant: 'team-a' }, { type: undefined, endpoint: undefined })).toMatchObject({ type: 'loki', endpoint: 'https://loki.logging:3100', tenant: 'team-a' });
    expect(resolveTarget({ sink: 'elasticsearch', endpoint: 'https://es:9200', esIndex: 'logs-jobs', lokiTenant: undefined }, { type: undefined, endpoint: undefined })).toMatchObject({ type: 'elasticsearch', endpoint: 'https://es:9200', index: 'logs-jobs' });
  });

  it('an explicit query endpoint wins, and needs a type', () => {
    expect(resolveTarget({ sink: 'otlp', endpoint: 'http://collector:4318', esIndex: undefined, lokiTenant: undefined }, { type: 'loki', endpoint: 'http://loki:3100' })).toMatchObject({ type: 'loki', endpoint: 'http://loki:3100' });
    expect(resolveTarget({ sink: 'otlp', endpoint: 'http://collector:4318', esIndex: undefined, lokiTenant: undefined }, { type: undefined, endpoint: 'http://loki:3100' })).toMatch(/without a query type/);
  });

  it.each([
    ['http', 'http://collector:8080/ingest'],
    ['syslog', 'tls://syslog:6514'],
    ['forward', 'tcp://fluentd:24224'],
    ['otlp', 'http://collector:4318'],
  ] as const)('says in one line that a %s sink cannot be queried, naming the key to set', (sink, endpoint) => {
    const why = resolveTarget({ sink, endpoint, esIndex: undefined, lokiTenant: undefined }, { type: undefined, endpoint: undefined });
    expect(typeof why).toBe('string');
    expect(why).not.toContain('\n');
    expect(why).toContain('query.endpoint and query.type');
    expect(why).toBe(notQueryable(sink, (why as string).slice(`the ${sink} sink `.length, (why as string).indexOf(':'))));
  });

  it('stdout keeps nothing to query', () => {
    expect(resolveTarget({ sink: 'stdout', endpoint: undefined, esIndex: undefined, lokiTenant: undefined }, { type: undefined, endpoint: undefined })).toMatch(/only in the pod/);
  });
});
