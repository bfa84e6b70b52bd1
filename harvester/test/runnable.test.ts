import { describe, expect, it } from 'vitest';
import { PodWatches } from '../pod-watches.ts';
import { WorkQueue } from '../queue.ts';
import { runAll, untilAborted, type Runnable } from '../runnable.ts';

/** A runnable that runs until aborted, then takes `stopMs` to stop. */
function service(events: string[], name: string, stopMs = 0): Runnable {
  return {
    async run(signal) {
      events.push(`${name} started`);
      await untilAborted(signal);
      events.push(`${name} stopping`);
      await new Promise((r) => setTimeout(r, stopMs));
      events.push(`${name} stopped`);
    },
  };
}

const settled = async (p: Promise<unknown>): Promise<boolean> => {
  let done = false;
  void p.then(
    () => (done = true),
    () => (done = true),
  );
  await new Promise((r) => setTimeout(r, 20));
  return done;
};

describe('runAll', () => {
  it('stays pending while its runnables run, and resolves once every one has stopped after the abort', async () => {
    const events: string[] = [];
    const stop = new AbortController();
    const all = runAll([service(events, 'a', 30), service(events, 'b')], stop.signal);
    expect(await settled(all)).toBe(false);
    expect(events).toEqual(['a started', 'b started']);
    stop.abort();
    await all;
    expect(events).toContain('a stopped');
    expect(events).toContain('b stopped');
    // The slow one's stop was waited for: it is the last thing that happened.
    expect(events.at(-1)).toBe('a stopped');
  });

  it('a failure aborts the others and is thrown once they have returned', async () => {
    const events: string[] = [];
    const boom = new Error('watch broke');
    const failing: Runnable = {
      async run() {
        await new Promise((r) => setTimeout(r, 10));
        throw boom;
      },
    };
    const stop = new AbortController();
    const all = runAll([service(events, 'queue', 30), failing], stop.signal);
    await expect(all).rejects.toBe(boom);
    expect(events).toEqual(['queue started', 'queue stopping', 'queue stopped']);
    expect(stop.signal.aborted).toBe(false);
  });

  it('a runnable that returns early without failing ends nothing', async () => {
    const events: string[] = [];
    const stop = new AbortController();
    const all = runAll([{ run: async () => void events.push('once done') }, service(events, 'b')], stop.signal);
    expect(await settled(all)).toBe(false);
    expect(events).toEqual(['once done', 'b started']);
    stop.abort();
    await all;
    expect(events.at(-1)).toBe('b stopped');
  });

  it('with its signal aborted already, each runnable stops as soon as it starts', async () => {
    const events: string[] = [];
    const stop = new AbortController();
    stop.abort();
    await runAll([service(events, 'a')], stop.signal);
    expect(events).toEqual(['a started', 'a stopping', 'a stopped']);
  });
});

describe('the work queue as a runnable', () => {
  it('works until its signal is aborted, then aborts the running reconciles and returns once they have', async () => {
    const started: string[] = [];
    let aborted = false;
    let returned = false;
    const q = new WorkQueue<string>(
      async (key, signal) => {
        started.push(key);
        await untilAborted(signal);
        aborted = true;
        await new Promise((r) => setTimeout(r, 20));
        returned = true;
        return { kind: 'done' };
      },
      { concurrency: 2 },
    );
    const stop = new AbortController();
    const running = q.run(stop.signal);
    q.add('ns/a');
    await new Promise((r) => setTimeout(r, 10));
    expect(started).toEqual(['ns/a']);
    expect(await settled(running)).toBe(false);
    stop.abort();
    await running;
    expect(aborted).toBe(true);
    expect(returned).toBe(true);
    // Shut down: it takes no more keys.
    q.add('ns/b');
    await new Promise((r) => setTimeout(r, 10));
    expect(started).toEqual(['ns/a']);
  });
});

describe('the pod watches as a runnable', () => {
  it('stop every namespace watch when the signal is aborted', async () => {
    const stopped: string[] = [];
    const w = new PodWatches({
      open: (ns) => ({ stop: () => stopped.push(ns) }),
      cares: () => true,
      verify: () => 'digest',
    });
    const stop = new AbortController();
    const running = w.run(stop.signal);
    w.observe({ metadata: { namespace: 'a', uid: 'u1' } });
    w.observe({ metadata: { namespace: 'b', uid: 'u2' } });
    expect(w.size).toBe(2);
    expect(await settled(running)).toBe(false);
    stop.abort();
    await running;
    expect(stopped.sort()).toEqual(['a', 'b']);
    expect(w.size).toBe(0);
  });
});
