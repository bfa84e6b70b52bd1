import { afterEach, describe, expect, it, vi } from 'vitest';
import { FileProgress } from '../records/progress.ts';
import { Batcher, RECORD_OVERHEAD_BYTES, type Batch } from '../delivery/batcher.ts';
import { makeMeta, makeRecord } from '../../test/support/sidecar-helpers.ts';

afterEach(() => {
  vi.useRealTimers();
});

describe('Batcher', () => {
  it('seals by record count', () => {
    const out: Batch[] = [];
    const b = new Batcher({ maxBytes: 1e9, maxRecords: 3, maxWaitMs: 60_000 }, (x) => out.push(x));
    for (let i = 0; i < 7; i++) b.add(makeRecord(`m${i}`, { offset: i, safe: i + 1 }));
    expect(out.map((x) => x.records.map((r) => r.message))).toEqual([
      ['m0', 'm1', 'm2'],
      ['m3', 'm4', 'm5'],
    ]);
    b.flush();
    expect(out).toHaveLength(3);
    expect(out[2]!.records.map((r) => r.message)).toEqual(['m6']);
  });

  it('hands on arrays that hold exactly the batch, however the batch sizes change', () => {
    const out: Batch[] = [];
    const b = new Batcher({ maxBytes: 1e9, maxRecords: 4, maxWaitMs: 60_000 }, (x) => out.push(x));
    const sizes = [4, 1, 3, 4, 2, 4];
    let n = 0;
    for (const size of sizes) {
      for (let i = 0; i < size; i++) b.add(makeRecord(`m${n++}`));
      if (size < 4) b.flush();
      expect(b.pending).toBe(0);
    }
    expect(out.map((x) => x.records.length)).toEqual(sizes);
    expect(out.flatMap((x) => x.records.map((r) => r.message))).toEqual(Array.from({ length: n }, (_, i) => `m${i}`));
    // No holes: every index up to the length holds a record.
    for (const x of out) expect(x.records.every((r, i) => i in x.records && r !== undefined)).toBe(true);
  });

  it('seals by estimated bytes', () => {
    const out: Batch[] = [];
    const msg = 'x'.repeat(1000);
    const b = new Batcher({ maxBytes: 2 * (1000 + RECORD_OVERHEAD_BYTES), maxRecords: 1000, maxWaitMs: 60_000 }, (x) => out.push(x));
    for (let i = 0; i < 5; i++) b.add(makeRecord(msg));
    expect(out.map((x) => x.records.length)).toEqual([2, 2]);
    b.flush();
  });

  it('seals a non-empty batch after maxWaitMs, and never an empty one', () => {
    vi.useFakeTimers();
    const out: Batch[] = [];
    const b = new Batcher({ maxBytes: 1e9, maxRecords: 1000, maxWaitMs: 500 }, (x) => out.push(x));
    vi.advanceTimersByTime(2000);
    expect(out).toHaveLength(0);
    b.add(makeRecord('a'));
    vi.advanceTimersByTime(499);
    expect(out).toHaveLength(0);
    vi.advanceTimersByTime(1);
    expect(out).toHaveLength(1);
  });

  it('opens one ticket per file per batch, ending at the last safe offset', () => {
    const out: Batch[] = [];
    const f1 = makeMeta('a');
    const f2 = makeMeta('b');
    const b = new Batcher({ maxBytes: 1e9, maxRecords: 4, maxWaitMs: 60_000 }, (x) => out.push(x));
    b.add(makeRecord('1', { file: f1, safe: 10 }));
    b.add(makeRecord('2', { file: f2, safe: 5 }));
    b.add(makeRecord('3', { file: f1, safe: 20 }));
    b.add(makeRecord('4', { file: f2, safe: 9 }));
    expect(out[0]!.tickets.map((t) => [t.progress === f1.progress ? 'a' : 'b', t.end])).toEqual([
      ['a', 20],
      ['b', 9],
    ]);
  });
});

describe('FileProgress', () => {
  it('commits only the contiguous prefix of settled tickets', () => {
    const moves: number[] = [];
    const p = new FileProgress(0, (x) => moves.push(x.committed));
    const t1 = p.open(100);
    const t2 = p.open(200);
    const t3 = p.open(300);
    p.settle(t2);
    expect(p.committed).toBe(0);
    p.settle(t3);
    expect(p.committed).toBe(0);
    p.settle(t1);
    expect(p.committed).toBe(300);
    expect(moves).toEqual([300]);
    expect(p.outstanding).toBe(0);
  });

  it('never moves backwards', () => {
    const p = new FileProgress(500);
    const t = p.open(100);
    p.settle(t);
    expect(p.committed).toBe(500);
  });
});
