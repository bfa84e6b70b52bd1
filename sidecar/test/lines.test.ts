import { describe, expect, it } from 'vitest';
import { LineSplitter, truncated, truncationMarker, type LineHandler } from '../sources/lines.ts';

interface Line {
  text: string;
  start: number;
  size: number;
  dropped: number;
}

const collect: LineHandler<Line> = {
  line(b, s, e, start, size, dropped, out) {
    out.push({ text: b.toString('utf8', s, e), start, size, dropped });
  },
};

/** Pushes `text` cut into pieces of `step` bytes. */
function split(text: string, step: number, limit = 1024, position = 0): { lines: Line[]; splitter: LineSplitter<Line> } {
  const splitter = new LineSplitter(collect, limit, position);
  const lines: Line[] = [];
  const bytes = Buffer.from(text);
  for (let i = 0; i < bytes.length; i += step) splitter.push(bytes.subarray(i, i + step), lines);
  return { lines, splitter };
}

describe('LineSplitter', () => {
  it('gives the same lines, offsets and sizes however the stream is cut', () => {
    const text = 'first\nsecond line\n\nlast one\n';
    const whole = split(text, text.length).lines;
    expect(whole).toEqual([
      { text: 'first', start: 0, size: 6, dropped: 0 },
      { text: 'second line', start: 6, size: 12, dropped: 0 },
      { text: '', start: 18, size: 1, dropped: 0 },
      { text: 'last one', start: 19, size: 9, dropped: 0 },
    ]);
    for (const step of [1, 2, 3, 5, 7]) expect(split(text, step).lines).toEqual(whole);
    expect(split(text, 4, 1024, 500).lines.map((l) => l.start)).toEqual([500, 506, 518, 519]);
  });

  it('caps a long line at the limit and counts the rest, in one chunk or many', () => {
    const text = 'x'.repeat(30) + '\nok\n';
    for (const step of [text.length, 4, 7]) {
      const { lines, splitter } = split(text, step, 10);
      expect(lines).toEqual([
        { text: 'x'.repeat(10), start: 0, size: 31, dropped: 20 },
        { text: 'ok', start: 31, size: 3, dropped: 0 },
      ]);
      expect(splitter.position).toBe(text.length);
    }
  });

  it('holds an unterminated line until the end, which gives it without a newline', () => {
    const { lines, splitter } = split('a\nno newline', 3, 5);
    expect(lines.map((l) => l.text)).toEqual(['a']);
    expect(splitter.partial).toBe(true);
    expect(splitter.buffered).toBe(5);
    splitter.end(lines);
    expect(lines[1]).toEqual({ text: 'no ne', start: 2, size: 10, dropped: 5 });
    expect(splitter.partial).toBe(false);
  });

  it('forgets a half-read line on reset', () => {
    const { lines, splitter } = split('a\nbroken', 100);
    splitter.reset();
    splitter.push(Buffer.from('b\n'), lines);
    expect(lines.map((l) => l.text)).toEqual(['a', 'b']);
  });

  it('never writes over a carried line it handed out', () => {
    const kept: Buffer[] = [];
    const keeper: LineHandler<Line> = { line: (b, s, e) => void kept.push(b.subarray(s, e)) };
    const splitter = new LineSplitter(keeper, 100);
    for (const piece of ['ab', 'c\nde', 'f\n']) splitter.push(Buffer.from(piece), []);
    expect(kept.map((b) => b.toString())).toEqual(['abc', 'def']);
  });
});

describe('truncated', () => {
  it('cuts on a UTF-8 boundary and counts every byte not kept', () => {
    const msg = Buffer.from('ab€€');
    const out = truncated(Buffer.from('T '), msg, 4, 10);
    expect(out.toString()).toBe('T ab' + truncationMarker(6 + 10));
  });
});
