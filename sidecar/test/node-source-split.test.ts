// A line the runtime was writing when the kubelet's rotation made it reopen
// the log: the rotated file ends with a P fragment and the new `0.log` starts
// with the rest. Seen on a real node (containerd 2.2.9) once in 2.5 M lines.
// The line must be shipped once and whole, whichever file is found or read
// first, and the checkpoint must never pass the fragment before it is shipped.
import { appendFile, mkdir, rename, stat, writeFile } from 'node:fs/promises';
import { gzipSync } from 'node:zlib';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import type { CheckpointEntry } from '../delivery/checkpoint.ts';
import type { Ticket } from '../records/progress.ts';
import { FLAG_INCOMPLETE, FLAG_TRUNCATED, recordId, type LogRecord } from '../records/record.ts';
import { NodeSource } from '../sources/node/node-source.ts';
import { newStats, type Stats } from '../stats.ts';
import { cri, testConfig, tmpDir, waitUntil } from '../../test/support/sidecar-helpers.ts';

const sources: NodeSource[] = [];
afterEach(async () => {
  for (const s of sources.splice(0)) {
    await s.shutdown();
    await s.close();
  }
});

interface Harness {
  source: NodeSource;
  stats: Stats;
  records: LogRecord[];
  /** Acknowledges the records `which` picks (all by default), as a delivery would. */
  ack(which?: (r: LogRecord) => boolean): void;
  /** While paused, emit() blocks like a saturated delivery does. */
  pause(): void;
  resume(): void;
}

