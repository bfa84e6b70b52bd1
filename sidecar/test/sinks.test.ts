import { JsonLogsSerializer, ProtobufLogsSerializer } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { FLAG_MALFORMED, FLAG_TRUNCATED, recordId } from '../records/record.ts';
import { DocumentEncoder } from '../encode/document.ts';
import { encodeBulk, interpretBulk } from '../sinks/elasticsearch.ts';
import { encodeLokiPush } from '../sinks/loki.ts';
import { OtlpRecordBuilder, interpretPartialSuccess } from '../sinks/otlp.ts';
import { createSink as createStdoutSink } from '../sinks/stdout.ts';
import { parseTimestamp, nanosText } from '../records/timestamp.ts';
import { makeMeta, makeRecord, testConfig } from '../../test/support/sidecar-helpers.ts';
import { otlpRoot } from './otlp-proto.ts';

const cfg = testConfig();
const id = cfg.identity;
const fileA = makeMeta('main', 2, 'aaaaaaaaaaaaaaaa');
const fileB = makeMeta('init', 0, 'bbbbbbbbbbbbbbbb');
const records = [
  makeRecord('first "quoted" line', { file: fileA, offset: 0, ts: '2024-05-06T07:08:09.123456789Z' }),
  makeRecord('second\twith tab ✓', { file: fileA, offset: 77, stream: 'stderr', ts: '2024-05-06T07:08:10Z', flags: FLAG_TRUNCATED }),
  makeRecord('raw garbage', { file: fileB, offset: 5, stream: 'unknown', ts: '2024-05-06T09:08:09.5+02:00', flags: FLAG_MALFORMED }),
];

function kv(list: Array<{ key: string; value: Record<string, unknown> }>): Record<string, unknown> {
  return Object.fromEntries(list.map((a) => [a.key, Object.values(a.value)[0]]));
}

describe('document (http / stdout / dead-letter) encoding', () => {
  it('produces one valid JSON object per line with OTel k8s names and the record id', () => {
    const body = new DocumentEncoder(id).lines(records).toString('utf8');
    const lines = body.split('\n');
    expect(lines.at(-1)).toBe('');
    const docs = lines.slice(0, -1).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(docs[0]).toEqual({
      '@timestamp': '2024-05-06T07:08:09.123456789Z',
      message: 'first "quoted" line',
      stream: 'stdout',
      id: recordId(records[0]!),
      'k8s.namespace.name': 'team-a',
      'k8s.pod.name': 'job-abc-xyz',
      'k8s.pod.uid': 'uid-1',
      'k8s.container.name': 'main',
      'k8s.container.restart_count': 2,
      'k8s.job.name': 'job-abc',
      'k8s.node.name': 'node-1',
    });
    expect(docs[1]).toMatchObject({ message: 'second\twith tab ✓', stream: 'stderr', 'jobharvest.truncated': true });
    expect(docs[2]).toMatchObject({ 'k8s.container.name': 'init', 'k8s.container.restart_count': 0, 'jobharvest.malformed': true });
  });

  it('ids are deterministic and differ by file and offset', () => {
    expect(recordId(records[0]!)).toBe(recordId(makeRecord('other', { file: makeMeta('main', 2, 'aaaaaaaaaaaaaaaa'), offset: 0 })));
    expect(new Set(records.map(recordId)).size).toBe(3);
  });

  it('stdout sink writes NDJSON and acknowledges once written', async () => {
    const out = new PassThrough();
    const chunks: Buffer[] = [];
    out.on('data', (c: Buffer) => chunks.push(Buffer.from(c)));
    const sink = createStdoutSink({ config: cfg, http: () => { throw new Error('no http'); } }, out);
    expect(await sink.send(records, new AbortController().signal)).toEqual({ kind: 'ok' });
    expect(Buffer.concat(chunks).toString().trim().split('\n')).toHaveLength(3);
  });
});

