// The lossless invariant: no file's committed offset passes a line the
// shaping stage still holds, whatever the interleaving of streams and batches.
import { describe, expect, it } from 'vitest';
import { Batcher, type Batch } from '../delivery/batcher.ts';
import { FileProgress } from '../records/progress.ts';
import type { LogRecord, Stream } from '../records/record.ts';
import { Shaper } from '../shape/shaper.ts';
import { newStats } from '../stats.ts';
import { makeMeta } from '../../test/support/sidecar-helpers.ts';
import { shaping } from './shape-helpers.ts';

/** A small deterministic generator, so a failure is reproducible from its seed. */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

interface Run {
  committed: () => number;
  held: () => number;
  lastSafe: number;
  out: LogRecord[];
}

/**
 * Lines of two streams, each line's message naming its offset (`@<offset> ...`)
 * so that a joined record tells which lines it holds. Batches of at most
 * `maxRecords`, acknowledged in order as soon as they are made (the fastest a
 * checkpoint can move), or in a random order.
 */
async function drive(seed: number, maxRecords: number, ackOrder: 'in-order' | 'random'): Promise<Run> {
  const rand = rng(seed);
  const meta = { ...makeMeta(), progress: new FileProgress<LogRecord>(0) };
  const out: LogRecord[] = [];
  const sentOffsets = new Set<number>();
  const allOffsets: number[] = [];
  const pending: Batch[] = [];
  const batcher = new Batcher({ maxBytes: 1 << 30, maxRecords, maxWaitMs: 1 << 30 }, (b) => pending.push(b));
  const shaper = new Shaper(shaping({ MULTILINE: 'python,java' }), newStats(), async (records) => {
    for (const r of records) {
      out.push(r);
      for (const line of r.message.split('\n')) sentOffsets.add(Number(/@(\d+)/.exec(line)?.[1] ?? NaN));
      batcher.add(r);
    }
  });
  let offset = 0;
  let lastSafe = 0;
  const line = (stream: Stream, text: string): LogRecord => {
    const message = text.replace('@', `@${offset}`);
    const size = message.length + 40;
    const r: LogRecord = { file: meta, offset, ts: '2024-05-06T07:08:09Z', stream, message, size, safe: offset + size, flags: 0 };
    allOffsets.push(offset);
    offset += size;
    lastSafe = r.safe;
    return r;
  };
  // Every line holds its marker, so every line can be traced.
  const event = (): string[] => {
    const frames = 1 + Math.floor(rand() * 4);
    if (rand() < 0.5) return ['Traceback (most recent call last): @', ...Array.from({ length: frames }, () => '  @ frame'), 'Error: x @'];
    return ['a.BoomException: x @', ...Array.from({ length: frames }, () => '\tat @ frame')];
  };
  const held = (): number => {
    let min = Infinity;
    for (const o of allOffsets) if (!sentOffsets.has(o) && o < min) min = o;
    return min;
  };
  const settle = (): void => {
    while (pending.length > 0) {
      const i = ackOrder === 'random' ? Math.floor(rand() * pending.length) : 0;
      const [b] = pending.splice(i, 1);
      for (const t of b!.tickets) t.progress.settle(t);
      if (meta.progress.committed > held()) throw new Error(`seed ${seed}: committed ${meta.progress.committed} passed the held line at ${held()}`);
    }
  };
  const queues: Record<'stdout' | 'stderr', string[]> = { stdout: [], stderr: [] };
  for (let step = 0; step < 300; step++) {
    const stream: 'stdout' | 'stderr' = rand() < 0.5 ? 'stdout' : 'stderr';
    const q = queues[stream];
    if (q.length === 0) q.push(...(rand() < 0.3 ? event() : ['@ plain']));
    const n = 1 + Math.floor(rand() * 3);
    const batch = q.splice(0, n).map((t) => line(stream, t));
    await shaper.push(batch);
    if (rand() < 0.5) batcher.flush();
    if (rand() < 0.7) settle();
  }
  await shaper.endFile(meta);
  batcher.flush();
  settle();
  return { committed: () => meta.progress.committed, held, lastSafe, out };
}

describe('shaping keeps the checkpoint behind held lines', () => {
  for (const [maxRecords, order] of [
    [1, 'in-order'],
    [2, 'in-order'],
    [3, 'random'],
    [50, 'random'],
  ] as const) {
    it(`interleaved streams, batches of ${maxRecords}, acknowledged ${order}`, async () => {
      for (let seed = 1; seed <= 40; seed++) {
        const r = await drive(seed * 7919 + maxRecords, maxRecords, order);
        // Nothing held at the end, and the file's checkpoint reaches its end: the source can call it done.
        expect(r.held()).toBe(Infinity);
        expect(r.committed()).toBe(r.lastSafe);
      }
    });
  }

  it('a line of the other stream is capped at the open event, and what was capped is carried by a later record', async () => {
    const meta = { ...makeMeta(), progress: new FileProgress<LogRecord>(0) };
    const out: LogRecord[] = [];
    const shaper = new Shaper(shaping({ MULTILINE: 'python' }), newStats(), async (rs) => {
      out.push(...rs);
    });
    const r = (offset: number, stream: Stream, message: string): LogRecord => ({ file: meta, offset, ts: 't', stream, message, size: 100, safe: offset + 100, flags: 0 });
    await shaper.push([r(0, 'stderr', 'Traceback (most recent call last):'), r(100, 'stdout', 'progress'), r(200, 'stderr', '  File "a.py"')]);
    expect(out.map((x) => [x.message, x.safe])).toEqual([['progress', 0]]);
    await shaper.push([r(300, 'stderr', 'E: x'), r(400, 'stdout', 'next')]);
    // The traceback is still open (a chained exception may follow): "next" still may not pass it.
    expect(out.map((x) => x.safe)).toEqual([0, 0]);
    await shaper.push([r(500, 'stderr', 'after')]);
    expect(out.map((x) => [x.offset, x.safe])).toEqual([
      [100, 0],
      [400, 0],
      [0, 500],
      [500, 600],
    ]);
  });
});
