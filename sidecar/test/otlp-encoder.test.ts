import { ProtobufLogsSerializer } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { describe, expect, it } from 'vitest';
import { VERSION } from '../../src/contract/version.ts';
import { OtlpEncoder } from '../encode/otlp.ts';
import { decodeExportLogsResponse } from '../encode/otlp-response.ts';
import { varintSize } from '../encode/protobuf.ts';
import { CriRecord, FLAG_INCOMPLETE, FLAG_MALFORMED, FLAG_TRUNCATED, recordId, type LogRecord, type Stream } from '../records/record.ts';
import { OtlpRecordBuilder, interpretPartialSuccess } from '../sinks/otlp.ts';
import { makeMeta, makeRecord, testConfig } from '../../test/support/sidecar-helpers.ts';
import { otlpRoot } from './otlp-proto.ts';

const id = testConfig().identity;
const fileA = makeMeta('main', 2, 'aaaaaaaaaaaaaaaa');
const fileB = makeMeta('init', 0, 'bbbbbbbbbbbbbbbb');
const fileA2 = makeMeta('main', 2, 'cccccccccccccccc');
const Req = otlpRoot.lookupType('otlp.ExportLogsServiceRequest');

/** A record as the node-mode parser makes it: timestamp and message are bytes of one CRI line. */
function cri(file = fileA, offset: number, ts: string, message: Buffer | string, opts: { stream?: Stream; flags?: number } = {}): LogRecord {
  const stream = opts.stream ?? 'stdout';
  const msg = typeof message === 'string' ? Buffer.from(message, 'utf8') : message;
  const head = Buffer.from(`${ts} ${stream} F `, 'latin1');
  // Something before and after the line, as in a read chunk.
  const src = Buffer.concat([Buffer.from('xx\n'), head, msg, Buffer.from('\nyy')]);
  const tsAt = 3;
  const msgAt = tsAt + head.length;
  return CriRecord.of(file, offset, stream, src, tsAt, tsAt + ts.length, msgAt, msgAt + msg.length, msgAt + msg.length - tsAt + 1, offset + 100, opts.flags ?? 0);
}

function decode(bytes: Uint8Array): Record<string, unknown> {
  return Req.toObject(Req.decode(bytes), { longs: String, defaults: true, arrays: true });
}

/** What the OpenTelemetry serializer sends for the same records, read back with the published field numbers. */
function reference(records: LogRecord[]): { decoded: Record<string, unknown>; observed: { sec: number; nanos: number } } {
  const sdk = new OtlpRecordBuilder(id, (a) => resourceFromAttributes(a)).build(records);
  const [sec, nanos] = sdk[0]!.hrTimeObserved;
  return { decoded: decode(ProtobufLogsSerializer.serializeRequest(sdk)!), observed: { sec, nanos } };
}

type Decoded = {
  resourceLogs: Array<{
    resource: { attributes: Array<{ key: string; value: Record<string, unknown> }> };
    scopeLogs: Array<{ scope: { name: string; version: string }; logRecords: Array<{ timeUnixNano: string; observedTimeUnixNano: string; body: { stringValue: string }; attributes: Array<{ key: string; value: Record<string, unknown> }> }> }>;
  }>;
};

describe('OTLP resource: the OpenTelemetry Kubernetes set', () => {
  const resourceOf = (identity: typeof id) => {
    const req = decode(new OtlpEncoder(identity, 'jobharvest', VERSION).request([cri(fileA, 0, '2024-05-06T07:08:09Z', 'x')])) as Decoded;
    return Object.fromEntries(req.resourceLogs[0]!.resource.attributes.map((a) => [a.key, a.value.stringValue ?? a.value.intValue]));
  };

  it("a CronJob's run carries the Job's uid, the CronJob's name and uid, and the CronJob's name as service.name; the SDK's serializer sends the same", () => {
    const identity = { ...id, jobUid: 'job-uid-1', cronJob: { name: 'nightly', uid: 'cj-uid-1' } };
    expect(resourceOf(identity)).toMatchObject({ 'k8s.job.name': id.job, 'k8s.job.uid': 'job-uid-1', 'k8s.cronjob.name': 'nightly', 'k8s.cronjob.uid': 'cj-uid-1', 'service.name': 'nightly' });
    const sdk = decode(ProtobufLogsSerializer.serializeRequest(new OtlpRecordBuilder(identity, (a) => resourceFromAttributes(a)).build([cri(fileA, 0, '2024-05-06T07:08:09Z', 'x')]))!) as Decoded;
    expect(Object.fromEntries(sdk.resourceLogs[0]!.resource.attributes.map((a) => [a.key, a.value.stringValue ?? a.value.intValue]))).toEqual(resourceOf(identity));
  });

  it('service.name: the name the pod template gives first, then the CronJob, the Job, the pod', () => {
    expect(resourceOf({ ...id, serviceName: 'etl', cronJob: { name: 'nightly', uid: '' } })['service.name']).toBe('etl');
    expect(resourceOf({ ...id, cronJob: { name: 'nightly', uid: '' } })).not.toHaveProperty('k8s.cronjob.uid');
    expect(resourceOf(id)['service.name']).toBe(id.job);
    expect(resourceOf({ ...id, job: '' })['service.name']).toBe(id.pod);
    expect(resourceOf(id)).not.toHaveProperty('k8s.job.uid');
    expect(resourceOf(id)).not.toHaveProperty('k8s.cronjob.name');
  });
});

