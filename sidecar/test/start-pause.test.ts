// The entry point's pause between the latch and the pipeline's load
// (main.ts, START_PAUSE_MS): it leaves the CPU to the Job's containers as they
// start, and a signal must end it at once, since a drain never waits for it.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';

beforeEach(() => {
  vi.resetModules();
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
  process.removeAllListeners('SIGTERM');
  process.removeAllListeners('SIGINT');
});

async function signals() {
  const m = await import('../signals.ts');
  m.catchSignals();
  return m;
}

function tracked(p: Promise<void>): { done: () => boolean } {
  let done = false;
  void p.then(() => (done = true));
  return { done: () => done };
}

describe('the start pause', () => {
  it('lasts its time when no signal comes', async () => {
    const { pauseUnlessSignalled } = await signals();
    const pause = tracked(pauseUnlessSignalled(250));
    await vi.advanceTimersByTimeAsync(249);
    expect(pause.done()).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(pause.done()).toBe(true);
  });

  it.each(['SIGTERM', 'SIGINT'] as const)('ends at once on %s, and the signal still reaches the run', async (signal) => {
    const { pauseUnlessSignalled, whenSignalled } = await signals();
    const pause = tracked(pauseUnlessSignalled(250));
    await vi.advanceTimersByTimeAsync(10);
    process.emit(signal, signal);
    await vi.advanceTimersByTimeAsync(0);
    expect(pause.done()).toBe(true);
    const seen: string[] = [];
    whenSignalled((s) => seen.push(s));
    expect(seen).toEqual([signal]);
  });

  it('does not wait at all once a signal has come', async () => {
    const { pauseUnlessSignalled } = await signals();
    process.emit('SIGTERM', 'SIGTERM');
    const pause = tracked(pauseUnlessSignalled(250));
    await vi.advanceTimersByTimeAsync(0);
    expect(pause.done()).toBe(true);
  });
});
