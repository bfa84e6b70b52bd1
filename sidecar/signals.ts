// The SIGTERM latch, installed by the entry point before the rest of the
// sidecar is even loaded. The kubelet starts the Job's containers as soon as
// the sidecar's container has started, and it may stop the pod at any moment
// after: a Job done within milliseconds, an active deadline, a deleted or
// suspended Job, an eviction. As PID 1 of its container the sidecar is not
// killed by a signal it has no handler for, but the kernel discards it, and
// the sidecar would then run until the grace period's SIGKILL instead of
// draining. The kubelet runs the sidecar's preStop hook before it signals,
// and the hook waits for the marker written once this latch is in
// (started.ts), so no SIGTERM comes before it. This module imports nothing,
// so that the latch, and with it the hook's return and the pod's end, come
// as soon as Node has booted; whoever starts the pipeline later reads what
// arrived in the meantime.

let first: NodeJS.Signals | undefined;
let at: number | undefined;
let listener: ((signal: NodeJS.Signals) => void) | undefined;
let wake: (() => void) | undefined;

function onSignal(signal: NodeJS.Signals): void {
  // The kubelet kills at the end of the grace period anyway; a second signal changes nothing.
  if (first !== undefined) return;
  first = signal;
  at = performance.now();
  wake?.();
  listener?.(signal);
}

/**
 * Resolves after `ms`, or at once when a SIGTERM or SIGINT has come or comes
 * meanwhile: a signal ends the wait, since a drain must not wait for it.
 */
export function pauseUnlessSignalled(ms: number): Promise<void> {
  if (first !== undefined || ms <= 0) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      wake = undefined;
      resolve();
    }
    wake = done;
  });
}

/** Installs the handlers; returns how long after the process's start that was, in ms. */
export function catchSignals(): number {
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  return performance.now();
}

/**
 * Calls `cb` once, with the first SIGTERM or SIGINT: at once if one already
 * arrived. `atMs` is when it arrived, in ms since the process started.
 */
export function whenSignalled(cb: (signal: NodeJS.Signals, atMs: number) => void): void {
  listener = (signal) => cb(signal, at!);
  if (first !== undefined) listener(first);
}
