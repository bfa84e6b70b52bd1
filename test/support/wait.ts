export interface WaitOptions {
  timeoutMs?: number;
  intervalMs?: number;
  /** Returns a reason to give up at once, e.g. the process being waited for died. */
  abortIf?: () => string | undefined;
}

/**
 * Polls `probe` until it returns a value other than undefined. Errors thrown by
 * the probe count as "not yet" so a server that is still starting can refuse
 * connections; the last one is reported on timeout.
 */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined> | T | undefined,
  { timeoutMs = 60_000, intervalMs = 200, abortIf }: WaitOptions = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    const reason = abortIf?.();
    if (reason !== undefined) throw new Error(`gave up waiting for ${what}: ${reason}`);
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() >= deadline) {
      const detail = lastError instanceof Error ? `: last error: ${lastError.message}` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${detail}`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
