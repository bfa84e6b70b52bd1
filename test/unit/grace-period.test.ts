/**
 * The grace period of an injected Job (issue 25): one the template chose below
 * the drain budget is kept, with a warning; an unset one (or the API server's
 * default, 30) is raised to drainSeconds + 5; raiseGracePeriod: true raises
 * every one, as before. Through the webhook's own path: /mutate and its patch.
 */
import { describe, expect, it } from 'vitest';
import { build } from '../../src/http/app.ts';
import { applyPatch } from '../../src/core/patch.ts';
import { parseConfig, type Config } from '../../src/core/config.ts';
import type { Job } from '../../src/core/kube.ts';
import { decodePatch, deps, durableConfig, job, review } from '../support/fixtures.ts';

function withGrace(seconds: number | undefined, drain?: number): Record<string, any> {
  const j = job('graceful');
  if (seconds !== undefined) j.spec.template.spec.terminationGracePeriodSeconds = seconds;
  if (drain !== undefined) j.metadata.annotations = { 'jobharvest.io/drain-seconds': String(drain) };
  return j;
}

async function mutate(input: Record<string, any>, config: Config): Promise<{ grace: unknown; status: Record<string, unknown>; warnings: string[] }> {
  const app = build({ deps: deps({ config }) });
  const res = await app.inject({ method: 'POST', url: '/mutate', payload: review(input) });
  const response = res.json().response as { allowed: boolean; patch?: string; warnings?: string[] };
  expect(response.allowed).toBe(true);
  const out = applyPatch(input as Job, decodePatch(response)) as Record<string, any>;
  return {
    grace: out.spec.template.spec.terminationGracePeriodSeconds,
    status: JSON.parse(out.metadata.annotations['jobharvest.io/status']) as Record<string, unknown>,
    warnings: response.warnings ?? [],
  };
}

describe('terminationGracePeriodSeconds', () => {
  it('keeps a grace period the template chose below the drain budget, and warns that the drain is shortened', async () => {
    const r = await mutate(withGrace(1), durableConfig());
    expect(r.grace).toBe(1);
    expect(r.status.terminationGracePeriodSeconds).toBeNull();
    const w = r.warnings.filter((x) => x.includes('terminationGracePeriodSeconds'));
    expect(w).toHaveLength(1);
    expect(w[0]).toMatch(/^jobharvest: terminationGracePeriodSeconds 1 is kept, below the drain budget \(25 s \+ 5\): .*sidecar drains only that long, and what it leaves unsent is lost \(raiseGracePeriod: true raises it\)$/);
    expect(w[0]!.length).toBeLessThanOrEqual(240);
    expect(w[0]!.endsWith('…'), 'the warning is not cut short').toBe(false);
  });

  it('keeps a chosen one above 30 but below a longer drain budget too', async () => {
    const r = await mutate(withGrace(45, 60), durableConfig());
    expect({ grace: r.grace, set: r.status.terminationGracePeriodSeconds }).toEqual({ grace: 45, set: null });
    expect(r.warnings.some((x) => x.includes('terminationGracePeriodSeconds 45 is kept'))).toBe(true);
  });

  it('raises an unset one, or the API server\'s default 30, to drainSeconds + 5 when that is more, without a warning', async () => {
    for (const seconds of [undefined, 30]) {
      const r = await mutate(withGrace(seconds, 60), durableConfig());
      expect({ seconds, grace: r.grace, set: r.status.terminationGracePeriodSeconds }).toEqual({ seconds, grace: 65, set: 65 });
      expect(r.warnings.filter((x) => x.includes('terminationGracePeriodSeconds'))).toEqual([]);
    }
    // The default drain budget (25) fits in the default 30: nothing to change.
    const d = await mutate(withGrace(undefined), durableConfig());
    expect({ grace: d.grace, set: d.status.terminationGracePeriodSeconds }).toEqual({ grace: undefined, set: null });
  });

  it('leaves one at or above the drain budget alone, without a warning', async () => {
    for (const seconds of [30, 31, 600]) {
      const r = await mutate(withGrace(seconds), durableConfig());
      expect({ seconds, grace: r.grace, set: r.status.terminationGracePeriodSeconds }).toEqual({ seconds, grace: seconds, set: null });
      expect(r.warnings.filter((x) => x.includes('terminationGracePeriodSeconds'))).toEqual([]);
    }
  });

  it('raiseGracePeriod: true raises a chosen one too, as before, without a warning', async () => {
    const config = durableConfig({ raiseGracePeriod: true });
    const r = await mutate(withGrace(1), config);
    expect({ grace: r.grace, set: r.status.terminationGracePeriodSeconds }).toEqual({ grace: 30, set: 30 });
    expect(r.warnings.filter((x) => x.includes('terminationGracePeriodSeconds'))).toEqual([]);
  });

  it('raiseGracePeriod defaults to false and takes only a boolean', () => {
    expect(parseConfig({}).raiseGracePeriod).toBe(false);
    expect(() => parseConfig({ raiseGracePeriod: 'yes' })).toThrow(/raiseGracePeriod/);
  });
});
