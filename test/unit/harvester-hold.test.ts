import type { V1Job } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { HOLD_ANNOTATION, HOLD_MARGIN_SECONDS, heldTtl, holdDeadline, holdOf, holdPatch, releasePatch } from '../../src/harvester/hold.ts';
import { DELIVERY_ANNOTATION } from '../../src/harvester/report.ts';

const job = (ttl: number | undefined, annotations: Record<string, string> = {}): V1Job => ({ metadata: { name: 'j', resourceVersion: '7', annotations }, spec: { template: {}, ...(ttl !== undefined ? { ttlSecondsAfterFinished: ttl } : {}) } });

describe('hold and release', () => {
  const finished = Date.parse('2026-01-01T00:00:00Z');
  it('raises the TTL to cover the maximum hold from now, records the original, and carries the resourceVersion read', () => {
    const now = finished + 2500;
    const r = holdPatch(job(3), finished, now, 600)!;
    expect(r.hold).toEqual({ originalTtl: 3, since: '2026-01-01T00:00:02.500Z', maxHoldSeconds: 600 });
    expect(r.patch).toEqual({
      metadata: { resourceVersion: '7', annotations: { [HOLD_ANNOTATION]: JSON.stringify(r.hold) } },
      spec: { ttlSecondsAfterFinished: 3 + 600 + HOLD_MARGIN_SECONDS },
    });
    // The raised TTL ends the hold by itself: deletion at since + maxHold + margin at the latest.
    expect(finished + heldTtl(finished, now, 600) * 1000).toBeGreaterThanOrEqual(now + 600_000);
    expect(finished + heldTtl(finished, now, 600) * 1000).toBeLessThanOrEqual(now + (600 + HOLD_MARGIN_SECONDS + 1) * 1000);
    expect(holdDeadline(r.hold)).toBe(now + 600_000);
  });

  it('never lowers a TTL that is longer already, and holds only once', () => {
    const r = holdPatch(job(100_000), finished, finished, 600)!;
    expect((r.patch as { spec: { ttlSecondsAfterFinished: number } }).spec.ttlSecondsAfterFinished).toBe(100_000);
    const held = job(700, { [HOLD_ANNOTATION]: JSON.stringify(r.hold) });
    expect(holdPatch(held, finished, finished, 600)).toBeUndefined();
    expect(holdOf(held)).toEqual(r.hold);
    expect(holdOf(job(1, { [HOLD_ANNOTATION]: 'not json' }))).toBeUndefined();
  });

  it('release: the original TTL back (null removes it), the hold annotation removed, the delivery written, in one patch', () => {
    const d = { sink: 'loki', pods: 1, shipped: 500, lost: 0, unaccounted: 0, harvested: 200 };
    expect(releasePatch(job(663), { originalTtl: 3, since: 'x', maxHoldSeconds: 600 }, d)).toEqual({
      metadata: { resourceVersion: '7', annotations: { [HOLD_ANNOTATION]: null, [DELIVERY_ANNOTATION]: JSON.stringify(d) } },
      spec: { ttlSecondsAfterFinished: 3 },
    });
    expect((releasePatch(job(663), { originalTtl: null, since: 'x', maxHoldSeconds: 600 }, d) as { spec: object }).spec).toEqual({ ttlSecondsAfterFinished: null });
  });
});
