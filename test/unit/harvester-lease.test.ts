import type { V1Lease } from '@kubernetes/client-node';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { leaseAction } from '../../src/harvester/lease.ts';
import { startLeaderWith, type LeaseApi } from '../../src/k8s/leader.ts';

describe('lease decisions', () => {
  const now = 1_000_000;
  it('takes a free or missing lease, renews its own, follows a live holder and takes an expired one', () => {
    expect(leaseAction(undefined, 'a', now)).toBe('acquire');
    expect(leaseAction({ holder: undefined, renewedAt: now, durationSeconds: 15 }, 'a', now)).toBe('acquire');
    expect(leaseAction({ holder: 'a', renewedAt: now - 60_000, durationSeconds: 15 }, 'a', now)).toBe('renew');
    expect(leaseAction({ holder: 'b', renewedAt: now - 14_000, durationSeconds: 15 }, 'a', now)).toBe('follow');
    expect(leaseAction({ holder: 'b', renewedAt: now - 15_001, durationSeconds: 15 }, 'a', now)).toBe('acquire');
  });
});

/** An API server's optimistic concurrency for one Lease. */
class FakeLeases implements LeaseApi {
  lease: V1Lease | undefined;
  private rv = 0;
  writes = 0;

  async readNamespacedLease(): Promise<V1Lease> {
    if (!this.lease) throw Object.assign(new Error('not found'), { code: 404 });
    return structuredClone(this.lease);
  }
  async createNamespacedLease(p: { body: V1Lease }): Promise<V1Lease> {
    if (this.lease) throw Object.assign(new Error('exists'), { code: 409 });
    return this.store(p.body);
  }
  async replaceNamespacedLease(p: { body: V1Lease }): Promise<V1Lease> {
    if (p.body.metadata?.resourceVersion !== this.lease?.metadata?.resourceVersion) throw Object.assign(new Error('conflict'), { code: 409 });
    return this.store(p.body);
  }
  private store(b: V1Lease): V1Lease {
    this.writes++;
    this.lease = { ...structuredClone(b), metadata: { ...b.metadata, resourceVersion: String(++this.rv) } };
    return structuredClone(this.lease);
  }
}

/** Cuts one candidate off the API server, as a killed or partitioned replica. */
function cut(api: FakeLeases, gone: { value: boolean }): LeaseApi {
  const guard = <T>(f: () => Promise<T>) => (gone.value ? Promise.reject(new Error('connection refused')) : f());
  return {
    readNamespacedLease: () => guard(() => api.readNamespacedLease()),
    createNamespacedLease: (p) => guard(() => api.createNamespacedLease(p)),
    replaceNamespacedLease: (p) => guard(() => api.replaceNamespacedLease(p)),
  } as LeaseApi;
}

describe('leader election', () => {
  it('one leader at a time; the other takes over once the leader stops renewing, and the old one steps down first', async () => {
    const api = new FakeLeases();
    const log = () => {};
    const timeline: string[] = [];
    const aGone = { value: false };
    const common = { namespace: 'jh', name: 'jobharvest-harvester', log, leaseSeconds: 1, retryMs: 50 };
    const a = startLeaderWith(cut(api, aGone), { ...common, identity: 'a', onStartedLeading: () => timeline.push('a+'), onStoppedLeading: () => timeline.push('a-') });
    await sleep(150);
    const b = startLeaderWith(api, { ...common, identity: 'b', onStartedLeading: () => timeline.push('b+'), onStoppedLeading: () => timeline.push('b-') });
    await sleep(400);
    expect(a.isLeader()).toBe(true);
    expect(b.isLeader()).toBe(false);
    expect(api.lease?.spec?.holderIdentity).toBe('a');
    // a can no longer reach the API server (killed, partitioned).
    aGone.value = true;
    await sleep(1600);
    expect(b.isLeader()).toBe(true);
    expect(a.isLeader()).toBe(false);
    expect(api.lease?.spec?.holderIdentity).toBe('b');
    expect(api.lease?.spec?.leaseTransitions).toBe(1);
    // a stepped down (after 2/3 of the lease) before b took over (after the whole lease).
    expect(timeline).toEqual(['a+', 'a-', 'b+']);
    await a.stop();
    await b.stop();
    // A leader that stops gives the lease up, so a successor need not wait.
    expect(api.lease?.spec?.holderIdentity).toBeUndefined();
  });

  it('a stopping leader hands over at once', async () => {
    const api = new FakeLeases();
    const common = { namespace: 'jh', name: 'l', log: () => {}, leaseSeconds: 30, retryMs: 50, onStoppedLeading: () => {} };
    let bLed = 0;
    const a = startLeaderWith(api, { ...common, identity: 'a', onStartedLeading: () => {} });
    await sleep(100);
    const b = startLeaderWith(api, { ...common, identity: 'b', onStartedLeading: () => (bLed = Date.now()) });
    await sleep(150);
    expect(a.isLeader()).toBe(true);
    const stopped = Date.now();
    await a.stop();
    await sleep(300);
    expect(b.isLeader()).toBe(true);
    expect(bLed - stopped).toBeLessThan(30_000);
    await b.stop();
  });
});
