// Holding a finished Job while the harvester ships what its sidecar could not:
// the only thing that keeps a pod's logs is the pod not being deleted, and
// the pods go only when the TTL controller deletes the Job. So the hold
// raises `ttlSecondsAfterFinished` (mutable, re-read by the TTL controller
// before it deletes) and records the original in an annotation; the release
// puts it back, so a Job already past its original TTL is deleted at once.
// The raised TTL itself ends the hold at `since + maxHold` even if no
// harvester ever comes back: a harvester can delay a deletion, never prevent it.
import type { V1Job } from '@kubernetes/client-node';
import { DELIVERY_ANNOTATION, encodeDelivery, type Delivery } from './report.ts';

export const HOLD_ANNOTATION = 'jobharvest.io/hold';
export const DEFAULT_MAX_HOLD_SECONDS = 24 * 3600;
/** Past the maximum hold, time for the release and the Warning before the raised TTL runs out. */
export const HOLD_MARGIN_SECONDS = 60;

export interface Hold {
  /** The Job's own TTL, put back at the release; null when it had none. */
  readonly originalTtl: number | null;
  readonly since: string;
  readonly maxHoldSeconds: number;
}

export function holdOf(job: V1Job): Hold | undefined {
  const raw = job.metadata?.annotations?.[HOLD_ANNOTATION];
  if (!raw) return undefined;
  try {
    const h = JSON.parse(raw) as Partial<Hold>;
    if (typeof h.since !== 'string' || typeof h.maxHoldSeconds !== 'number' || (h.originalTtl !== null && typeof h.originalTtl !== 'number')) return undefined;
    return h as Hold;
  } catch {
    return undefined;
  }
}

/** The TTL that keeps a Job finished at `finishedAt` until `since + maxHold + margin`. */
export function heldTtl(finishedAt: number, since: number, maxHoldSeconds: number): number {
  return Math.max(0, Math.ceil((since - finishedAt) / 1000)) + maxHoldSeconds + HOLD_MARGIN_SECONDS;
}

/** JSON merge patch that places the hold, or undefined when the Job is held already. */
export function holdPatch(job: V1Job, finishedAt: number, now: number, maxHoldSeconds: number): { patch: object; hold: Hold } | undefined {
  if (holdOf(job)) return undefined;
  const hold: Hold = { originalTtl: job.spec?.ttlSecondsAfterFinished ?? null, since: new Date(now).toISOString(), maxHoldSeconds };
  const ttl = heldTtl(finishedAt, now, maxHoldSeconds);
  return {
    hold,
    patch: {
      metadata: { resourceVersion: job.metadata?.resourceVersion, annotations: { [HOLD_ANNOTATION]: JSON.stringify(hold) } },
      spec: { ttlSecondsAfterFinished: Math.max(ttl, job.spec?.ttlSecondsAfterFinished ?? 0) },
    },
  };
}

/** When the harvester gives up on a held Job. */
export function holdDeadline(hold: Hold): number {
  return Date.parse(hold.since) + hold.maxHoldSeconds * 1000;
}

/** JSON merge patch of the release: the original TTL back, the hold gone, the delivery written, in one write. */
export function releasePatch(job: V1Job, hold: Hold, delivery: Delivery): object {
  return {
    metadata: { resourceVersion: job.metadata?.resourceVersion, annotations: { [HOLD_ANNOTATION]: null, [DELIVERY_ANNOTATION]: encodeDelivery(delivery) } },
    spec: { ttlSecondsAfterFinished: hold.originalTtl },
  };
}
