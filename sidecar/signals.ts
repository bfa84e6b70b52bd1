// The SIGTERM latch, installed by the entry point before the rest of the
// sidecar is even loaded. Without a postStart handshake the kubelet may start
// the Job's containers while the sidecar is still booting, and a Job done
// within milliseconds gets the sidecar a SIGTERM soon after. As PID 1 of its
// container the sidecar is not killed by a signal it has no handler for, but
// the kernel discards it, and the sidecar would then run until the grace
// period's SIGKILL instead of draining. So this module imports nothing: the
// handler is in place as soon as Node has booted, and whoever starts the
// pipeline later reads what arrived in the meantime.

let first: NodeJS.Signals | undefined;
let at: number | undefined;
let listener: ((signal: NodeJS.Signals) => void) | undefined;

function onSignal(signal: NodeJS.Signals): void {
  // The kubelet kills at the end of the grace period anyway; a second signal changes nothing.
  if (first !== undefined) return;
  first = signal;
  at = performance.now();
  listener?.(signal);
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
