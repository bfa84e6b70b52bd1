import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { WorkQueue, type ReconcileResult } from '../queue.ts';

const done: ReconcileResult = { kind: 'done' };

/** A promise and the function that settles it, for reconciles the test lets finish. */
function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((r) => (open = r));
  return { promise, open };
}

/** Lets every pending promise callback run. */
const flush = () => new Promise<void>((r) => setImmediate(r));

describe('work queue', () => {
  it('queues a key once however often it is added while waiting', async () => {
    const calls: string[] = [];
    const q = new WorkQueue(async (k) => (calls.push(k), done), { concurrency: 2 });
    q.add('a');
    q.add('b');
    q.add('a');
    q.add('a');
    expect(q.length).toBe(2);
    q.start();
    await q.idle();
    expect(calls).toEqual(['a', 'b']);
    await q.shutdown();
  });

  it('runs a key that changed while it ran once more after that run, never beside it', async () => {
    const g = gate();
    let runs = 0;
    let inFlight = 0;
    let overlap = false;
    const q = new WorkQueue(
      async () => {
        runs++;
        if (++inFlight > 1) overlap = true;
        if (runs === 1) await g.promise;
        inFlight--;
        return done;
      },
      { concurrency: 4 },
    );
    q.start();
    q.add('job');
    await flush();
    expect(q.running).toBe(1);
    q.add('job');
    q.add('job');
    q.add('job');
    // Marked for another run, not waiting beside the running one.
    expect(q.length).toBe(0);
    expect(q.running).toBe(1);
    g.open();
    await q.idle();
    expect(runs).toBe(2);
    expect(overlap).toBe(false);
    expect(q.peakRunning).toBe(1);
    await q.shutdown();
  });

  it('a reconcile that adds its own key gets one more run, after this one', async () => {
    let runs = 0;
    let inFlight = 0;
    let overlap = false;
    const q = new WorkQueue(
      async (k) => {
        if (++inFlight > 1) overlap = true;
        if (++runs === 1) q.add(k);
        await flush();
        inFlight--;
        return done;
      },
      { concurrency: 2 },
    );
    q.start();
    q.add('job');
    await q.idle();
    expect(runs).toBe(2);
    expect(overlap).toBe(false);
    await q.shutdown();
  });

  it('runs no more than `concurrency` reconciles at once, and reaches it with many keys', async () => {
    let now = 0;
    let max = 0;
    const q = new WorkQueue(
      async () => {
        max = Math.max(max, ++now);
        await flush();
        now--;
        return done;
      },
      { concurrency: 3 },
    );
    for (let i = 0; i < 50; i++) q.add(`k${i}`);
    q.start();
    expect(q.running).toBe(3);
    await q.idle();
    expect(max).toBe(3);
    expect(q.peakRunning).toBe(3);
    expect(q.length).toBe(0);
    await q.shutdown();
  });

  it('takes a delayed key now when it is added, and runs it only once', async () => {
    const calls: string[] = [];
    const q = new WorkQueue(async (k) => (calls.push(k), done), { concurrency: 1 });
    q.start();
    q.addAfter('a', 30);
    q.add('a');
    await q.idle();
    expect(calls).toEqual(['a']);
    await new Promise((r) => setTimeout(r, 60));
    expect(calls).toEqual(['a']);
    await q.shutdown();
  });

  it('rejects a concurrency below 1', () => {
    expect(() => new WorkQueue(async () => done, { concurrency: 0 })).toThrow(/concurrency/);
  });
});