/** Records are acknowledged only when the test says so, so that the checkpoint can be looked at in between. */
async function harness(dir: string, checkpoint = new Map<string, CheckpointEntry>(), env: Record<string, string> = {}): Promise<Harness> {
  const config = testConfig({ JOBHARVEST_LOG_DIR: dir, JOBHARVEST_POLL_MS: '50', ...env });
  const stats = newStats();
  const records: LogRecord[] = [];
  const tickets = new Map<LogRecord, Ticket<LogRecord>>();
  let gate: Promise<void> | undefined;
  let open: (() => void) | undefined;
  const source = new NodeSource({
    config,
    stats,
    checkpoint,
    emit: async (rs) => {
      if (gate) await gate;
      for (const r of rs) {
        records.push(r);
        tickets.set(r, r.file.progress.open(r.safe, r));
      }
    },
    onProgress: () => {},
  });
  sources.push(source);
  await source.start();
  return {
    source,
    stats,
    records,
    ack: (which = () => true) => {
      for (const [r, t] of tickets) {
        if (!which(r)) continue;
        tickets.delete(r);
        r.file.progress.settle(t);
      }
    },
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
const lines = (from: number, to: number, stream: 'stdout' | 'stderr' = 'stdout') => {
  let s = '';
  for (let i = from; i < to; i++) s += cri(TS(i), stream, 'F', `line ${i}`);
  return s;
};
const expected = (from: number, to: number) => Array.from({ length: to - from }, (_, k) => `line ${from + k}`);
const HEAD = 'split line, head -- ';
const TAIL = 'and its tail';
const ROTATED = '0.log.20240304-050607';

/** The rotated file: lines 0..n, then the head of a line as a P fragment. */
const rotatedText = (n: number) => lines(0, n) + cri(TS(n), 'stdout', 'P', HEAD);
/** The new file: the rest of that line, then more lines. */
const liveText = (n: number, more: number) => cri(TS(n + 1), 'stdout', 'F', TAIL) + lines(n + 2, n + 2 + more);

function expectWhole(records: LogRecord[], n: number, more: number): void {
  expect(records.map((r) => r.message).sort()).toEqual([...expected(0, n), HEAD + TAIL, ...expected(n + 2, n + 2 + more)].sort());
  const joined = records.find((r) => r.message === HEAD + TAIL)!;
  expect(joined.flags & FLAG_INCOMPLETE, 'the joined line is not incomplete').toBe(0);
  // The time of the line is when it began.
  expect(joined.ts).toBe(TS(n));
}

describe('a line split by a rotation (P at the end of the rotated file, F in the new one), node mode', () => {
  it('the rotated file is read to its end and let go before the new file has the rest: one record, whole', async () => {
    const dir = await tmpDir();
    const c = path.join(dir, 'main');
    await mkdir(c);
    const h = await harness(dir);
    await writeFile(path.join(c, '0.log'), rotatedText(30));
    await waitUntil(() => h.records.length === 30, 'the complete lines of the first file');
    // The runtime reopened: the new file exists, empty, so the rotated one is let go.
    await rename(path.join(c, '0.log'), path.join(c, ROTATED));
    await writeFile(path.join(c, '0.log'), '');
    await waitUntil(() => h.stats.filesReleased === 1, 'the rotated file let go');
    await sleep(100);
    expect(h.records).toHaveLength(30);
    await appendFile(path.join(c, '0.log'), liveText(30, 20));
    await waitUntil(() => h.records.length === 51, 'the new file');
    await sleep(150);
    expectWhole(h.records, 30, 20);
    h.ack();
    await h.source.flush();
    expect(h.records).toHaveLength(51);
  });

  it('the new file is found, with the rest, while the rotated file is still being read: one record, whole', async () => {
    const dir = await tmpDir();
    const c = path.join(dir, 'main');
    await mkdir(c);
    const h = await harness(dir);
    await writeFile(path.join(c, '0.log'), lines(0, 5));
    await waitUntil(() => h.records.length === 5, 'the first lines');
    // Reading stalls (delivery saturated) with the rotated file unread to its end,
    // while the kubelet rotates and the new file is found and holds the rest.
    h.pause();
    await appendFile(path.join(c, '0.log'), lines(5, 30) + cri(TS(30), 'stdout', 'P', HEAD));
    await sleep(150);
    await rename(path.join(c, '0.log'), path.join(c, ROTATED));
    await writeFile(path.join(c, '0.log'), liveText(30, 20));
    await sleep(300);
    h.resume();
    await waitUntil(() => h.records.length >= 51, 'both files');
    await sleep(200);
    expectWhole(h.records, 30, 20);
  });

  it('a restarted sidecar finds both files at once (the new one is listed first): one record, whole', async () => {
    const dir = await tmpDir();
    const c = path.join(dir, 'main');
    await mkdir(c);
    await writeFile(path.join(c, ROTATED), rotatedText(30));
    await writeFile(path.join(c, '0.log'), liveText(30, 20));
    const h = await harness(dir);
    await waitUntil(() => h.records.length >= 51, 'both files');
    await sleep(200);
    expectWhole(h.records, 30, 20);
  });

  it('a compressed rotation never seen plain hands its last fragment on too', async () => {
    const dir = await tmpDir();
    const c = path.join(dir, 'main');
    await mkdir(c);
    await writeFile(path.join(c, `${ROTATED}.gz`), gzipSync(Buffer.from(rotatedText(30))));
    await writeFile(path.join(c, '0.log'), liveText(30, 20));
    const h = await harness(dir);
    await waitUntil(() => h.records.length >= 51, 'both files');
    await sleep(200);
    expectWhole(h.records, 30, 20);
  });

  it('lines of the other stream in between, and a rest in several fragments: joined per stream', async () => {
    const dir = await tmpDir();
    const c = path.join(dir, 'main');
    await mkdir(c);
    await writeFile(path.join(c, ROTATED), lines(0, 3) + cri(TS(3), 'stdout', 'P', 'out-a ') + cri(TS(4), 'stderr', 'P', 'err-a ') + lines(5, 6, 'stderr'));
    await writeFile(path.join(c, '0.log'), cri(TS(7), 'stderr', 'F', 'err-b') + cri(TS(8), 'stdout', 'P', 'out-b ') + cri(TS(9), 'stdout', 'F', 'out-c') + lines(10, 12));
    const h = await harness(dir);
    await waitUntil(() => h.records.length >= 8, 'both files');
    await sleep(200);
    expect(new Set(h.records.map(recordId)).size, 'ids are unique').toBe(h.records.length);
    // `err-a ` took line 5's F in the rotated file already; err-b then is a line of its own.
    expect(h.records.map((r) => `${r.stream}:${r.message}`).sort()).toEqual(
      ['stdout:line 0', 'stdout:line 1', 'stdout:line 2', 'stderr:err-a line 5', 'stderr:err-b', 'stdout:out-a out-b out-c', 'stdout:line 10', 'stdout:line 11'].sort(),
    );
  });

  it('keeps the record limit across the two files, with the truncation marker', async () => {
    const dir = await tmpDir();
    const c = path.join(dir, 'main');
    await mkdir(c);
    await writeFile(path.join(c, ROTATED), cri(TS(0), 'stdout', 'P', 'a'.repeat(900)));
    await writeFile(path.join(c, '0.log'), cri(TS(1), 'stdout', 'F', 'b'.repeat(300)) + lines(2, 3));
    const h = await harness(dir, new Map(), { JOBHARVEST_MAX_RECORD_BYTES: '1024' });
    await waitUntil(() => h.records.length >= 2, 'both files');
    await sleep(200);
    expect(h.records).toHaveLength(2);
    const big = h.records.find((r) => r.message.startsWith('a'))!;
    expect(big.flags & FLAG_TRUNCATED).toBe(FLAG_TRUNCATED);
    expect(big.message).toBe('a'.repeat(900) + 'b'.repeat(124) + ' [jobharvest: truncated 176 bytes]');
  });

  it('drain: a rotated file whose rest never came ships its fragment as an incomplete line, as an unterminated last line', async () => {
    const dir = await tmpDir();
    const c = path.join(dir, 'main');
    await mkdir(c);
    const h = await harness(dir);
    await writeFile(path.join(c, '0.log'), rotatedText(10));
    await waitUntil(() => h.records.length === 10, 'the complete lines');
    await rename(path.join(c, '0.log'), path.join(c, ROTATED));
    await writeFile(path.join(c, '0.log'), '');
    await waitUntil(() => h.stats.filesReleased === 1, 'the rotated file let go');
    await h.source.flush();
    expect(h.records.map((r) => r.message)).toEqual([...expected(0, 10), HEAD]);
    const last = h.records.at(-1)!;
    expect(last.flags & FLAG_INCOMPLETE).toBe(FLAG_INCOMPLETE);
    // Shipped, it completes the rotated file.
    h.ack();
    const size = (await stat(path.join(c, ROTATED))).size;
    expect(h.source.entries().get(last.file.key)).toEqual({ offset: size, done: true, ts: TS(10), n: 1 });
  });
});

describe('a line split by a rotation: the checkpoint', () => {
  /** The rotated file, the new one, and their checkpoint keys after a first sidecar read both. */
  async function firstRun() {
    const dir = await tmpDir();
    const c = path.join(dir, 'main');
    await mkdir(c);
    await writeFile(path.join(c, ROTATED), rotatedText(30));
    await writeFile(path.join(c, '0.log'), liveText(30, 20));
    const h = await harness(dir);
    await waitUntil(() => h.records.length >= 51, 'both files');
    await sleep(150);
    const joined = h.records.find((r) => r.message === HEAD + TAIL)!;
    const rotatedKey = h.records.find((r) => r.message === 'line 0')!.file.key;
    const liveKey = joined.file.key;
    const headAt = Buffer.byteLength(lines(0, 30));
    const sizes = { rotated: (await stat(path.join(c, ROTATED))).size, live: (await stat(path.join(c, '0.log'))).size };
    return { dir, c, h, joined, rotatedKey, liveKey, headAt, sizes };
  }

  /** A second sidecar, from the first one's checkpoint. */
  async function restart(dir: string, entries: Map<string, CheckpointEntry>, expectAtLeast: number): Promise<Harness> {
    const h2 = await harness(dir, new Map([...entries].map(([k, e]) => [k, { offset: e.offset, done: e.done }])));
    await waitUntil(() => h2.records.length >= expectAtLeast, 'the second sidecar');
    await sleep(250);
    return h2;
  }

  it('holds both files before the split line until it is acknowledged; a restart then ships it once, whole, with the same id', async () => {
    const { dir, h, joined, rotatedKey, liveKey, headAt } = await firstRun();
    // Everything but the split line is acknowledged.
    h.ack((r) => r !== joined);
    const held = h.source.entries();
    expect(held.get(rotatedKey)).toMatchObject({ offset: headAt, done: false });
    expect(held.get(liveKey)).toMatchObject({ offset: 0, done: false });
    await h.source.shutdown();

    // The new file's lines are sent again (duplicates, bounded); the split line once, whole.
    const h2 = await restart(dir, held, 21);
    expect(h2.records.map((r) => r.message)).toEqual([HEAD + TAIL, ...expected(32, 52)]);
    const again = h2.records[0]!;
    expect(again.flags).toBe(0);
    expect(recordId(again)).toBe(recordId(joined));
  });

  it('once the split line is acknowledged, the rotated file is done and the new one past it; a restart sends nothing again', async () => {
    const { dir, h, rotatedKey, liveKey, sizes } = await firstRun();
    h.ack();
    const entries = h.source.entries();
    expect(entries.get(rotatedKey)).toMatchObject({ offset: sizes.rotated, done: true });
    expect(entries.get(liveKey)).toMatchObject({ offset: sizes.live, done: false });
    await h.source.shutdown();
    const h2 = await restart(dir, entries, 0);
    expect(h2.records).toEqual([]);
  });

  it('the split line acknowledged before a line of the rotated file: the rotated file waits for it; a restart in between re-sends that line, not the fragment', async () => {
    const { dir, h, rotatedKey, liveKey, sizes } = await firstRun();
    h.ack((r) => r.message !== 'line 29');
    const entries = h.source.entries();
    const line29 = Buffer.byteLength(lines(0, 29));
    expect(entries.get(rotatedKey)).toMatchObject({ offset: line29, done: false });
    expect(entries.get(liveKey)).toMatchObject({ offset: sizes.live, done: false });

    const h2 = await restart(dir, entries, 1);
    expect(h2.records.map((r) => r.message)).toEqual(['line 29']);
    h2.ack();
    expect(h2.source.entries().get(rotatedKey)).toMatchObject({ offset: sizes.rotated, done: true });

    // The first sidecar, had it gone on: the last acknowledgement completes the rotated file.
    h.ack();
    expect(h.source.entries().get(rotatedKey)).toMatchObject({ offset: sizes.rotated, done: true });
  });
});