describe('OtlpEncoder (protobuf written into the body)', () => {
  it('decodes field by field to what the OpenTelemetry serializer sends, for parsed and other records', () => {
    const truncatedUtf8 = Buffer.from('cut in the middle of ✓', 'utf8').subarray(0, -1);
    const records = [
      cri(fileA, 0, '2024-05-06T07:08:09.123456789Z', 'plain ascii line with "quotes" and \\ backslash'),
      cri(fileA, 77, '2024-05-06T07:08:09.5Z', 'non-ASCII: grüße, 日本語, emoji 🚀', { stream: 'stderr' }),
      cri(fileA, 150, '2024-05-06T07:08:10Z', ''),
      cri(fileA, 151, '2024-05-06T07:08:10.000000001Z', truncatedUtf8, { flags: FLAG_TRUNCATED }),
      cri(fileA, 300, '2024-05-06T09:08:10.25+02:00', Buffer.from([0xff, 0x41, 0xc3]), { flags: FLAG_INCOMPLETE | FLAG_TRUNCATED }),
      cri(fileA, 2 ** 31 + 5, '2024-05-06T07:08:10.1234567891234Z', 'x'.repeat(200)),
      cri(fileA, 9_007_199_254_740_000, '2100-01-01T00:00:00.999999999Z', 'y'.repeat(20_000)),
      makeRecord('raw garbage ✓ not CRI', { file: fileA, offset: 5, stream: 'unknown', ts: '2024-05-06T09:08:09.5+02:00', flags: FLAG_MALFORMED }),
      makeRecord('', { file: fileA, offset: 6, ts: '2024-05-06T07:08:09Z' }),
      makeRecord('lone surrogate \ud800 here', { file: fileA, offset: 7, ts: '1970-01-01T00:00:00.000000001Z' }),
      // A file of the same container run (a rotated file): same resource.
      cri(fileA2, 12, '2024-05-06T07:08:11.1Z', 'after rotation'),
      cri(fileB, 3, '2024-05-06T07:08:12.7Z', 'init container', { stream: 'stderr' }),
      makeRecord('three flags', { file: fileB, offset: 9, flags: FLAG_TRUNCATED | FLAG_MALFORMED | FLAG_INCOMPLETE }),
    ];
    const { decoded, observed } = reference(records);
    const mine = decode(new OtlpEncoder(id, 'jobharvest', VERSION).request(records, observed));
    expect(mine).toEqual(decoded);

    // And the fields mean what they should, not just what the reference says.
    const req = mine as Decoded;
    expect(req.resourceLogs).toHaveLength(2);
    const logs = req.resourceLogs[0]!.scopeLogs[0]!.logRecords;
    expect(req.resourceLogs[0]!.scopeLogs[0]!.scope).toMatchObject({ name: 'jobharvest', version: VERSION });
    expect(logs.map((l) => l.timeUnixNano).slice(0, 7)).toEqual([
      '1714979289123456789',
      '1714979289500000000',
      '1714979290000000000',
      '1714979290000000001',
      '1714979290250000000',
      '1714979290123456789',
      '4102444800999999999',
    ]);
    expect(logs[9]!.timeUnixNano).toBe('1');
    expect(logs.map((l) => l.body.stringValue).slice(0, 5)).toEqual([
      'plain ascii line with "quotes" and \\ backslash',
      'non-ASCII: grüße, 日本語, emoji 🚀',
      '',
      'cut in the middle of \ufffd',
      '\ufffdA\ufffd',
    ]);
    expect(logs[3]!.attributes.map((a) => a.key)).toEqual(['log.record.uid', 'log.iostream', 'jobharvest.truncated']);
    expect(logs[5]!.attributes[0]!.value).toMatchObject({ stringValue: recordId(records[5]!) });
    expect(logs[6]!.attributes[0]!.value).toMatchObject({ stringValue: `${fileA.idPrefix}9007199254740000` });
  });

  it('starts a new resource when the container run changes and keeps the records in order', () => {
    const records = [cri(fileA, 1, '2024-05-06T07:08:09Z', 'a1'), cri(fileB, 2, '2024-05-06T07:08:09Z', 'b1'), cri(fileA, 3, '2024-05-06T07:08:09Z', 'a2')];
    const req = decode(new OtlpEncoder(id, 'jobharvest', VERSION).request(records)) as Decoded;
    expect(req.resourceLogs.map((rl) => [rl.resource.attributes.find((a) => a.key === 'k8s.container.name')!.value.stringValue, rl.scopeLogs[0]!.logRecords.map((l) => l.body.stringValue)])).toEqual([
      ['main', ['a1']],
      ['init', ['b1']],
      ['main', ['a2']],
    ]);
  });

  it('gives every line of a second its exact nanoseconds (the second is parsed once, the fraction added with a carry)', () => {
    // A fixed sequence: seconds spread over 1970..2106, runs of lines within one second, fractions of 0 to 9 digits.
    let x = 0x2545f491;
    const next = (n: number): number => {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      return (x >>> 0) % n;
    };
    const records: LogRecord[] = [];
    const want: string[] = [];
    for (let i = 0; records.length < 3000; i++) {
      const sec = next(2) === 0 ? next(2 ** 31) * 2 + next(2) : 4_000_000_000 + next(294_967_295);
      for (let k = 1 + next(6); k > 0; k--) {
        const digits = next(10);
        const frac = digits === 0 ? 0 : next(10 ** digits);
        const nanos = frac * 10 ** (9 - digits);
        const ts = new Date(sec * 1000).toISOString().slice(0, 19) + (digits === 0 ? '' : `.${String(frac).padStart(digits, '0')}`) + 'Z';
        records.push(cri(fileA, records.length, ts, `line ${i}`));
        want.push(String(BigInt(sec) * 1_000_000_000n + BigInt(nanos)));
      }
    }
    const req = decode(new OtlpEncoder(id, 'jobharvest', VERSION).request(records)) as Decoded;
    expect(req.resourceLogs[0]!.scopeLogs[0]!.logRecords.map((l) => l.timeUnixNano)).toEqual(want);
  });

  it('writes multi-byte length prefixes for a large batch (group lengths over 2 MiB)', () => {
    const records: LogRecord[] = [];
    for (let i = 0; i < 1600; i++) records.push(cri(fileA, i * 3000, '2024-05-06T07:08:09.123Z', `line ${i} ` + 'z'.repeat(i % 2 ? 2990 : 40)));
    const { decoded, observed } = reference(records);
    const bytes = new OtlpEncoder(id, 'jobharvest', VERSION).request(records, observed);
    expect(bytes.length).toBeGreaterThan(2 ** 21);
    expect(decode(bytes)).toEqual(decoded);
  });

  it('sizes varints as protobuf encodes them', () => {
    for (const [v, n] of [[0, 1], [127, 1], [128, 2], [16383, 2], [16384, 3], [2 ** 21 - 1, 3], [2 ** 21, 4], [2 ** 28 - 1, 4], [2 ** 28, 5], [2 ** 35 - 1, 5], [2 ** 35, 6]] as const) {
      expect(varintSize(v), String(v)).toBe(n);
    }
  });

  it('reads ExportLogsServiceResponse partial_success as the OpenTelemetry deserializer does', () => {
    const Res = otlpRoot.lookupType('otlp.ExportLogsServiceResponse');
    const encode = (o: Record<string, unknown>) => Buffer.from(Res.encode(Res.fromObject(o)).finish());
    const cases = [
      encode({ partialSuccess: { rejectedLogRecords: 2, errorMessage: 'too old: ✓' } }),
      encode({ partialSuccess: { rejectedLogRecords: 300, errorMessage: '' } }),
      encode({ partialSuccess: { errorMessage: 'warning only' } }),
      encode({}),
    ];
    for (const bytes of cases) {
      const mine = decodeExportLogsResponse(bytes).partialSuccess;
      const sdk = ProtobufLogsSerializer.deserializeResponse(bytes).partialSuccess;
      expect(Number(mine?.rejectedLogRecords ?? 0)).toBe(Number(sdk?.rejectedLogRecords ?? 0));
      expect(mine?.errorMessage ?? '').toBe(sdk?.errorMessage ?? '');
    }
    expect(decodeExportLogsResponse(cases[0]!).partialSuccess).toEqual({ rejectedLogRecords: 2, errorMessage: 'too old: ✓' });
    const records = [makeRecord('a'), makeRecord('b')];
    const reader = { deserializeResponse: decodeExportLogsResponse };
    expect(interpretPartialSuccess(reader, cases[1]!, records).kind).toBe('partial');
    expect(interpretPartialSuccess(reader, cases[2]!, records)).toEqual({ kind: 'ok' });
    // Bytes that are no protobuf message: the records were accepted (2xx), so not a failure.
    expect(() => decodeExportLogsResponse(Buffer.from([0x0a, 0x05, 0x08]))).toThrow();
    expect(interpretPartialSuccess(reader, Buffer.from([0x0a, 0x05, 0x08]), records)).toEqual({ kind: 'ok' });
  });
});