describe('loki encoding', () => {
  it('groups by label set and sends CRI timestamps in ns with structured metadata', () => {
    const push = JSON.parse(encodeLokiPush(id, records)) as { streams: Array<{ stream: Record<string, string>; values: Array<[string, string, Record<string, string>]> }> };
    expect(push.streams.map((s) => s.stream)).toEqual([
      { namespace: 'team-a', job: 'job-abc', pod: 'job-abc-xyz', container: 'main', stream: 'stdout' },
      { namespace: 'team-a', job: 'job-abc', pod: 'job-abc-xyz', container: 'main', stream: 'stderr' },
      { namespace: 'team-a', job: 'job-abc', pod: 'job-abc-xyz', container: 'init', stream: 'unknown' },
    ]);
    expect(push.streams[0]!.values).toEqual([
      ['1714979289123456789', 'first "quoted" line', { pod_uid: 'uid-1', node: 'node-1', restart_count: '2', id: recordId(records[0]!) }],
    ]);
    expect(push.streams[1]!.values[0]![0]).toBe('1714979290000000000');
    expect(push.streams[1]!.values[0]![2]).toMatchObject({ truncated: 'true' });
    expect(push.streams[2]!.values[0]![0]).toBe('1714979289500000000');
  });

  it('timestamps keep every nanosecond digit', () => {
    expect(nanosText(parseTimestamp('2024-05-06T07:08:09.000000001Z')!)).toBe('1714979289000000001');
    expect(nanosText(parseTimestamp('1970-01-01T00:00:00.1Z')!)).toBe('100000000');
    expect(parseTimestamp('yesterday')).toBeUndefined();
  });
});

describe('elasticsearch encoding', () => {
  it('writes create actions with the record id as _id', () => {
    const lines = encodeBulk(new DocumentEncoder(id), 'logs-x', records).toString().trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines).toHaveLength(6);
    expect(lines[0]).toEqual({ create: { _index: 'logs-x', _id: recordId(records[0]!) } });
    expect(lines[1]).toMatchObject({ message: 'first "quoted" line', id: recordId(records[0]!) });
    expect(lines[4]).toEqual({ create: { _index: 'logs-x', _id: recordId(records[2]!) } });
  });

  it('reads per-item results: 409 is stored, 429/5xx retried, other failures dead-lettered', () => {
    expect(interpretBulk(Buffer.from('{"took":3,"errors":false,"items":[]}'), records)).toEqual({ kind: 'ok' });
    expect(interpretBulk(Buffer.from('{"errors":true,"items":[]}'), records).kind).toBe('retry');
    const body = JSON.stringify({
      errors: true,
      items: [{ create: { status: 409, error: { type: 'version_conflict_engine_exception' } } }, { create: { status: 429, error: { type: 'es_rejected_execution_exception' } } }, { create: { status: 400, error: { type: 'mapper_parsing_exception', reason: 'bad field' } } }],
    });
    const r = interpretBulk(Buffer.from(body), records, 2000);
    expect(r.kind).toBe('partial');
    if (r.kind !== 'partial') return;
    expect(r.retry).toEqual([records[1]]);
    expect(r.failed).toEqual([{ record: records[2], status: 400, reason: 'status 400: mapper_parsing_exception: bad field' }]);
    expect(r.afterMs).toBe(2000);
    const allStored = JSON.stringify({ errors: true, items: records.map(() => ({ create: { status: 409 } })) });
    expect(interpretBulk(Buffer.from(allStored), records)).toEqual({ kind: 'ok' });
  });
});