describe('work queue timing', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('backs a failing key off exponentially up to the cap, and starts over after it succeeds', async () => {
    const at: number[] = [];
    let fail = 6;
    const q = new WorkQueue(
      async () => {
        at.push(Date.now());
        if (fail-- > 0) throw new Error('log server down');
        return done;
      },
      { concurrency: 1, baseDelayMs: 100, maxDelayMs: 1000, jitter: 0, now: () => Date.now() },
    );
    const t0 = Date.now();
    q.start();
    q.add('job');
    await vi.advanceTimersByTimeAsync(10_000);
    expect(at.map((t, i) => t - (at[i - 1] ?? t0))).toEqual([0, 100, 200, 400, 800, 1000, 1000]);

    // Succeeded: the next failure waits the base delay again.
    at.length = 0;
    fail = 1;
    const t1 = Date.now();
    q.add('job');
    await vi.advanceTimersByTimeAsync(10_000);
    expect(at.map((t) => t - t1)).toEqual([0, 100]);
    await q.shutdown();
  });

  it('keeps each key its own failure count', async () => {
    const at: Record<string, number[]> = { a: [], b: [] };
    const q = new WorkQueue(
      async (k: 'a' | 'b') => {
        at[k]!.push(Date.now());
        if (k === 'a' || at.b!.length === 1) throw new Error('boom');
        return done;
      },
      { concurrency: 2, baseDelayMs: 10, maxDelayMs: 10_000, jitter: 0, now: () => Date.now() },
    );
    q.start();
    q.add('a');
    await vi.advanceTimersByTimeAsync(75);
    q.add('b');
    await vi.advanceTimersByTimeAsync(1000);
    const b = at.b!;
    expect(b).toHaveLength(2);
    expect(b[1]! - b[0]!).toBe(10);
    await q.shutdown();
  });

  it('jitter only shortens a delay, so the cap holds', async () => {
    const at: number[] = [];
    const q = new WorkQueue(
      async () => {
        at.push(Date.now());
        throw new Error('down');
      },
      { concurrency: 1, baseDelayMs: 100, maxDelayMs: 400, jitter: 0.5, random: () => 1, now: () => Date.now() },
    );
    q.start();
    q.add('job');
    await vi.advanceTimersByTimeAsync(1000);
    expect(at.slice(0, 5).map((t, i) => t - (at[i - 1] ?? t))).toEqual([0, 50, 100, 200, 200]);
    await q.shutdown();
  });

  it('runs a key again after the delay a reconcile asks for, and that resets its failures', async () => {
    const at: number[] = [];
    const results: (ReconcileResult | Error)[] = [new Error('x'), new Error('x'), { kind: 'requeue', afterMs: 5000 }, new Error('x'), done];
    const q = new WorkQueue(
      async () => {
        at.push(Date.now());
        const r = results.shift() ?? done;
        if (r instanceof Error) throw r;
        return r;
      },
      { concurrency: 1, baseDelayMs: 100, jitter: 0, now: () => Date.now() },
    );
    const t0 = Date.now();
    q.start();
    q.add('job');
    await vi.advanceTimersByTimeAsync(20_000);
    expect(at.map((t) => t - t0)).toEqual([0, 100, 300, 5300, 5400]);
    await q.shutdown();
  });

  it('keeps the earlier of two delays for one key', async () => {
    const at: number[] = [];
    const q = new WorkQueue(async () => (at.push(Date.now()), done), { concurrency: 1, now: () => Date.now() });
    const t0 = Date.now();
    q.start();
    q.addAfter('a', 500);
    q.addAfter('a', 200);
    q.addAfter('a', 900);
    await vi.advanceTimersByTimeAsync(2000);
    expect(at.map((t) => t - t0)).toEqual([200]);
    await q.shutdown();
  });

  it('does not count delayed keys as work for idle()', async () => {
    const q = new WorkQueue(async () => done, { concurrency: 1 });
    q.start();
    q.addAfter('later', 60_000);
    let idle = false;
    void q.idle().then(() => (idle = true));
    await vi.advanceTimersByTimeAsync(0);
    expect(idle).toBe(true);
    expect(q.length).toBe(0);
    await q.shutdown();
  });

  it('shutdown aborts the running reconciles, waits for them, and takes nothing more', async () => {
    const calls: string[] = [];
    let finished = 0;
    const q = new WorkQueue(
      async (k, signal) => {
        calls.push(k);
        await new Promise<void>((r) => signal.addEventListener('abort', () => r(), { once: true }));
        // Cleanup after the abort still takes a while; shutdown must wait for it.
        await new Promise((r) => setTimeout(r, 250));
        finished++;
        return done;
      },
      { concurrency: 2, now: () => Date.now() },
    );
    q.start();
    q.add('a');
    q.add('b');
    q.add('c');
    q.addAfter('d', 100);
    await vi.advanceTimersByTimeAsync(10);
    expect(q.running).toBe(2);
    let shut = false;
    const s = q.shutdown().then(() => (shut = true));
    await vi.advanceTimersByTimeAsync(200);
    expect(shut).toBe(false);
    await vi.advanceTimersByTimeAsync(100);
    await s;
    expect(finished).toBe(2);
    q.add('e');
    await vi.advanceTimersByTimeAsync(1000);
    expect(calls).toEqual(['a', 'b']);
    expect(q.running).toBe(0);
    await q.idle();
  });

  it('shuts down when its signal is aborted', async () => {
    const ac = new AbortController();
    let aborted = false;
    const q = new WorkQueue(
      (_k, signal) =>
        new Promise<ReconcileResult>((r) =>
          signal.addEventListener('abort', () => {
            aborted = true;
            r(done);
          }),
        ),
      { concurrency: 1, signal: ac.signal },
    );
    q.start();
    q.add('a');
    await vi.advanceTimersByTimeAsync(1);
    ac.abort();
    await vi.advanceTimersByTimeAsync(1);
    expect(aborted).toBe(true);
    await q.idle();
  });
});

