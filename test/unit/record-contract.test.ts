/**
 * The record contract (src/contract/record.ts) for the servers the
 * integration tests do not run: what the sidecar's loki sink pushes, served
 * back the way Loki's query_range answers (both label encodings, as the
 * recorded responses in test/fixtures/query/ show), and what its document
 * encoder writes, served back as an Elasticsearch hit. Every field the record
 * carries must come back unchanged through the query clients.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { DOCUMENT_FIELDS, LOKI_LABELS, LOKI_METADATA } from '../../src/contract/record.ts';
import { parseHits } from '../../src/query/elasticsearch.ts';
import { parseQueryRange } from '../../src/query/loki.ts';
import { compareLines, parseTimeNs, type LogLine } from '../../src/query/types.ts';
import { DocumentEncoder } from '../../sidecar/encode/document.ts';
import { FileProgress } from '../../sidecar/records/progress.ts';
import { FLAG_MALFORMED, FLAG_TRUNCATED, fileKey, idPrefix, type FileMeta, type LogRecord } from '../../sidecar/records/record.ts';
import { encodeLokiPush } from '../../sidecar/sinks/loki.ts';

const fixture = (name: string) => readFileSync(new URL(`../fixtures/query/${name}`, import.meta.url), 'utf8');
const identity = { namespace: 'team-a', pod: 'nightly-x7k2p', podUid: '5f0c2a4e-1b7d-4c1e-9a55-0d7c6d0e9b11', node: 'node-a', job: 'nightly' };

function makeMeta(container: string, restart: number, fp: string): FileMeta {
  return { container, restart, fingerprint: fp, key: fileKey(container, restart, fp), idPrefix: idPrefix(identity.podUid, container, restart, fp), progress: new FileProgress(0) };
}

function makeRecord(message: string, over: Partial<LogRecord> & { file: FileMeta }): LogRecord {
  return { offset: 0, ts: '2025-12-01T07:40:00Z', stream: 'stdout', message, size: message.length + 40, safe: message.length + 40, flags: 0, ...over };
}

function records(): LogRecord[] {
  const run0 = makeMeta('main', 0, 'fp000000000000a0');
  const run1 = makeMeta('main', 1, 'fp000000000000a1');
  const init = makeMeta('setup', 0, 'fp000000000000b0');
  return [
    makeRecord('setup done', { file: init, offset: 0, ts: '2025-12-01T07:39:59.5Z' }),
    makeRecord('attempt 0 "quoted" é', { file: run0, offset: 0, ts: '2025-12-01T07:40:00.000000001Z' }),
    makeRecord('warning: slow disk', { file: run0, offset: 61, ts: '2025-12-01T07:40:00.000000250Z', stream: 'stderr', flags: FLAG_TRUNCATED }),
    makeRecord('not CRI', { file: run0, offset: 140, ts: '2025-12-01T07:40:00.5Z', flags: FLAG_MALFORMED | FLAG_TRUNCATED }),
    makeRecord('attempt 1', { file: run1, offset: 0, ts: '2025-12-01T07:40:01Z' }),
  ];
}

/** Every field of the record, as the contract says a reader must see it. */
function expected(rs: LogRecord[]): LogLine[] {
  return rs
    .map((r): LogLine => {
      const flags = (['truncated', 'malformed', 'incomplete'] as const).filter((_, i) => r.flags & (1 << i));
      return { ns: parseTimeNs(r.ts)!, message: r.message, stream: r.stream, pod: identity.pod, container: r.file.container, restart: r.file.restart, id: `${r.file.idPrefix}${r.offset}`, namespace: identity.namespace, job: identity.job, podUid: identity.podUid, node: identity.node, ...(flags.length ? { flags } : {}) };
    })
    .sort(compareLines);
}

type Push = { streams: Array<{ stream: Record<string, string>; values: Array<[string, string, Record<string, string>]> }> };

/** What Loki's query_range answers for everything pushed, in one of its two label encodings. */
function lokiAnswer(push: Push, categorized: boolean): string {
  const result = push.streams.flatMap((s) =>
    categorized
      ? [{ stream: s.stream, values: s.values.map(([t, l, m]) => [t, l, { structuredMetadata: m }]) }]
      : s.values.map(([t, l, m]) => ({ stream: { ...s.stream, ...m }, values: [[t, l]] })),
  );
  return JSON.stringify({ status: 'success', data: { resultType: 'streams', ...(categorized ? { encodingFlags: ['categorize-labels'] } : {}), result } });
}

describe('the record contract', () => {
  it('names what the recorded Loki responses carry: labels, then structured metadata', () => {
    const doc = JSON.parse(fixture('loki-query-range-categorized.json')) as { data: { result: Array<{ stream: Record<string, string>; values: Array<[string, string, { structuredMetadata: Record<string, string> }]> }> } };
    for (const s of doc.data.result) {
      expect(Object.keys(s.stream).sort()).toEqual(Object.values(LOKI_LABELS).sort());
      for (const v of s.values) for (const k of Object.keys(v[2].structuredMetadata)) expect(Object.values(LOKI_METADATA)).toContain(k);
    }
    const es = JSON.parse(fixture('es-search.json')) as { hits: { hits: Array<{ _source: Record<string, unknown> }> } };
    const names = new Set<string>(Object.values(DOCUMENT_FIELDS));
    const flat = (o: Record<string, unknown>, at = ''): string[] => Object.entries(o).flatMap(([k, v]) => (v && typeof v === 'object' ? flat(v as Record<string, unknown>, `${at}${k}.`) : [`${at}${k}`]));
    for (const h of es.hits.hits) for (const k of flat(h._source)) expect(names, k).toContain(k);
  });

  it.each([false, true])('Loki: the loki sink\'s push read back by the Loki client, every field unchanged (categorize-labels %s)', (categorized) => {
    const rs = records();
    const push = JSON.parse(encodeLokiPush(identity, rs)) as Push;
    expect(parseQueryRange(lokiAnswer(push, categorized)).sort(compareLines)).toEqual(expected(rs));
  });

  it('Elasticsearch: the document encoder\'s output read back as _search hits, every field unchanged', () => {
    const rs = records();
    const docs = new DocumentEncoder(identity).lines(rs).toString('utf8').trim().split('\n');
    const hits = docs.map((d) => {
      const src = JSON.parse(d) as Record<string, string>;
      return { _source: src, sort: [Number(parseTimeNs(src[DOCUMENT_FIELDS.time]!)! / 1_000_000n), src[DOCUMENT_FIELDS.id]] };
    });
    const lines = parseHits(JSON.stringify({ _shards: { failed: 0 }, hits: { hits } })).map((h) => h.line);
    expect(lines.sort(compareLines)).toEqual(expected(rs));
  });
});
