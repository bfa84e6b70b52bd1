import type { V1Job } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { deliveryRecordOf, encodeDeliveryRecord, HOLD_ANNOTATION, HOLD_MARGIN_SECONDS, heldTtl, holdDeadline, holdOf, holdPatch, releasePatch } from '../hold.ts';
import { DELIVERY_ANNOTATION } from '../report.ts';

const KEY = Buffer.from('0123456789abcdef0123456789abcdef');
const OTHER = Buffer.from('fedcba9876543210fedcba9876543210');
const job = (ttl: number | undefined, annotations: Record<string, string> = {}, uid = 'job-uid-1'): V1Job => ({
  metadata: { name: 'j', uid, resourceVersion: '7', annotations },
  spec: { template: {}, ...(ttl !== undefined ? { ttlSecondsAfterFinished: ttl } : {}) },
});
const annotationsOf = (patch: object): Record<string, string | null> => (patch as { metadata: { annotations: Record<string, string | null> } }).metadata.annotations;

describe('hold and release', () => {
  const finished = Date.parse('2026-01-01T00:00:00Z');
  it('raises the TTL to cover the maximum hold from now, records the original (signed), and carries the resourceVersion read', () => {
    const now = finished + 2500;
    const r = holdPatch(job(3), KEY, finished, now, 600)!;
    expect(r.hold).toEqual({ originalTtl: 3, since: '2026-01-01T00:00:02.500Z', maxHoldSeconds: 600 });
    expect((r.patch as { spec: object }).spec).toEqual({ ttlSecondsAfterFinished: 3 + 600 + HOLD_MARGIN_SECONDS });
    expect((r.patch as { metadata: { resourceVersion: string } }).metadata.resourceVersion).toBe('7');
    // The raised TTL ends the hold by itself: deletion at since + maxHold + margin at the latest.
    expect(finished + heldTtl(finished, now, 600) * 1000).toBeGreaterThanOrEqual(now + 600_000);
    expect(finished + heldTtl(finished, now, 600) * 1000).toBeLessThanOrEqual(now + (600 + HOLD_MARGIN_SECONDS + 1) * 1000);
    expect(holdDeadline(r.hold)).toBe(now + 600_000);
    const held = job(700, { [HOLD_ANNOTATION]: annotationsOf(r.patch)[HOLD_ANNOTATION]! });
    expect(holdOf(held, KEY)).toEqual(r.hold);
  });

  it('never lowers a TTL that is longer already, and holds only once', () => {
    const r = holdPatch(job(100_000), KEY, finished, finished, 600)!;
    expect((r.patch as { spec: { ttlSecondsAfterFinished: number } }).spec.ttlSecondsAfterFinished).toBe(100_000);
    const held = job(700, { [HOLD_ANNOTATION]: annotationsOf(r.patch)[HOLD_ANNOTATION]! });
    expect(holdPatch(held, KEY, finished, finished, 600)).toBeUndefined();
    expect(holdOf(job(1, { [HOLD_ANNOTATION]: 'not json' }), KEY)).toBeUndefined();
  });

  it('a hold a tenant wrote is no hold: unsigned, signed with another key, or moved from another Job', () => {
    const forged = JSON.stringify({ originalTtl: null, since: new Date(finished).toISOString(), maxHoldSeconds: 600 });
    expect(holdOf(job(700, { [HOLD_ANNOTATION]: forged }), KEY)).toBeUndefined();
    const theirs = annotationsOf(holdPatch(job(3), OTHER, finished, finished, 600)!.patch)[HOLD_ANNOTATION]!;
    expect(holdOf(job(700, { [HOLD_ANNOTATION]: theirs }), KEY)).toBeUndefined();
    const elsewhere = annotationsOf(holdPatch(job(3, {}, 'another-job'), KEY, finished, finished, 600)!.patch)[HOLD_ANNOTATION]!;
    expect(holdOf(job(700, { [HOLD_ANNOTATION]: elsewhere }), KEY)).toBeUndefined();
    // So a forged hold does not stop the real one from being placed, with the Job's real TTL as the original.
    const real = holdPatch(job(7, { [HOLD_ANNOTATION]: forged }), KEY, finished, finished, 600)!;
    expect(real.hold.originalTtl).toBe(7);
  });

  it('a delivery record set in advance, or altered, does not count as reported', () => {
    const d = { sink: 'loki', pods: 1, shipped: 500, lost: 0, unaccounted: 0 };
    expect(deliveryRecordOf(job(3, { [DELIVERY_ANNOTATION]: JSON.stringify(d) }), KEY)).toBeUndefined();
    const signed = encodeDeliveryRecord(job(3), KEY, d);
    expect(deliveryRecordOf(job(3, { [DELIVERY_ANNOTATION]: signed }), KEY)).toEqual(d);
    const altered = signed.replace('"lost":0', '"lost":9');
    expect(deliveryRecordOf(job(3, { [DELIVERY_ANNOTATION]: altered }), KEY)).toBeUndefined();
    expect(deliveryRecordOf(job(3, { [DELIVERY_ANNOTATION]: signed }, 'another-job'), KEY)).toBeUndefined();
  });

  it('release: the original TTL back (null removes it), the hold annotation removed, the signed delivery written, in one patch', () => {
    const d = { sink: 'loki', pods: 1, shipped: 500, lost: 0, unaccounted: 0, harvested: 200 };
    const p = releasePatch(job(663), KEY, { originalTtl: 3, since: 'x', maxHoldSeconds: 600 }, d);
    expect((p as { spec: object }).spec).toEqual({ ttlSecondsAfterFinished: 3 });
    expect(annotationsOf(p)[HOLD_ANNOTATION]).toBeNull();
    expect(deliveryRecordOf(job(3, { [DELIVERY_ANNOTATION]: annotationsOf(p)[DELIVERY_ANNOTATION]! }), KEY)).toEqual(d);
    expect((releasePatch(job(663), KEY, { originalTtl: null, since: 'x', maxHoldSeconds: 600 }, d) as { spec: object }).spec).toEqual({ ttlSecondsAfterFinished: null });
  });
});
