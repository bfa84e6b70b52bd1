import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { afterEach, describe, expect, it } from 'vitest';
import { PodLogWriter, rfc3339Nano, rotationStamp } from '../../support/kubelet-log-writer.ts';

const CRI = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d*[1-9])?Z) (stdout|stderr) ([PF]) (.*)$/s;

function criLines(text: string): string[] {
  expect(text.endsWith('\n')).toBe(true);
  return text.slice(0, -1).split('\n');
}

/** Reassembles P/F fragments per stream, as a CRI reader must. */
function reassemble(lines: string[]): { stream: string; text: string }[] {
  const out: { stream: string; text: string }[] = [];
  const partial: Record<string, string> = {};
  for (const l of lines) {
    const m = CRI.exec(l);
    expect(m, l.slice(0, 80)).not.toBeNull();
    const [, , stream = '', tag = '', text = ''] = m ?? [];
    partial[stream] = (partial[stream] ?? '') + text;
    if (tag === 'F') {
      out.push({ stream, text: partial[stream] ?? '' });
      partial[stream] = '';
    }
  }
  return out;
}

function readAll(dir: string, files: string[]): string {
  return files.map((f) => {
    const b = readFileSync(join(dir, f));
    return (f.endsWith('.gz') ? gunzipSync(b) : b).toString('utf8');
  }).join('');
}

