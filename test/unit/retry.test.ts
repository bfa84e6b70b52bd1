import { describe, expect, it } from 'vitest';
import { retryUntil } from '../../src/k8s/retry.ts';

const forbidden = () => Object.assign(new Error('secrets is forbidden'), { code: 403 });

describe('retryUntil (start-up steps that may fail for a while on a fresh install)', () => {
  it('tries again after a failure, and returns the first success', async () => {
    let calls = 0;
    const seen: number[] = [];
    const v = await retryUntil(
      async () => {
        calls++;
        if (calls < 3) throw forbidden();
        return 'cert';
      },
      { deadlineMs: 10_000, baseMs: 1, maxMs: 2, onRetry: (_e, n) => seen.push(n) },
    );
    expect(v).toBe('cert');
    expect(calls).toBe(3);
    expect(seen).toEqual([0, 1]);
  });
  it('throws the last error once the deadline would pass', async () => {
    let clock = 0;
    let calls = 0;
    const attempt = retryUntil(
      async () => {
        calls++;
        clock += 400;
        throw forbidden();
      },
      { deadlineMs: 1_000, baseMs: 1, maxMs: 1, onRetry: () => {}, now: () => clock },
    );
    await expect(attempt).rejects.toThrow(/forbidden/);
    expect(calls).toBe(3);
  });
});
