import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { DEFAULT_BACKOFF, isRetryableStatus, parseRetryAfter, retryDelay } from '../delivery/backoff.ts';
import { classify } from '../sinks/http/result.ts';

const res = (status: number, headers: Record<string, string> = {}, body = '') => ({ status, headers, body: Buffer.from(body) });

describe('retry classification', () => {
  it('retries 408, 429 and 5xx except 501', () => {
    const retryable = [408, 429, 500, 502, 503, 504, 599];
    const permanent = [400, 401, 403, 404, 409, 413, 422, 501];
    expect(retryable.every(isRetryableStatus)).toBe(true);
    expect(permanent.some(isRetryableStatus)).toBe(false);
  });

  it('maps HTTP answers onto ok / retry / split / fail', () => {
    expect(classify(res(200))).toEqual({ kind: 'ok' });
    expect(classify(res(204))).toEqual({ kind: 'ok' });
    expect(classify(res(413, {}, 'too big')).kind).toBe('split');
    expect(classify(res(429, { 'retry-after': '7' }))).toMatchObject({ kind: 'retry', afterMs: 7000, status: 429 });
    expect(classify(res(503))).toMatchObject({ kind: 'retry', afterMs: undefined });
    expect(classify(res(400, {}, '{"error":"bad"}'))).toEqual({ kind: 'fail', status: 400, reason: 'HTTP 400: {"error":"bad"}' });
    expect(classify(res(501)).kind).toBe('fail');
  });

  it('reads Retry-After as seconds or as an HTTP date', () => {
    const now = Date.parse('2024-01-01T00:00:00Z');
    expect(parseRetryAfter('3', now)).toBe(3000);
    expect(parseRetryAfter('Mon, 01 Jan 2024 00:00:10 GMT', now)).toBe(10_000);
    expect(parseRetryAfter('Sun, 31 Dec 2023 00:00:00 GMT', now)).toBe(0);
    expect(parseRetryAfter('soon', now)).toBeUndefined();
    expect(parseRetryAfter(undefined, now)).toBeUndefined();
  });
});

describe('retryDelay', () => {
  it('grows exponentially with jitter inside [step/2, step] up to the cap', () => {
    for (const attempt of [1, 2, 3, 8, 40]) {
      const step = Math.min(DEFAULT_BACKOFF.maxMs, DEFAULT_BACKOFF.baseMs * 2 ** (attempt - 1));
      expect(retryDelay(attempt, undefined, DEFAULT_BACKOFF, () => 0)).toBe(step / 2);
      expect(retryDelay(attempt, undefined, DEFAULT_BACKOFF, () => 0.999999)).toBeLessThanOrEqual(step);
    }
    expect(retryDelay(40, undefined, DEFAULT_BACKOFF, () => 0.5)).toBeLessThanOrEqual(DEFAULT_BACKOFF.maxMs);
  });

  it('never waits less than Retry-After, and caps absurd values', () => {
    expect(retryDelay(1, 5000, DEFAULT_BACKOFF, () => 0)).toBe(5000);
    expect(retryDelay(1, 5000, DEFAULT_BACKOFF, () => 0.99)).toBeGreaterThanOrEqual(5000);
    expect(retryDelay(1, 5000, DEFAULT_BACKOFF, () => 0.99)).toBeLessThan(5600);
    expect(retryDelay(1, 10 * 3600_000, DEFAULT_BACKOFF, () => 0)).toBe(DEFAULT_BACKOFF.maxRetryAfterMs);
  });

  // Back-off waits are node's timer promise with the deadline's signal: the
  // drain relies on an abort cutting them short and carrying its reason.
  it('a back-off wait is cut short by an abort', async () => {
    const ac = new AbortController();
    const started = Date.now();
    const p = sleep(10_000, undefined, { signal: ac.signal });
    setTimeout(() => ac.abort(new Error('deadline')), 20);
    await expect(p).rejects.toMatchObject({ name: 'AbortError', cause: new Error('deadline') });
    expect(Date.now() - started).toBeLessThan(2000);
  });
});
