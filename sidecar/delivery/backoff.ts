// Which answers are worth retrying, and how long to wait before the next try.

/** Network errors are retried elsewhere; this covers HTTP answers. */
export function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 429 || (status >= 500 && status <= 599 && status !== 501);
}

/** Retry-After is either delta-seconds or an HTTP date; returns milliseconds to wait. */
export function parseRetryAfter(value: string | readonly string[] | undefined, nowMs: number = Date.now()): number | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  if (typeof v !== 'string' || v.trim() === '') return undefined;
  const text = v.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  if (!Number.isFinite(at)) return undefined;
  return Math.max(0, at - nowMs);
}

export interface BackoffOptions {
  readonly baseMs: number;
  readonly maxMs: number;
  /** Longest Retry-After we obey; a server asking for an hour would stall the drain. */
  readonly maxRetryAfterMs: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { baseMs: 100, maxMs: 10_000, maxRetryAfterMs: 120_000 };

/**
 * "Equal jitter": half the exponential step fixed, half random, so retries of
 * many batches spread out but never collapse to zero. A Retry-After is a
 * floor: we wait that long plus a little jitter.
 */
export function retryDelay(attempt: number, retryAfterMs: number | undefined, opts: BackoffOptions = DEFAULT_BACKOFF, random: () => number = Math.random): number {
  if (retryAfterMs !== undefined) {
    const floor = Math.min(retryAfterMs, opts.maxRetryAfterMs);
    return floor + Math.floor(random() * Math.min(1000, Math.max(50, floor * 0.1)));
  }
  const step = Math.min(opts.maxMs, opts.baseMs * 2 ** Math.min(Math.max(0, attempt - 1), 30));
  return Math.floor(step / 2 + random() * (step / 2));
}
