// Leader election over a coordination.k8s.io Lease, the decision part, by
// client-go's rules (k8s.io/client-go/tools/leaderelection). The edge
// (harvester/leader.ts) reads the Lease, asks here, and writes it back with the
// resourceVersion it read, so two candidates never both win one round.
//
// A candidate never compares the holder's renewTime with its own wall clock:
// the two clocks are on different machines, and a replica whose clock runs 20 s
// ahead would take a Lease renewed a second ago. Instead each candidate notes,
// on its own monotonic clock, when it last saw the Lease change; a holder that
// has not changed it for a whole lease duration, as seen from here, is gone.

/** What a candidate compares between reads to tell whether the holder is alive. */
export interface LeaseView {
  readonly holder: string | undefined;
  /** As stored, only to tell one renewal from the next; never read as a time. */
  readonly renewTime: string | undefined;
  readonly resourceVersion: string | undefined;
  /** The duration the holder promised to renew within, if it said. */
  readonly durationSeconds: number | undefined;
}

/** When, on this candidate's monotonic clock, it first saw the Lease as it is now. */
export interface Observed {
  readonly record: string;
  readonly at: number;
}

export type LeaseAction = 'renew' | 'acquire' | 'follow';

/** The observation after reading `lease` at `now`: unchanged record, unchanged time. */
export function observe(prev: Observed | undefined, lease: LeaseView | undefined, now: number): Observed {
  const record = JSON.stringify(lease ? [lease.holder ?? '', lease.renewTime ?? '', lease.resourceVersion ?? ''] : null);
  return prev?.record === record ? prev : { record, at: now };
}

/**
 * Renew our own Lease, take one that is missing, free, or unchanged for a whole
 * lease duration since this candidate saw it change; else follow its holder.
 * The wait is the longer of this candidate's lease duration and the one the
 * holder wrote, so a holder configured with a longer one (during a rollout)
 * is not cut short before its own renew deadline.
 */
export function leaseAction(lease: LeaseView | undefined, observed: Observed, me: string, now: number, leaseDurationMs: number): LeaseAction {
  if (!lease || !lease.holder) return 'acquire';
  if (lease.holder === me) return 'renew';
  const promised = lease.durationSeconds !== undefined && Number.isFinite(lease.durationSeconds) && lease.durationSeconds > 0 ? lease.durationSeconds * 1000 : 0;
  return now - observed.at >= Math.max(leaseDurationMs, promised) ? 'acquire' : 'follow';
}

/** client-go's checks on the timings (JitterFactor 1.2), so a leader always steps down before a follower may take over. */
export function checkTimings(t: { leaseDurationMs: number; renewDeadlineMs: number; retryPeriodMs: number }): void {
  for (const k of ['leaseDurationMs', 'renewDeadlineMs', 'retryPeriodMs'] as const) {
    const v = t[k];
    if (!Number.isFinite(v) || v <= 0) throw new Error(`${k} must be a positive number of milliseconds, got ${v}`);
  }
  if (!(t.leaseDurationMs > t.renewDeadlineMs)) throw new Error(`leaseDurationMs (${t.leaseDurationMs}) must be greater than renewDeadlineMs (${t.renewDeadlineMs})`);
  if (!(t.renewDeadlineMs > t.retryPeriodMs * 1.2)) throw new Error(`renewDeadlineMs (${t.renewDeadlineMs}) must be greater than 1.2 × retryPeriodMs (${t.retryPeriodMs * 1.2})`);
}
