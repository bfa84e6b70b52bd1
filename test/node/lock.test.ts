import { describe, expect, it, vi } from 'vitest';

async function lockWithCache(cache: string): Promise<string> {
  vi.resetModules();
  vi.stubEnv('JOBHARVEST_CACHE', cache);
  try {
    return (await import('../harness/node/node.ts')).NODE_LOCK;
  } finally {
    vi.unstubAllEnvs();
  }
}

describe('the real-node lock', () => {
  // Two runs with different caches (a cold CI checkout next to a warm one)
  // would start two nodes on the same /run/containerd, /var/log/containers,
  // cgroups and iptables if the lock lived in the cache.
  it('is one path for the whole machine, whatever JOBHARVEST_CACHE says', async () => {
    const cold = await lockWithCache('/tmp/jobharvest-cache-cold');
    const warm = await lockWithCache('/root/.cache/jobharvest');
    expect(cold).toBe(warm);
    expect(cold.startsWith('/run/lock/')).toBe(true);
  });
});