describe('work queue properties', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  type Op = { kind: 'add'; key: string } | { kind: 'addAfter'; key: string; ms: number } | { kind: 'wait'; ms: number };
  const key = fc.constantFrom('a', 'b', 'c', 'd');
  const op: fc.Arbitrary<Op> = fc.oneof(
    fc.record({ kind: fc.constant('add' as const), key }),
    fc.record({ kind: fc.constant('addAfter' as const), key, ms: fc.integer({ min: 0, max: 50 }) }),
    fc.record({ kind: fc.constant('wait' as const), ms: fc.integer({ min: 0, max: 30 }) }),
  );
  const outcome = fc.oneof(fc.constant<'done'>('done'), fc.constant<'throw'>('throw'), fc.integer({ min: 0, max: 40 }));

  it('never runs one key twice at once, never exceeds the cap, and reconciles every key after its last add', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(op, { minLength: 1, maxLength: 40 }),
        fc.integer({ min: 1, max: 3 }),
        fc.array(fc.tuple(fc.integer({ min: 0, max: 20 }), outcome), { minLength: 1, maxLength: 20 }),
        async (ops, concurrency, script) => {
          const inFlight = new Map<string, number>();
          let running = 0;
          let violation = '';
          const lastAdd = new Map<string, number>();
          const lastStart = new Map<string, number>();
          let step = 0;
          let n = 0;
          const q = new WorkQueue(
            async (k) => {
              const [ms, out] = script[n++ % script.length]!;
              lastStart.set(k, ++step);
              inFlight.set(k, (inFlight.get(k) ?? 0) + 1);
              if (inFlight.get(k)! > 1) violation = `two runs of ${k}`;
              if (++running > concurrency) violation = `${running} running with a cap of ${concurrency}`;
              await new Promise((r) => setTimeout(r, ms));
              running--;
              inFlight.set(k, inFlight.get(k)! - 1);
              // Failures and requeues stop after a while so that the run ends.
              if (out === 'done' || n > 200) return done;
              if (out === 'throw') throw new Error('fails');
              return { kind: 'requeue', afterMs: out };
            },
            { concurrency, baseDelayMs: 1, maxDelayMs: 20, now: () => Date.now() },
          );
          q.start();
          for (const o of ops) {
            if (o.kind === 'wait') await vi.advanceTimersByTimeAsync(o.ms);
            else {
              lastAdd.set(o.key, ++step);
              if (o.kind === 'add') q.add(o.key);
              else q.addAfter(o.key, o.ms);
            }
          }
          // Failures and requeues come back until the script says done; give them time.
          await vi.advanceTimersByTimeAsync(30_000);
          await q.idle();
          expect(violation).toBe('');
          expect(q.peakRunning).toBeLessThanOrEqual(concurrency);
          for (const [k, added] of lastAdd) expect(lastStart.get(k) ?? 0).toBeGreaterThan(added);
          await q.shutdown();
        },
      ),
      { numRuns: 60 },
    );
  });
});
