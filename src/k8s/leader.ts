// Leader election on a coordination.k8s.io Lease in the webhook's namespace
// (decisions in src/harvester/lease.ts). Every replica runs it; the one that
// holds the Lease runs the delivery report and the harvester. A leader that
// cannot renew for two thirds of the lease duration stops leading, before
// another replica may take over, so two never act at once.
import { CoordinationV1Api, type KubeConfig, type V1Lease, V1MicroTime } from '@kubernetes/client-node';
import { leaseAction } from '../harvester/lease.ts';
import { messageOf, statusOf } from './errors.ts';
import type { Log } from './log.ts';

export interface LeaderOptions {
  namespace: string;
  name: string;
  identity: string;
  log: Log;
  leaseSeconds?: number;
  retryMs?: number;
  onStartedLeading(): void;
  onStoppedLeading(): void;
}

export type LeaseApi = Pick<CoordinationV1Api, 'readNamespacedLease' | 'createNamespacedLease' | 'replaceNamespacedLease'>;

export interface Leader {
  isLeader(): boolean;
  /** Stops campaigning; a leader gives the Lease up so another replica takes over at once. */
  stop(): Promise<void>;
}

export function startLeader(kc: KubeConfig, opts: LeaderOptions): Leader {
  return startLeaderWith(kc.makeApiClient(CoordinationV1Api), opts);
}

export function startLeaderWith(api: LeaseApi, opts: LeaderOptions): Leader {
  const leaseSeconds = opts.leaseSeconds ?? 15;
  const retryMs = opts.retryMs ?? 2000;
  let leading = false;
  let lastRenew = 0;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let round: Promise<void> = Promise.resolve();

  const lose = (why: string): void => {
    if (!leading) return;
    leading = false;
    opts.log('warn', 'stopped leading', { lease: opts.name, reason: why });
    opts.onStoppedLeading();
  };

  async function once(): Promise<void> {
    const now = Date.now();
    let cur: V1Lease | undefined;
    try {
      cur = await api.readNamespacedLease({ name: opts.name, namespace: opts.namespace });
    } catch (err) {
      if (statusOf(err) !== 404) throw err;
    }
    const spec = cur?.spec;
    const view = spec ? { holder: spec.holderIdentity, renewedAt: spec.renewTime ? new Date(spec.renewTime as unknown as string).getTime() : undefined, durationSeconds: spec.leaseDurationSeconds } : undefined;
    const action = leaseAction(view, opts.identity, now);
    if (action === 'follow') {
      lose('another replica holds the lease');
      return;
    }
    const stamp = new V1MicroTime(now);
    const body: V1Lease = {
      metadata: { name: opts.name, namespace: opts.namespace, ...(cur?.metadata?.resourceVersion ? { resourceVersion: cur.metadata.resourceVersion } : {}) },
      spec: {
        holderIdentity: opts.identity,
        leaseDurationSeconds: leaseSeconds,
        renewTime: stamp,
        acquireTime: action === 'renew' && spec?.acquireTime ? spec.acquireTime : stamp,
        leaseTransitions: (spec?.leaseTransitions ?? 0) + (action === 'acquire' && cur ? 1 : 0),
      },
    };
    try {
      if (cur) await api.replaceNamespacedLease({ name: opts.name, namespace: opts.namespace, body });
      else await api.createNamespacedLease({ namespace: opts.namespace, body });
    } catch (err) {
      // Someone else wrote it first: follow them this round.
      if (statusOf(err) === 409) {
        lose('lost the race for the lease');
        return;
      }
      throw err;
    }
    lastRenew = now;
    if (!leading && !stopped) {
      leading = true;
      opts.log('info', 'started leading', { lease: opts.name, identity: opts.identity });
      opts.onStartedLeading();
    }
  }

  const tick = (): void => {
    round = once()
      .catch((err: unknown) => {
        opts.log('warn', 'lease renewal failed', { lease: opts.name, error: messageOf(err) });
        // Stop well before the lease can expire, so another replica that takes
        // it over never overlaps with this one (client-go's renew deadline).
        if (Date.now() - lastRenew >= (leaseSeconds * 1000 * 2) / 3) lose('could not renew the lease in time');
      })
      .finally(() => {
        if (!stopped) timer = setTimeout(tick, retryMs);
      });
  };
  tick();

  return {
    isLeader: () => leading,
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await round;
      if (!leading) return;
      lose('shutting down');
      try {
        const cur = await api.readNamespacedLease({ name: opts.name, namespace: opts.namespace });
        if (cur.spec?.holderIdentity === opts.identity) {
          await api.replaceNamespacedLease({ name: opts.name, namespace: opts.namespace, body: { ...cur, spec: { ...cur.spec, holderIdentity: undefined, renewTime: undefined } } });
        }
      } catch (err) {
        opts.log('warn', 'could not release the lease; another replica takes over once it expires', { error: messageOf(err) });
      }
    },
  };
}
