import { describe, expect, it } from 'vitest';
import { truncationMarker, utf8Prefix } from '../sources/lines.ts';
import { CriDecoder } from '../sources/node/cri.ts';
import { FLAG_INCOMPLETE, FLAG_MALFORMED, FLAG_TRUNCATED, type LogRecord } from '../records/record.ts';
import { cri, makeMeta } from '../../test/support/sidecar-helpers.ts';

const T1 = '2024-01-02T03:04:05.000000001Z';
const T2 = '2024-01-02T03:04:05.000000002Z';
const T3 = '2024-01-02T03:04:06.5+02:00';

function decode(text: string | Buffer, opts: { cap?: number; chunk?: number; end?: boolean } = {}): { records: LogRecord[]; dec: CriDecoder } {
  const dec = new CriDecoder(makeMeta(), 0, opts.cap ?? 1024, undefined, () => 'NOW');
  const buf = Buffer.isBuffer(text) ? text : Buffer.from(text);
  const out: LogRecord[] = [];
  const step = opts.chunk ?? buf.length;
  for (let i = 0; i < buf.length; i += step) dec.push(buf.subarray(i, Math.min(buf.length, i + step)), out);
  if (opts.end) dec.end(out);
  return { records: out, dec };
}

describe('CRI decoder', () => {
  it('parses timestamp, stream and message of F lines, with byte offsets', () => {
    const a = cri(T1, 'stdout', 'F', 'hello world');
    const b = cri(T3, 'stderr', 'F', 'ünïcödé ✓');
    const { records } = decode(a + b);
    expect(records.map((r) => [r.ts, r.stream, r.message, r.offset, r.size, r.flags])).toEqual([
      [T1, 'stdout', 'hello world', 0, Buffer.byteLength(a), 0],
      [T3, 'stderr', 'ünïcödé ✓', Buffer.byteLength(a), Buffer.byteLength(b), 0],
    ]);
  });

  it('reassembles P fragments per stream, even interleaved with the other stream', () => {
    const text = cri(T1, 'stdout', 'P', 'abc') + cri(T1, 'stderr', 'F', 'err line') + cri(T2, 'stdout', 'P', 'def') + cri(T2, 'stdout', 'F', 'ghi');
    const { records } = decode(text);
    expect(records.map((r) => [r.stream, r.message, r.ts, r.offset])).toEqual([
      ['stderr', 'err line', T1, Buffer.byteLength(cri(T1, 'stdout', 'P', 'abc'))],
      ['stdout', 'abcdefghi', T1, 0],
    ]);
    // The stderr record must not let the checkpoint pass the open stdout fragment.
    expect(records[0]!.safe).toBe(0);
    expect(records[1]!.safe).toBe(Buffer.byteLength(text));
    expect(records[1]!.size).toBe(Buffer.byteLength(text) - Buffer.byteLength(cri(T1, 'stderr', 'F', 'err line')));
  });

  it('gives the same records whatever the chunk boundaries', () => {
    let text = '';
    for (let i = 0; i < 50; i++) text += cri(T1, i % 3 ? 'stdout' : 'stderr', i % 4 === 1 ? 'P' : 'F', `msg ${i} ${'é'.repeat(i)}`);
    const whole = decode(text).records.map((r) => [r.message, r.offset, r.safe]);
    for (const chunk of [1, 2, 7, 64]) {
      expect(decode(text, { chunk }).records.map((r) => [r.message, r.offset, r.safe])).toEqual(whole);
    }
  });

  it('accepts extra CRI tags and empty messages', () => {
    const { records } = decode(`${T1} stdout F:x \n${T1} stdout F\n${T1} stdout F \n`);
    expect(records.map((r) => [r.message, r.flags])).toEqual([
      ['', 0],
      ['', 0],
      ['', 0],
    ]);
  });

  it('keeps timestamp, stream, flags and size of a line whose tags run over megabytes', () => {
    const line = `${T1} stderr F:${'t'.repeat(3 << 20)} the message\n`;
    const { records } = decode(line + cri(T2, 'stdout', 'F', 'next'), { cap: 4 << 20 });
    expect(records.map((r) => [r.ts, r.stream, r.message, r.flags, r.offset, r.size])).toEqual([
      [T1, 'stderr', 'the message', 0, 0, Buffer.byteLength(line)],
      [T2, 'stdout', 'next', 0, Buffer.byteLength(line), cri(T2, 'stdout', 'F', 'next').length],
    ]);
  });

  it('forwards malformed lines raw, counts them and keeps going', () => {
    const text = 'not a cri line\n' + `${T1} stdvoid F x\n` + `${T1} stdout X x\n` + cri(T2, 'stdout', 'F', 'fine') + '\n';
    const { records, dec } = decode(text);
    expect(records.map((r) => [r.message, r.stream, r.flags & FLAG_MALFORMED, r.ts])).toEqual([
      ['not a cri line', 'unknown', FLAG_MALFORMED, 'NOW'],
      [`${T1} stdvoid F x`, 'unknown', FLAG_MALFORMED, 'NOW'],
      [`${T1} stdout X x`, 'unknown', FLAG_MALFORMED, 'NOW'],
      ['fine', 'stdout', 0, T2],
      ['', 'unknown', FLAG_MALFORMED, 'NOW'],
    ]);
    expect(dec.stats.malformed).toBe(4);
  });

  it('caps a long F line with a marker, without splitting a UTF-8 character', () => {
    const msg = 'a' + '€'.repeat(600); // 1 + 1800 bytes
    const { records, dec } = decode(cri(T1, 'stdout', 'F', msg), { cap: 1024 });
    const r = records[0]!;
    expect(r.flags & FLAG_TRUNCATED).toBe(FLAG_TRUNCATED);
    const kept = 1 + 341 * 3; // 1024 bytes would cut the 342nd euro sign
    expect(r.message).toBe('a' + '€'.repeat(341) + truncationMarker(1801 - kept));
    expect(r.message).not.toContain('\uFFFD');
    expect(dec.stats.truncated).toBe(1);
  });

  it('caps reassembled P/F records and drops the excess of further fragments', () => {
    const frag = 'x'.repeat(700);
    const text = cri(T1, 'stdout', 'P', frag) + cri(T1, 'stdout', 'P', frag) + cri(T1, 'stdout', 'F', 'tail');
    const { records } = decode(text, { cap: 1024 });
    expect(records).toHaveLength(1);
    expect(records[0]!.message).toBe('x'.repeat(1024) + truncationMarker(700 * 2 + 4 - 1024));
    expect(records[0]!.size).toBe(Buffer.byteLength(text));
  });

  it('survives a huge line without newline spread over many chunks', () => {
    const huge = `${T1} stdout F ` + 'y'.repeat(100_000) + '\n' + cri(T2, 'stdout', 'F', 'after');
    const { records } = decode(huge, { cap: 1024, chunk: 4096 });
    expect(records.map((r) => r.flags)).toEqual([FLAG_TRUNCATED, 0]);
    expect(records[0]!.message.startsWith('y'.repeat(1024))).toBe(true);
    expect(records[0]!.size).toBe(huge.indexOf('\n') + 1);
    expect(records[1]!.message).toBe('after');
    expect(records[1]!.offset).toBe(huge.indexOf('\n') + 1);
  });

  it('emits an unterminated last line and open fragments at end()', () => {
    const text = cri(T1, 'stdout', 'P', 'open-') + cri(T1, 'stderr', 'F', 'done') + `${T2} stderr F no newline`;
    const partial = decode(text);
    expect(partial.records.map((r) => r.message)).toEqual(['done']);
    const { records } = decode(text, { end: true });
    expect(records.map((r) => [r.message, r.flags])).toEqual([
      ['done', 0],
      ['no newline', 0],
      ['open-', FLAG_INCOMPLETE],
    ]);
    expect(records.at(-1)!.safe).toBe(Buffer.byteLength(text));
  });

  it('starts at a checkpoint offset and numbers records from there', () => {
    const dec = new CriDecoder(makeMeta(), 1000, 1024);
    const out: LogRecord[] = [];
    dec.push(Buffer.from(cri(T1, 'stdout', 'F', 'x') + cri(T1, 'stdout', 'F', 'y')), out);
    expect(out.map((r) => r.offset)).toEqual([1000, 1000 + cri(T1, 'stdout', 'F', 'x').length]);
    expect(dec.position).toBe(1000 + 2 * cri(T1, 'stdout', 'F', 'x').length);
  });

  it('utf8Prefix never ends inside a sequence', () => {
    const b = Buffer.from('a€b😀');
    expect([1, 2, 3, 4, 5, 6, 7, 8, 9].map((n) => utf8Prefix(b, n))).toEqual([1, 1, 1, 4, 5, 5, 5, 5, 9]);
  });
});
