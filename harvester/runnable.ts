// The one shape of everything the harvester keeps running, after
// controller-runtime's manager.Runnable: the leader election, the work queue
// and the watches each run until their signal is aborted, stop what they
// started, and only then resolve. Whoever starts them awaits that promise, so
// a shutdown is over when the promise settles, not when a timer guesses it is.

export interface Runnable {
  /**
   * Runs until `signal` is aborted, then stops and resolves once nothing it
   * started is left running. Rejects only on a failure that must end the
   * program.
   */
  run(signal: AbortSignal): Promise<void>;
}

/** Resolves once the signal is aborted (at once if it is already). */
export function untilAborted(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
}

/**
 * Runs them side by side until `signal` is aborted, as controller-runtime's
 * manager does: the first that fails aborts the others, and its error is
 * thrown once every one of them has returned, so nothing is left running
 * behind the failure. One that returns early without failing ends nothing.
 */
export async function runAll(runnables: readonly Runnable[], signal: AbortSignal): Promise<void> {
  const all = new AbortController();
  const forward = (): void => all.abort(signal.reason);
  if (signal.aborted) forward();
  else signal.addEventListener('abort', forward, { once: true });
  let failure: { error: unknown } | undefined;
  try {
    await Promise.all(
      runnables.map(async (r) => {
        try {
          await r.run(all.signal);
        } catch (error) {
          failure ??= { error };
          all.abort(error);
        }
      }),
    );
  } finally {
    signal.removeEventListener('abort', forward);
  }
  if (failure) throw failure.error;
}
