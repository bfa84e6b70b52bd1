import { setTimeout as sleep } from 'node:timers/promises';
import { statusOf } from './errors.ts';

export interface ConflictRetry {
  /** Retries after the first attempt; the conflict after the last one is thrown. */
  retries: number;
  baseMs: number;
  maxMs: number;
  /** Called before each wait, e.g. to log that another writer won. */
  onConflict?: () => void;
}

/** Jittered exponential backoff: attempt 0 → ~base, doubling up to max. */
export function backoffMs(attempt: number, baseMs: number, maxMs: number): number {
  const exp = Math.min(maxMs, baseMs * 2 ** attempt);
  return exp / 2 + Math.random() * (exp / 2);
}

/**
 * Runs a read-modify-write against the API server again whenever it loses an
 * optimistic-concurrency race (409), after a jittered backoff so that replicas
 * racing for the same object do not collide again in lockstep. Every other
 * error is thrown at once.
 */
export async function retryOnConflict<T>(attempt: () => Promise<T>, opts: ConflictRetry): Promise<T> {
  for (let n = 0; ; n++) {
    try {
      return await attempt();
    } catch (err) {
      if (statusOf(err) !== 409 || n >= opts.retries) throw err;
      opts.onConflict?.();
      await sleep(backoffMs(n, opts.baseMs, opts.maxMs));
    }
  }
}

export interface StartupRetry {
  /** Give up (throw the last error) once this much time has passed. */
  deadlineMs: number;
  baseMs: number;
  maxMs: number;
  /** Called after each failed attempt that will be tried again. */
  onRetry: (err: unknown, attempt: number) => void;
  now?: () => number;
}

/**
 * A step the webhook cannot serve without (its first certificate) may fail for
 * a while on a fresh install for reasons that pass: the API server's RBAC cache
 * has not yet seen the Role the same install created (403), or the API server
 * is still starting. Try again with backoff until a deadline, then fail loudly
 * so that the kubelet restarts the pod.
 */
export async function retryUntil<T>(attempt: () => Promise<T>, opts: StartupRetry): Promise<T> {
  const now = opts.now ?? Date.now;
  const deadline = now() + opts.deadlineMs;
  for (let n = 0; ; n++) {
    try {
      return await attempt();
    } catch (err) {
      const wait = backoffMs(n, opts.baseMs, opts.maxMs);
      if (now() + wait > deadline) throw err;
      opts.onRetry(err, n);
      await sleep(wait);
    }
  }
}
