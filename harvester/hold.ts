// Holding a finished Job while the harvester ships what its sidecar could not:
// the only thing that keeps a pod's logs is the pod not being deleted, and
// the pods go only when the TTL controller deletes the Job. So the hold
// raises `ttlSecondsAfterFinished` (mutable, re-read by the TTL controller
// before it deletes) and records the original in an annotation; the release
// puts it back, so a Job already past its original TTL is deleted at once.
// The raised TTL itself ends the hold at `since + maxHold` even if no
// harvester ever comes back: a harvester can delay a deletion, never prevent it.
//
// Both annotations are signed for the Job's uid: a hold a tenant wrote
// (say with `originalTtl: null`, to outlive the operator's TTL cap) is not
// a hold, and a delivery record a tenant wrote does not silence the report.
// After a key rotation, a hold or record signed with a previous key (kept for
// verification, signing.previousKeys) is still this harvester's: it is
// released and recorded, and whatever it writes is signed with the current key.
import type { V1Job } from '@kubernetes/client-node';
import { HOLD_ANNOTATION } from '../src/contract/harvest.ts';
import type { VerifyingKeys } from '../src/contract/signature.ts';
import { DELIVERY_ANNOTATION, type DeliveryRecord } from './report.ts';
import { PURPOSE, signedJson, verifiedJson } from './trust.ts';

export { HOLD_ANNOTATION };
export const DEFAULT_MAX_HOLD_SECONDS = 24 * 3600;
/** Past the maximum hold, time for the release and the Warning before the raised TTL runs out. */
export const HOLD_MARGIN_SECONDS = 60;

export interface Hold {
  /** The Job's own TTL, put back at the release; null when it had none. */
  readonly originalTtl: number | null;
  readonly since: string;
  readonly maxHoldSeconds: number;
}

/** The hold this harvester placed on the Job; anything else in the annotation is not one. */
export function holdOf(job: V1Job, keys: VerifyingKeys): Hold | undefined {
  const h = verifiedJson<Partial<Hold>>(keys, PURPOSE.hold, job.metadata?.uid, job.metadata?.annotations?.[HOLD_ANNOTATION]);
  if (!h || typeof h.since !== 'string' || !Number.isFinite(Date.parse(h.since)) || !Number.isSafeInteger(h.maxHoldSeconds) || h.maxHoldSeconds! <= 0) return undefined;
  if (h.originalTtl !== null && (!Number.isSafeInteger(h.originalTtl) || h.originalTtl! < 0)) return undefined;
  return h as Hold;
}

/** The delivery record this harvester wrote on the Job; one written by anyone else counts as none. */
export function deliveryRecordOf(job: V1Job, keys: VerifyingKeys): DeliveryRecord | undefined {
  return verifiedJson<DeliveryRecord>(keys, PURPOSE.delivery, job.metadata?.uid, job.metadata?.annotations?.[DELIVERY_ANNOTATION]);
}

export function encodeDeliveryRecord(job: V1Job, keys: VerifyingKeys, d: DeliveryRecord): string {
  return signedJson(keys, PURPOSE.delivery, job.metadata?.uid ?? '', d);
}

/** The TTL that keeps a Job finished at `finishedAt` until `since + maxHold + margin`. */
export function heldTtl(finishedAt: number, since: number, maxHoldSeconds: number): number {
  return Math.max(0, Math.ceil((since - finishedAt) / 1000)) + maxHoldSeconds + HOLD_MARGIN_SECONDS;
}

/** JSON merge patch that places the hold, or undefined when the Job is held already. */
export function holdPatch(job: V1Job, keys: VerifyingKeys, finishedAt: number, now: number, maxHoldSeconds: number): { patch: object; hold: Hold } | undefined {
  if (holdOf(job, keys)) return undefined;
  const hold: Hold = { originalTtl: job.spec?.ttlSecondsAfterFinished ?? null, since: new Date(now).toISOString(), maxHoldSeconds };
  const ttl = heldTtl(finishedAt, now, maxHoldSeconds);
  return {
    hold,
    patch: {
      metadata: { resourceVersion: job.metadata?.resourceVersion, annotations: { [HOLD_ANNOTATION]: signedJson(keys, PURPOSE.hold, job.metadata?.uid ?? '', hold) } },
      spec: { ttlSecondsAfterFinished: Math.max(ttl, job.spec?.ttlSecondsAfterFinished ?? 0) },
    },
  };
}

/** When the harvester gives up on a held Job. */
export function holdDeadline(hold: Hold): number {
  return Date.parse(hold.since) + hold.maxHoldSeconds * 1000;
}

/**
 * Whether holding the Job means anything: a Job with no TTL is not deleted by
 * the TTL controller, and one its owner deletes (a JobSet's child, say) is not
 * kept by a TTL either. A hold would instead give such a Job a TTL it never had,
 * and a JobSet creates a deleted child again.
 */
export function needsHold(job: V1Job): boolean {
  const ttl = job.spec?.ttlSecondsAfterFinished;
  return ttl !== undefined && ttl !== null;
}

/** JSON merge patch of the delivery record alone, for a Job shipped without a hold. */
export function recordPatch(job: V1Job, keys: VerifyingKeys, delivery: DeliveryRecord, extra: Record<string, string> = {}): object {
  return { metadata: { resourceVersion: job.metadata?.resourceVersion, annotations: { ...extra, [DELIVERY_ANNOTATION]: encodeDeliveryRecord(job, keys, delivery) } } };
}

/** JSON merge patch of the release: the original TTL back, the hold gone, the delivery written, in one write. */
export function releasePatch(job: V1Job, keys: VerifyingKeys, hold: Hold, delivery: DeliveryRecord, extra: Record<string, string> = {}): object {
  return {
    metadata: { resourceVersion: job.metadata?.resourceVersion, annotations: { ...extra, [HOLD_ANNOTATION]: null, [DELIVERY_ANNOTATION]: encodeDeliveryRecord(job, keys, delivery) } },
    spec: { ttlSecondsAfterFinished: hold.originalTtl },
  };
}

/**
 * JSON merge patch that ends a hold with no delivery record: the original TTL
 * back and the hold gone, as the release writes them. The uninstall hook uses
 * it (harvester/uninstall.ts): nothing will harvest the Job after it, and the
 * Job must be deleted by its own TTL, not by the raised one.
 */
export function holdReleasePatch(job: V1Job, hold: Hold): object {
  return {
    metadata: { resourceVersion: job.metadata?.resourceVersion, annotations: { [HOLD_ANNOTATION]: null } },
    spec: { ttlSecondsAfterFinished: hold.originalTtl },
  };
}