describe('otlp encoding', () => {
  const builder = new OtlpRecordBuilder(id, (a) => resourceFromAttributes(a));

  it('protobuf decodes back to k8s resource attributes, exact timestamps, bodies and ids', () => {
    const bytes = ProtobufLogsSerializer.serializeRequest(builder.build(records))!;
    const Req = otlpRoot.lookupType('otlp.ExportLogsServiceRequest');
    const req = Req.toObject(Req.decode(bytes), { longs: String, defaults: false }) as {
      resourceLogs: Array<{ resource: { attributes: Array<{ key: string; value: Record<string, unknown> }> }; scopeLogs: Array<{ scope: { name: string }; logRecords: Array<{ timeUnixNano: string; body: { stringValue: string }; attributes: Array<{ key: string; value: Record<string, unknown> }> }> }> }>;
    };
    expect(req.resourceLogs).toHaveLength(2);
    expect(kv(req.resourceLogs[0]!.resource.attributes)).toEqual({
      'k8s.namespace.name': 'team-a',
      'k8s.pod.name': 'job-abc-xyz',
      'k8s.pod.uid': 'uid-1',
      'k8s.container.name': 'main',
      'k8s.container.restart_count': '2',
      'k8s.job.name': 'job-abc',
      'k8s.node.name': 'node-1',
      // No name from the pod template and no CronJob: the Job's name.
      'service.name': 'job-abc',
    });
    expect(kv(req.resourceLogs[1]!.resource.attributes)['k8s.container.name']).toBe('init');
    const logs = req.resourceLogs[0]!.scopeLogs[0]!.logRecords;
    expect(req.resourceLogs[0]!.scopeLogs[0]!.scope.name).toBe('jobharvest');
    expect(logs.map((l) => [l.timeUnixNano, l.body.stringValue])).toEqual([
      ['1714979289123456789', 'first "quoted" line'],
      ['1714979290000000000', 'second\twith tab ✓'],
    ]);
    expect(kv(logs[0]!.attributes)).toEqual({ 'log.record.uid': recordId(records[0]!), 'log.iostream': 'stdout' });
    expect(kv(logs[1]!.attributes)).toMatchObject({ 'log.iostream': 'stderr', 'jobharvest.truncated': true });
  });

  it('JSON encoding carries the same data with ns timestamps as strings', () => {
    const json = JSON.parse(Buffer.from(JsonLogsSerializer.serializeRequest(builder.build(records))!).toString()) as {
      resourceLogs: Array<{ scopeLogs: Array<{ logRecords: Array<{ timeUnixNano: string; body: { stringValue: string } }> }> }>;
    };
    expect(json.resourceLogs[0]!.scopeLogs[0]!.logRecords[0]).toMatchObject({ timeUnixNano: '1714979289123456789', body: { stringValue: 'first "quoted" line' } });
  });

  it('partial_success with rejections dead-letters the batch, an empty one is success', () => {
    const Res = otlpRoot.lookupType('otlp.ExportLogsServiceResponse');
    const rejected = Buffer.from(Res.encode(Res.fromObject({ partialSuccess: { rejectedLogRecords: 2, errorMessage: 'too old' } })).finish());
    const r = interpretPartialSuccess(ProtobufLogsSerializer, rejected, records);
    expect(r.kind).toBe('partial');
    if (r.kind === 'partial') {
      expect(r.failed).toHaveLength(3);
      expect(r.failed[0]!.reason).toContain('rejected 2 of 3');
      expect(r.failed[0]!.reason).toContain('too old');
    }
    const fine = Buffer.from(Res.encode(Res.fromObject({ partialSuccess: { rejectedLogRecords: 0, errorMessage: 'warning only' } })).finish());
    expect(interpretPartialSuccess(ProtobufLogsSerializer, fine, records)).toEqual({ kind: 'ok' });
    expect(interpretPartialSuccess(ProtobufLogsSerializer, Buffer.alloc(0), records)).toEqual({ kind: 'ok' });
    const jsonRejected = Buffer.from(JSON.stringify({ partialSuccess: { rejectedLogRecords: '1' } }));
    expect(interpretPartialSuccess(JsonLogsSerializer, jsonRejected, records).kind).toBe('partial');
  });
});