describe('kubelet log writer', () => {
  let root = '';
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  it('formats timestamps like Go RFC3339Nano and rotation names like the kubelet', () => {
    expect(rfc3339Nano(1_700_000_000_123_456_789n)).toBe('2023-11-14T22:13:20.123456789Z');
    expect(rfc3339Nano(1_700_000_000_120_000_000n)).toBe('2023-11-14T22:13:20.12Z');
    expect(rfc3339Nano(1_700_000_000_000_000_000n)).toBe('2023-11-14T22:13:20Z');
    expect(rotationStamp(new Date('2024-03-05T07:08:09.999Z'))).toBe('20240305-070809');
  });

  it('lays out <ns>_<pod>_<uid>/<container>/<restart>.log with CRI lines and P/F splits at 16 KiB', () => {
    root = mkdtempSync(join(tmpdir(), 'jh-klw-'));
    const w = new PodLogWriter({ root, namespace: 'ns1', pod: 'p-1', uid: 'u-1' });
    const c = w.container('main');
    const long = 'x'.repeat(16 * 1024 * 2 + 5);
    const exact = 'y'.repeat(16 * 1024);
    c.write('stdout', 'hello');
    c.write('stderr', long);
    c.write('stdout', exact);
    c.write('stdout', 'a\nb');
    c.write('stdout', '');
    w.close();
    expect(w.podDir).toBe(join(root, 'ns1_p-1_u-1'));
    expect(readdirSync(join(w.podDir, 'main'))).toEqual(['0.log']);
    const lines = criLines(readFileSync(join(w.podDir, 'main', '0.log'), 'utf8'));
    expect(lines.map((l) => CRI.exec(l)?.[3])).toEqual(['F', 'P', 'P', 'F', 'F', 'F', 'F', 'F']);
    expect(lines[1]?.length).toBe(lines[1]!.indexOf(' P ') + 3 + 16 * 1024);
    expect(lines[7]).toMatch(/ stdout F $/);
    const recs = reassemble(lines);
    expect(recs).toEqual([
      { stream: 'stdout', text: 'hello' },
      { stream: 'stderr', text: long },
      { stream: 'stdout', text: exact },
      { stream: 'stdout', text: 'a' },
      { stream: 'stdout', text: 'b' },
      { stream: 'stdout', text: '' },
    ]);
    expect(w.totals()).toMatchObject({ lines: 6, criLines: 8 });
    // Timestamps never go back within a file (Go's format is not sortable as text).
    const ns = lines.map((l) => {
      const t = CRI.exec(l)?.[1] ?? '';
      const frac = /\.(\d+)Z$/.exec(t)?.[1] ?? '';
      return BigInt(Date.parse(t.replace(/\.\d+Z$/, 'Z'))) * 1_000_000n + BigInt(frac.padEnd(9, '0') || '0');
    });
    expect(ns.every((v, i) => i === 0 || v >= ns[i - 1]!)).toBe(true);
    expect(ns[0]! < ns.at(-1)!).toBe(true);
  });

  it('rotates by rename, gzips older rotations, deletes beyond maxFiles and starts N+1.log on restart', () => {
    root = mkdtempSync(join(tmpdir(), 'jh-klw-'));
    let now = Date.parse('2025-01-02T03:04:05Z');
    const w = new PodLogWriter({ root, namespace: 'ns', pod: 'p', uid: 'u', maxSizeBytes: 1000, maxFiles: 5, now: () => new Date(now) });
    const c = w.container('app');
    const dir = join(w.podDir, 'app');
    const written: string[] = [];
    for (let i = 0; i < 400; i++) {
      const line = `line ${i} ${'z'.repeat(40)}`;
      written.push(line);
      c.write('stdout', line);
      now += 100;
    }
    expect(c.rotations).toBeGreaterThanOrEqual(10);
    const files = readdirSync(dir).sort();
    // Live file + (maxFiles - 1) rotations. The kubelet compresses before it
    // renames, so the two newest rotations are still plain.
    expect(files.length).toBe(5);
    expect(files.filter((f) => f === '0.log')).toHaveLength(1);
    const rotated = files.filter((f) => f !== '0.log');
    expect(rotated.every((f) => /^0\.log\.\d{8}-\d{6}(\.gz)?$/.test(f))).toBe(true);
    expect(rotated.map((f) => f.endsWith('.gz'))).toEqual([true, true, false, false]);
    // What is left is exactly the tail of what was written, in order.
    const kept = reassemble(criLines(readAll(dir, [...rotated, '0.log']))).map((r) => r.text);
    expect(kept.length).toBeGreaterThan(0);
    expect(kept).toEqual(written.slice(written.length - kept.length));

    c.restart();
    c.write('stderr', 'after restart');
    w.close();
    expect(readFileSync(join(dir, '1.log'), 'utf8')).toMatch(/^\S+ stderr F after restart\n$/);
    expect(readdirSync(dir)).toContain('0.log');
    c.removeInstanceLogs(0);
    expect(readdirSync(dir)).toEqual(['1.log']);
  });

  it('frames raw pipe output like the runtime: lines at newlines, P fragments for long lines, F for an unterminated end', () => {
    root = mkdtempSync(join(tmpdir(), 'jh-klw-'));
    const w = new PodLogWriter({ root, namespace: 'n', pod: 'p', uid: 'u', maxLineBytes: 10 });
    const c = w.container('c');
    const out = c.pipe('stdout');
    for (const chunk of ['he', 'llo\nwor', 'ld\n', 'abcdefghijklmnopqrstuvwxyz', '\n', 'tail']) out.write(chunk);
    out.end();
    w.close();
    const lines = criLines(readFileSync(join(w.podDir, 'c', '0.log'), 'utf8'));
    expect(lines.map((l) => CRI.exec(l)?.slice(2))).toEqual([
      ['stdout', 'F', 'hello'],
      ['stdout', 'F', 'world'],
      ['stdout', 'P', 'abcdefghij'],
      ['stdout', 'P', 'klmnopqrst'],
      ['stdout', 'F', 'uvwxyz'],
      ['stdout', 'F', 'tail'],
    ]);
    expect(reassemble(lines).map((r) => r.text)).toEqual(['hello', 'world', 'abcdefghijklmnopqrstuvwxyz', 'tail']);
    expect(c.counts).toMatchObject({ lines: 4, criLines: 6, messageBytes: 5 + 5 + 26 + 4 });
  });

  it('buffers large writes without changing the bytes', () => {
    root = mkdtempSync(join(tmpdir(), 'jh-klw-'));
    const fixed = () => new Date(Date.parse('2025-01-01T00:00:00Z'));
    const a = new PodLogWriter({ root: join(root, 'a'), namespace: 'n', pod: 'p', uid: 'u', now: fixed });
    const b = new PodLogWriter({ root: join(root, 'b'), namespace: 'n', pod: 'p', uid: 'u', now: fixed, bufferBytes: 4096 });
    for (const w of [a, b]) {
      const c = w.container('c');
      for (let i = 0; i < 500; i++) c.write(i % 3 ? 'stdout' : 'stderr', `msg ${i}`);
      w.close();
    }
    expect(readFileSync(join(b.podDir, 'c', '0.log'))).toEqual(readFileSync(join(a.podDir, 'c', '0.log')));
  });
});
