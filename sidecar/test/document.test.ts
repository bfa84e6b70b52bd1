// The NDJSON body is written straight into a buffer; it must be byte for byte
// what JSON.stringify-based encoding gives, whatever the message holds.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BodyBuilder } from '../encode/body.ts';
import { CriDecoder } from '../sources/node/cri.ts';
import { CriRecord, FLAG_MALFORMED, FLAG_TRUNCATED, type LogRecord } from '../records/record.ts';
import { DocumentEncoder } from '../encode/document.ts';
import { encodeBulk } from '../sinks/elasticsearch.ts';
import { makeMeta, makeRecord, testConfig } from '../../test/support/sidecar-helpers.ts';

const identity = testConfig().identity;

describe('DocumentEncoder.writeLine', () => {
  it('writes exactly encode(r) + newline for any message, stream, flags and offset', () => {
    const files = [makeMeta('main', 0), makeMeta('init-ü', 3, 'fp2')];
    const record = fc.record({
      message: fc.oneof(fc.string(), fc.string({ unit: 'binary' }), fc.string({ unit: 'grapheme' }), fc.constantFrom('"', '\\', '\u0000', '\u2028', '\ud800', 'a\udc00b', '😀', '\u007f')),
      stream: fc.constantFrom('stdout', 'stderr', 'unknown') as fc.Arbitrary<'stdout' | 'stderr' | 'unknown'>,
      flags: fc.constantFrom(0, FLAG_TRUNCATED, FLAG_MALFORMED | FLAG_TRUNCATED),
      offset: fc.nat({ max: Number.MAX_SAFE_INTEGER }),
      file: fc.constantFrom(...files),
    });
    fc.assert(
      fc.property(fc.array(record, { maxLength: 20 }), (recs) => {
        const records = recs.map((r) => makeRecord(r.message, r));
        const enc = new DocumentEncoder(identity);
        const expected = records.map((r) => new DocumentEncoder(identity).encode(r) + '\n').join('');
        expect(enc.lines(records).toString('utf8')).toBe(expected);
        for (const line of expected.split('\n').filter(Boolean)) expect(() => JSON.parse(line)).not.toThrow();
      }),
      { numRuns: 300 },
    );
  });

  it('parsed records, written from their bytes, give the same line as their ts and message strings', () => {
    // Any bytes: ASCII with every escape, valid multi-byte UTF-8, and invalid sequences (decoded to U+FFFD).
    const message = fc.oneof(
      fc.uint8Array({ maxLength: 64 }).map((a) => Buffer.from(a.map((c) => (c === 10 ? 32 : c)))),
      fc.string({ unit: 'grapheme' }).map((t) => Buffer.from(t.replaceAll('\n', ' '))),
      fc.constantFrom(...['"', '\\', '\u0000', '\u001f', '\t\r', '\u007f', 'plain ascii'].map((t) => Buffer.from(t))),
      // Plain text with one byte that needs care, anywhere: the word-at-a-time scan must see it in every lane.
      fc
        .tuple(fc.string({ unit: fc.constantFrom(...'ab yz09=:.{}'.split('')) }), fc.constantFrom('"', '\\', '\u0001', '\u001f', '\t', 'é', '\u007f'), fc.string({ unit: fc.constantFrom(...'ab yz09=:.{}'.split('')) }))
        .map(([a, c, z]) => Buffer.from(a + c + z)),
    );
    fc.assert(
      fc.property(fc.array(fc.tuple(message, fc.constantFrom('stdout', 'stderr'), fc.boolean()), { minLength: 1, maxLength: 20 }), (lines) => {
        const chunk = Buffer.concat(lines.map(([m, stream, cri]) => (cri ? Buffer.concat([Buffer.from(`2024-05-06T07:08:09.123456789Z ${stream} F `), m, Buffer.from('\n')]) : Buffer.concat([Buffer.from('junk '), m, Buffer.from('\n')]))));
        const out: LogRecord[] = [];
        const dec = new CriDecoder(makeMeta(), 0, 32 * 1024, undefined, () => '2024-01-01T00:00:00.000Z');
        dec.push(chunk, out);
        expect(out.every((r) => r instanceof CriRecord)).toBe(true);
        const asStrings = out.map((r) => makeRecord(r.message, { ts: r.ts, stream: r.stream, offset: r.offset, flags: r.flags, file: r.file }));
        const enc = new DocumentEncoder(identity);
        expect(enc.lines(out).toString('utf8')).toBe(new DocumentEncoder(identity).lines(asStrings).toString('utf8'));
      }),
      { numRuns: 300 },
    );
  });

  it('grows the body when a record is larger than the size hint', () => {
    const enc = new DocumentEncoder(identity);
    const big = makeRecord('x'.repeat(300_000));
    const body = new BodyBuilder(16);
    enc.writeLine(body, big);
    enc.writeLine(body, makeRecord('tail'));
    expect(body.finish().toString('utf8')).toBe(enc.encode(big) + '\n' + enc.encode(makeRecord('tail')) + '\n');
  });

  it('the _bulk body pairs a create action carrying the record id with the document', () => {
    const enc = new DocumentEncoder(identity);
    const r = makeRecord('hello "you"', { offset: 1234 });
    const text = encodeBulk(enc, 'logs-ü', [r]).toString('utf8');
    expect(text).toBe(`{"create":{"_index":"logs-ü","_id":"${r.file.idPrefix}1234"}}\n${enc.encode(r)}\n`);
  });
});
