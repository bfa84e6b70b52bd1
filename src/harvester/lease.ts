// Leader election over a coordination.k8s.io Lease, the decision part: who
// holds the Lease and what a candidate does about it. @kubernetes/client-node
// 2.0.1 ships no leader-election helper, so this is a small one in the shape
// of client-go's: the edge (src/k8s/leader.ts) reads the Lease, asks here,
// and writes it back with the resourceVersion it read, so two candidates
// never both win one round.

export interface LeaseView {
  readonly holder: string | undefined;
  /** ms since the epoch of the holder's last renewal. */
  readonly renewedAt: number | undefined;
  readonly durationSeconds: number | undefined;
}

export type LeaseAction = 'renew' | 'acquire' | 'follow';

/** Renew our own Lease, take one that is free or expired, else follow its holder. */
export function leaseAction(lease: LeaseView | undefined, me: string, now: number): LeaseAction {
  if (!lease || !lease.holder) return 'acquire';
  if (lease.holder === me) return 'renew';
  if (lease.renewedAt === undefined || lease.durationSeconds === undefined) return 'acquire';
  return now > lease.renewedAt + lease.durationSeconds * 1000 ? 'acquire' : 'follow';
}
