import { describe, expect, it } from 'vitest';
import { TTL_FLOOR_SECONDS } from '../../src/core/inject.ts';
import { mutateJob } from '../../src/core/mutate.ts';
import type { Job } from '../../src/core/kube.ts';
import { durableConfig, job, optedIn } from '../../test/support/fixtures.ts';

function run(spec: Record<string, unknown>) {
  const j = job('short', {});
  j.spec = { ...j.spec, ...spec };
  return mutateJob(j as Job, { config: durableConfig(), namespace: optedIn('team-a'), serverVersion: { major: 1, minor: 34 }, assumeOptedIn: false });
}

describe('TTL floor', () => {
  it.each([0, 1, 2])('raises a Job TTL of %i to the floor, with a warning, and records it in the status', (ttl) => {
    const r = run({ ttlSecondsAfterFinished: ttl });
    expect(r.job.spec!.ttlSecondsAfterFinished).toBe(TTL_FLOOR_SECONDS);
    expect(r.warnings.join('\n')).toContain(`ttlSecondsAfterFinished ${ttl} is raised to ${TTL_FLOOR_SECONDS}`);
    expect(JSON.parse(r.job.metadata!.annotations!['jobharvest.io/status']!).ttlSecondsAfterFinished).toBe(TTL_FLOOR_SECONDS);
  });

  it('leaves a TTL at or above the floor alone', () => {
    const r = run({ ttlSecondsAfterFinished: TTL_FLOOR_SECONDS });
    expect(r.job.spec!.ttlSecondsAfterFinished).toBe(TTL_FLOOR_SECONDS);
    expect(r.warnings.join('\n')).not.toContain('is raised to');
    expect(JSON.parse(r.job.metadata!.annotations!['jobharvest.io/status']!).ttlSecondsAfterFinished).toBeNull();
  });
});
