// An OTLP record with JSON fields carries its line as written
// (log.record.original, Opt-In in the semantic conventions) only when the map
// body does not hold every value of the line exactly, or on every JSON record
// with JOBHARVEST_JSON_ORIGINAL=always. Whichever way the shaping stage parsed
// the line (from its bytes, writing the value or not; from its string), the
// record is the same, in both OTLP encodings.
import { resourceFromAttributes } from '@opentelemetry/resources';
import { JsonLogsSerializer } from '@opentelemetry/otlp-transformer';
import { describe, expect, it } from 'vitest';
import { VERSION } from '../../src/contract/version.ts';
import { OtlpEncoder } from '../encode/otlp.ts';
import type { LogRecord } from '../records/record.ts';
import { ShapedRecord } from '../records/shaped.ts';
import { OtlpRecordBuilder } from '../sinks/otlp.ts';
import { CriDecoder } from '../sources/node/cri.ts';
import { makeMeta, testConfig } from '../../test/support/sidecar-helpers.ts';
import { anyOf, otlpRoot, type KV } from './otlp-proto.ts';
import { harness, Lines, otlpValues, shaping } from './shape-helpers.ts';

/** Lines whose fields hold every value exactly: spacing, escapes and the spelling of a number are form, not values. */
const EXACT = [
  '{"level":"error","msg":"load failed","step":3,"ratio":0.5,"neg":-12,"ok":true,"none":null,"tags":["a",1,false],"user":{"id":7,"org":{}}}',
  '  { "spaced" : 1.50 , "big" : 123456789012345, "esc" : "caf\\u00e9 \\"q\\" \\n\\t\\/" }',
  '{"level":"info","msg":"grüße 日本 🚀","empty":"","list":[]}',
];

/** Lines whose fields would not: each keeps its line beside them. */
const LOSSY = [
  // More significant digits than a double keeps.
  '{"id":12345678901234567890}',
  '{"pi":3.14159265358979323846}',
  // Past a double's range.
  '{"v":1e400}',
  // A zero whose sign an int_value drops.
  '{"z":-0}',
  // A lone surrogate half becomes U+FFFD in UTF-8 (a pair is kept too: the check is on the escape).
  '{"s":"\\ud800"}',
  '{"s":"\\ud83d\\ude00"}',
  // JSON.parse keeps the last of two equal keys, and puts integer-like keys first.
  '{"a":1,"a":2}',
  '{"b":1,"0":2}',
];

const LINES = [...EXACT, ...LOSSY];
const id = testConfig().identity;
const FILE = makeMeta('main', 0, '0123456789abcdef');

function criRecords(lines: readonly string[]): LogRecord[] {
  const text = lines.map((l, i) => `2024-05-06T07:08:09.${String(i).padStart(9, '0')}Z stdout F ${l}\n`).join('');
  const dec = new CriDecoder(FILE, 0, 1 << 20);
  const out: LogRecord[] = [];
  dec.push(Buffer.from(text), out);
  dec.end(out);
  return out;
}

interface Decoded {
  body: Record<string, unknown>;
  attributes: KV;
}


/** Each record's log.record.original (undefined when absent) and body, from the protobuf request. */
function protobuf(records: readonly LogRecord[]): Array<{ original: unknown; body: unknown }> {
  const Req = otlpRoot.lookupType('otlp.ExportLogsServiceRequest');
  const bytes = new OtlpEncoder(id, 'jobharvest', VERSION).request(records);
  const req = Req.toObject(Req.decode(bytes), { longs: String, defaults: false }) as { resourceLogs: Array<{ scopeLogs: Array<{ logRecords: Decoded[] }> }> };
  return req.resourceLogs[0]!.scopeLogs[0]!.logRecords.map((r) => ({ original: r.attributes.find((a) => a.key === 'log.record.original')?.value.stringValue, body: anyOf(r.body) }));
}

function json(records: readonly LogRecord[]): Array<{ original: unknown; body: unknown }> {
  const builder = new OtlpRecordBuilder(id, (a) => resourceFromAttributes(a));
  const req = JSON.parse(Buffer.from(JsonLogsSerializer.serializeRequest(builder.build(records))!).toString()) as { resourceLogs: Array<{ scopeLogs: Array<{ logRecords: Decoded[] }> }> };
  return req.resourceLogs[0]!.scopeLogs[0]!.logRecords.map((r) => ({ original: r.attributes.find((a) => a.key === 'log.record.original')?.value.stringValue, body: anyOf(r.body) }));
}

async function shaped(env: Record<string, string>, how: 'bytes' | 'bytes, values written' | 'strings'): Promise<LogRecord[]> {
  const h = harness(shaping(env), undefined, how === 'bytes, values written' ? otlpValues() : {});
  await h.shaper.push(how === 'strings' ? new Lines(FILE).make(LINES) : criRecords(LINES));
  await h.shaper.flush();
  expect(h.out).toHaveLength(LINES.length);
  expect(h.out.every((r) => r instanceof ShapedRecord && r.json !== undefined)).toBe(true);
  return h.out;
}

describe('log.record.original on OTLP records with JSON fields', () => {
  for (const how of ['bytes', 'bytes, values written', 'strings'] as const) {
    it(`by default only beside fields that do not hold the line exactly (parsed from ${how})`, async () => {
      const records = await shaped({ PARSE: 'json' }, how);
      for (const [name, got] of [['protobuf', protobuf(records)], ['json', json(records)]] as const) {
        for (const [i, line] of LINES.entries()) {
          const where = `${name}: ${line}`;
          expect(got[i]!.original, where).toBe(i < EXACT.length ? undefined : line);
          // The map is the object as parsed (for the lossy lines, that is the loss: -0 is 0, 1e400 Infinity).
          if (name === 'protobuf' && i < EXACT.length) expect(got[i]!.body, where).toEqual(JSON.parse(line));
        }
      }
    });
  }

  it('JOBHARVEST_JSON_ORIGINAL=always: beside every JSON record', async () => {
    for (const how of ['bytes', 'bytes, values written', 'strings'] as const) {
      const records = await shaped({ PARSE: 'json', JSON_ORIGINAL: 'always' }, how);
      expect(protobuf(records).map((r) => r.original), how).toEqual(LINES);
      expect(json(records).map((r) => r.original), how).toEqual(LINES);
    }
  });

  it('a joined event that is JSON gets the same verdict as one line', async () => {
    const h = harness(shaping({ PARSE: 'json', MULTILINE_START: '^\\{' }));
    await h.shaper.push(new Lines(FILE).make(['{"a":1,', '"b":[2,3]}', '{"id":', '12345678901234567890}', '{"end":true}']));
    await h.shaper.flush();
    const got = protobuf(h.out);
    expect(got.map((r) => r.body)).toEqual([{ a: 1, b: [2, 3] }, { id: Number('12345678901234567890') }, { end: true }]);
    expect(got.map((r) => r.original)).toEqual([undefined, '{"id":\n12345678901234567890}', undefined]);
  });
});
