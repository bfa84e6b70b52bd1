import { appendFile, mkdir, readFile, rename, truncate, unlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import type { CheckpointEntry } from '../delivery/checkpoint.ts';
import type { LogRecord } from '../records/record.ts';
import { parseLogName } from '../sources/node/discovery.ts';
import { NodeSource } from '../sources/node/node-source.ts';
import { CHUNK_BYTES } from '../sources/node/tail.ts';
import { newStats } from '../stats.ts';
import { cri, testConfig, tmpDir, waitUntil } from '../../test/support/sidecar-helpers.ts';

const sources: NodeSource[] = [];
afterEach(async () => {
  for (const s of sources.splice(0)) {
    await s.shutdown();
    await s.close();
  }
});

interface Harness {
  dir: string;
  source: NodeSource;
  records: LogRecord[];
  messages(): string[];
  /** While paused, emit() blocks like a saturated delivery does. */
  pause(): void;
  resume(): void;
}

async function harness(dir: string, checkpoint = new Map<string, CheckpointEntry>(), selfContainer = 'jobharvest'): Promise<Harness> {
  const config = testConfig({ JOBHARVEST_LOG_DIR: dir, JOBHARVEST_POLL_MS: '50', JOBHARVEST_SELF_CONTAINER: selfContainer });
  const records: LogRecord[] = [];
  let gate: Promise<void> | undefined;
  let open: (() => void) | undefined;
  const source = new NodeSource({
    config,
    stats: newStats(),
    checkpoint,
    emit: async (rs) => {
      if (gate) await gate;
      for (const r of rs) {
        records.push(r);
        r.file.progress.settle(r.file.progress.open(r.safe));
      }
    },
    onProgress: () => {},
  });
  sources.push(source);
  await source.start();
  return {
    dir,
    source,
    records,
    messages: () => records.map((r) => r.message),
    pause: () => {
      gate = new Promise((r) => (open = r));
    },
    resume: () => {
      gate = undefined;
      open?.();
    },
  };
}

const TS = (i: number) => `2024-03-04T05:06:07.${String(i).padStart(9, '0')}Z`;
const lines = (from: number, to: number, prefix = 'line') => {
  let s = '';
  for (let i = from; i < to; i++) s += cri(TS(i), 'stdout', 'F', `${prefix} ${i}`);
  return s;
};
const expected = (from: number, to: number, prefix = 'line') => Array.from({ length: to - from }, (_, k) => `${prefix} ${from + k}`);

describe('log file names', () => {
  it('knows live, rotated and compressed files and nothing else', () => {
    expect(parseLogName('0.log')).toEqual({ restart: 0, kind: 'live' });
    expect(parseLogName('3.log.20240101-120000')).toEqual({ restart: 3, kind: 'rotated' });
    expect(parseLogName('3.log.20240101-120000.gz')).toEqual({ restart: 3, kind: 'gz' });
    expect(parseLogName('3.log.20240101-120000.gz.tmp')).toBeUndefined();
    expect(parseLogName('x.log')).toBeUndefined();
  });
});

describe('NodeSource', () => {
  it('finds containers and restarts appearing later, from byte 0, and skips its own container', async () => {
    const dir = await tmpDir();
    await mkdir(path.join(dir, 'jobharvest'));
    await writeFile(path.join(dir, 'jobharvest', '0.log'), lines(0, 3, 'self'));
    const h = await harness(dir);
    await mkdir(path.join(dir, 'main'));
    await writeFile(path.join(dir, 'main', '0.log'), lines(0, 5));
    await waitUntil(() => h.records.length === 5, 'first container');
    await writeFile(path.join(dir, 'main', '1.log'), lines(5, 8));
    await appendFile(path.join(dir, 'main', '0.log'), lines(100, 101));
    await waitUntil(() => h.records.length === 9, 'restart file and append');
    expect(h.messages().sort()).toEqual([...expected(0, 8), 'line 100'].sort());
    expect(h.messages().some((m) => m.startsWith('self'))).toBe(false);
    expect(new Set(h.records.filter((r) => r.file.restart === 1).map((r) => r.file.restart))).toEqual(new Set([1]));
  });

  it('records keep their text after later reads: big chunks are handed over, small reads copied', async () => {
    // Records point into the chunk they were parsed from and are only read
    // here at the end: a read buffer reused too early would show up as wrong text.
    const dir = await tmpDir();
    await mkdir(path.join(dir, 'main'));
    const file = path.join(dir, 'main', '0.log');
    const big = 4 * CHUNK_BYTES;
    let n = 0;
    let text = '';
    while (text.length < big) text += cri(TS(n), 'stdout', 'F', `line ${n++} ${'x'.repeat(n % 300)}`);
    await writeFile(file, text);
    const h = await harness(dir);
    await waitUntil(() => h.records.length === n, 'the big file');
    for (let k = 0; k < 20; k++) {
      await appendFile(file, cri(TS(n), 'stderr', 'F', `line ${n++} small`));
      await waitUntil(() => h.records.length === n, 'a small append');
    }
    expect(h.messages()).toEqual(Array.from({ length: n }, (_, i) => (i < n - 20 ? `line ${i} ${'x'.repeat((i + 1) % 300)}` : `line ${i} small`)));
    expect(h.records.map((r) => r.ts)).toEqual(Array.from({ length: n }, (_, i) => TS(i)));
  });

  it('follows kubelet rotation: rename, new file, gzip, delete; every line once', async () => {
    const dir = await tmpDir();
    const c = path.join(dir, 'main');
    await mkdir(c);
    const h = await harness(dir);
    await writeFile(path.join(c, '0.log'), lines(0, 100));
    await waitUntil(() => h.records.length === 100, 'first file');
    await appendFile(path.join(c, '0.log'), lines(100, 150));
    await rename(path.join(c, '0.log'), path.join(c, '0.log.20240101-000001'));
    await writeFile(path.join(c, '0.log'), lines(150, 200));
    await waitUntil(() => h.records.length === 200, 'rotated tail and new file');
    // Next rotation cycle: compress the old one (kubelet: .gz.tmp, rename, remove plain).
    const plain = await readFile(path.join(c, '0.log.20240101-000001'));
    await writeFile(path.join(c, '0.log.20240101-000001.gz.tmp'), gzipSync(plain));
    await rename(path.join(c, '0.log.20240101-000001.gz.tmp'), path.join(c, '0.log.20240101-000001.gz'));
    await unlink(path.join(c, '0.log.20240101-000001'));
    await rename(path.join(c, '0.log'), path.join(c, '0.log.20240101-000002'));
    await writeFile(path.join(c, '0.log'), lines(200, 210));
    await waitUntil(() => h.records.length >= 210, 'second rotation');
    await sleep(300);
    expect(h.messages()).toHaveLength(210);
    expect(h.messages().sort()).toEqual(expected(0, 210).sort());
  });

  it('keeps files open across rename and delete while reading is paused (five rotations)', async () => {
    const dir = await tmpDir();
    const c = path.join(dir, 'main');
    await mkdir(c);
    const h = await harness(dir);
    await writeFile(path.join(c, '0.log'), lines(0, 10));
    await waitUntil(() => h.records.length === 10, 'start');
    h.pause();
    await appendFile(path.join(c, '0.log'), lines(10, 20));
    let n = 20;
    for (let rot = 1; rot <= 5; rot++) {
      await rename(path.join(c, '0.log'), path.join(c, `0.log.20240101-00000${rot}`));
      await writeFile(path.join(c, '0.log'), lines(n, n + 20));
      n += 20;
      // Let discovery open the new file before the kubelet deletes beyond its maximum of 2.
      await sleep(150);
      if (rot > 2) await unlink(path.join(c, `0.log.20240101-00000${rot - 2}`));
    }
    h.resume();
    await waitUntil(() => h.records.length >= n, `all ${n} lines`);
    await sleep(200);
    expect(h.messages().sort()).toEqual(expected(0, n).sort());
  });

  it('re-reads a truncated file from byte 0', async () => {
    const dir = await tmpDir();
    const c = path.join(dir, 'main');
    await mkdir(c);
    const h = await harness(dir);
    await writeFile(path.join(c, '0.log'), lines(0, 20));
    await waitUntil(() => h.records.length === 20, 'before truncation');
    await truncate(path.join(c, '0.log'), 0);
    await appendFile(path.join(c, '0.log'), lines(500, 503, 'new'));
    await waitUntil(() => h.records.length === 23, 'after truncation');
    expect(h.messages().slice(20)).toEqual(expected(500, 503, 'new'));
    expect(h.records[20]!.offset).toBe(0);
  });

  it('reads a compressed rotation it never saw plain, and resumes it from a checkpoint', async () => {
    const dir = await tmpDir();
    const c = path.join(dir, 'main');
    await mkdir(c);
    const text = lines(0, 300);
    await writeFile(path.join(c, '0.log.20240101-000001.gz'), gzipSync(Buffer.from(text)));
    const h = await harness(dir);
    await waitUntil(() => h.records.length === 300, 'gz content');
    expect(h.messages()).toEqual(expected(0, 300));
    const key = h.records[0]!.file.key;
    const done = h.source.entries().get(key);
    expect(done).toEqual({ offset: Buffer.byteLength(text), done: true });

    // A restarted sidecar with a half-way checkpoint resumes inside the compressed file.
    const half = Buffer.byteLength(lines(0, 120));
    const h2 = await harness(dir, new Map([[key, { offset: half, done: false }]]));
    await waitUntil(() => h2.records.length === 180, 'resumed gz');
    expect(h2.messages()).toEqual(expected(120, 300));
    expect(h2.records[0]!.offset).toBe(half);
    expect(h2.records[0]!.file.idPrefix).toBe(h.records[0]!.file.idPrefix);

    // And one whose checkpoint says the file is done reads nothing.
    const h3 = await harness(dir, new Map([[key, { offset: Buffer.byteLength(text), done: true }]]));
    await sleep(300);
    expect(h3.records).toHaveLength(0);
  });

  it('resumes a plain file at its checkpoint offset with the same record ids', async () => {
    const dir = await tmpDir();
    const c = path.join(dir, 'main');
    await mkdir(c);
    await writeFile(path.join(c, '0.log'), lines(0, 50));
    const h = await harness(dir);
    await waitUntil(() => h.records.length === 50, 'first run');
    const checkpoint = h.source.entries();
    const [key, entry] = [...checkpoint][0]!;
    expect(entry).toEqual({ offset: Buffer.byteLength(lines(0, 50)), done: false });
    await h.source.shutdown();
    await appendFile(path.join(c, '0.log'), lines(50, 60));
    const h2 = await harness(dir, new Map([[key, entry]]));
    await waitUntil(() => h2.records.length === 10, 'second run');
    expect(h2.messages()).toEqual(expected(50, 60));
  });

  it('drain reads everything to EOF, including an unterminated last line', async () => {
    const dir = await tmpDir();
    const c = path.join(dir, 'main');
    await mkdir(c);
    const h = await harness(dir);
    await writeFile(path.join(c, '0.log'), lines(0, 5) + `${TS(9)} stdout F no newline yet`);
    await waitUntil(() => h.records.length === 5, 'complete lines');
    await h.source.flush();
    expect(h.messages()).toEqual([...expected(0, 5), 'no newline yet']);
    const entry = [...h.source.entries().values()][0]!;
    // A live file released by the drain stays resumable.
    expect(entry.done).toBe(false);
  });
});
