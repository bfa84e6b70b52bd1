// What the harvester keeps of Job pods between their going and their Job's
// record: only pods of Jobs whose injection signature verifies, running the
// signed sidecar, whose sidecar ended; a fixed-size summary of each; bounded
// in bytes, fairly among namespaces; and let go. A tenant's pods, in any
// number and of any size, cost the other tenants nothing (issue 39, part 1).
import type { V1Job, V1Pod } from '@kubernetes/client-node';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { INJECTED_LABEL } from '../../src/contract/harvest.ts';
import { mutateJob } from '../../src/core/mutate.ts';
import { DEFAULT_BUDGET_BYTES, PodReports } from '../pod-reports.ts';
import { PodWatches } from '../pod-watches.ts';
import { verifyInjection } from '../trust.ts';
import { durableConfig, job as jobFixture, optedIn } from '../../test/support/fixtures.ts';

const KEY = Buffer.from('0123456789abcdef0123456789abcdef');

/** A Job as the webhook stores it (injected and signed in `namespace`), then given a uid. */
function injected(namespace: string, uid: string): V1Job {
  const r = mutateJob(jobFixture('build', { metadata: { name: 'build', namespace } }) as never, { config: durableConfig(), namespace: optedIn(namespace), signingKey: KEY, now: 0 });
  expect(r.decision.action).toBe('inject');
  const j = r.job as V1Job;
  const out = { ...j, metadata: { ...j.metadata, namespace, uid } };
  expect(verifyInjection(out, KEY).ok).toBe(true);
  return out;
}

/** A tenant's own Job: opted out, its own init container named `jobharvest`, the injected label set by hand. */
function uninjected(namespace: string, uid: string): V1Job {
  const j = jobFixture('mine', { metadata: { name: 'mine', namespace, uid, labels: { [INJECTED_LABEL]: 'true' }, annotations: { 'jobharvest.io/inject': 'false' } } }) as V1Job;
  j.spec!.template.spec!.initContainers = [{ name: 'jobharvest', image: 'busybox', command: ['true'] }];
  return j;
}

/** The leader's wiring (harvester/main.ts): the Job watch verifies, the pod reports ask it. */
function wired(budgetBytes?: number) {
  const watches = new PodWatches({
    open: () => ({ stop: () => undefined }),
    cares: () => true,
    verify: (j) => {
      const v = verifyInjection(j, KEY);
      return v.ok ? v.value.sidecarDigest : undefined;
    },
  });
  const reports = new PodReports({ container: 'jobharvest', trusted: (ns, uid) => watches.trusted(ns, uid), ...(budgetBytes ? { budgetBytes } : {}) });
  return { watches, reports };
}

/** A pod of `job` as the Job controller makes it, its sidecar ended with `message`; `bulk` bytes of env in every container but the sidecar. */
function pod(job: V1Job, name: string, o: { message?: string; bulk?: number; running?: boolean; namespace?: string } = {}): V1Pod {
  const bulk = o.bulk ? [{ name: 'BULK', value: `${name}:`.padEnd(o.bulk, 'a') }] : [];
  const tpl = structuredClone(job.spec!.template.spec!);
  // Parsed from JSON as the API client does, so every string is its own and on the heap.
  return JSON.parse(JSON.stringify({
    metadata: {
      name,
      namespace: o.namespace ?? job.metadata!.namespace,
      uid: `${name}-uid`,
      labels: { 'batch.kubernetes.io/controller-uid': job.metadata!.uid!, team: 'x'.repeat(60) },
      annotations: { big: 'y'.repeat(1000) },
      ownerReferences: [{ apiVersion: 'batch/v1', kind: 'Job', name: job.metadata!.name!, uid: job.metadata!.uid!, controller: true }],
    },
    spec: {
      ...tpl,
      containers: tpl.containers.map((c) => ({ ...c, env: [...(c.env ?? []), ...bulk] })),
      // The sidecar as signed: env added to it would make it another container, which is not kept.
      initContainers: (tpl.initContainers ?? []).map((c) => (c.name === 'jobharvest' ? c : { ...c, env: [...(c.env ?? []), ...bulk] })),
    },
    status: {
      phase: o.running ? 'Running' : 'Failed',
      conditions: [{ type: 'DisruptionTarget', status: 'True', reason: 'EvictionByEvictionAPI' }],
      initContainerStatuses: [
        { name: 'jobharvest', image: 'jh', imageID: '', ready: false, restartCount: 0, state: o.running ? { running: {} } : { terminated: { exitCode: 0, reason: 'Completed', message: o.message ?? '{"state":"complete"}' } } },
      ],
    },
  })) as V1Pod;
}

/** The heap after a full collection: V8's own gc, which vitest's workers do not expose, switched on for this. */
function heapAfterGc(): number {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  gc();
  gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.external;
}

describe('PodReports', () => {
  it('keeps a verified Job pod once its sidecar ended, as a summary: no spec, env, labels or annotations', () => {
    const { watches, reports } = wired();
    const j = injected('team-a', 'job-1');
    watches.observe(j);
    reports.observe(pod(j, 'running', { running: true }));
    expect(reports.count).toBe(0);
    reports.observe(pod(j, 'ended', { bulk: 4096 }));
    reports.observe(pod(j, 'ended', { bulk: 4096 }));
    expect(reports.count).toBe(1);
    const [kept] = reports.gone('job-1', []);
    expect(kept?.metadata).toEqual({ name: 'ended', namespace: 'team-a', uid: 'ended-uid', ownerReferences: [expect.objectContaining({ kind: 'Job', uid: 'job-1', controller: true })] });
    expect(kept?.spec).toEqual({ containers: [] });
    expect(kept?.status?.phase).toBe('Failed');
    expect(kept?.status?.initContainerStatuses?.[0]?.state?.terminated).toEqual({ exitCode: 0, reason: 'Completed', message: '{"state":"complete"}' });
    expect(JSON.stringify(kept)).not.toContain('ended:aaaa');
  });

  it('keeps nothing of a Job whose injection does not verify, a pod not running the signed sidecar, or a pod in another namespace', () => {
    const { watches, reports } = wired();
    const mine = uninjected('team-a', 'mine-uid');
    watches.observe(mine);
    expect(watches.size).toBe(0);
    reports.observe(pod(mine, 'tenant-pod'));
    // A copied signature on a Job of the tenant's making: the digest of its sidecar does not match.
    const real = injected('team-a', 'job-1');
    const copy = structuredClone(real);
    copy.spec!.template.spec!.initContainers![0]!.env!.push({ name: 'JOBHARVEST_HEADERS', value: 'x=y' });
    watches.observe(real);
    reports.observe(pod(copy, 'other-sidecar'));
    // A bare pod elsewhere that names the verified Job as its controller.
    reports.observe(pod(real, 'elsewhere', { namespace: 'team-b' }));
    expect(reports.count).toBe(0);
    reports.observe(pod(real, 'its-own'));
    expect(reports.gone('job-1', []).map((p) => p.metadata?.name)).toEqual(['its-own']);
  });

  it('caps the termination message at the kubelet\'s 4096 bytes', () => {
    const { watches, reports } = wired();
    const j = injected('team-a', 'job-1');
    watches.observe(j);
    reports.observe(pod(j, 'p', { message: 'é'.repeat(100_000) }));
    const m = reports.gone('job-1', [])[0]?.status?.initContainerStatuses?.[0]?.state?.terminated?.message ?? '';
    expect(Buffer.byteLength(m)).toBe(4096);
    expect(m).toBe('é'.repeat(2048));
  });

  it('gives only the pods the API no longer lists, and forgets a Job once asked', () => {
    const { watches, reports } = wired();
    const j = injected('team-a', 'job-1');
    watches.observe(j);
    const a = pod(j, 'a');
    reports.observe(a);
    reports.observe(pod(j, 'b'));
    expect(reports.gone('job-1', [a]).map((p) => p.metadata?.name)).toEqual(['b']);
    expect(reports.gone('job-2', [])).toEqual([]);
    reports.forget('job-1');
    expect(reports.count).toBe(0);
    expect(reports.usedBytes).toBe(0);
    expect(reports.gone('job-1', [])).toEqual([]);
  });

  it('300 pods of an uninjected Job, each with an ended `jobharvest` init container and 1 MiB of env, add < 5 MiB of heap', () => {
    const { watches, reports } = wired();
    const mine = uninjected('team-a', 'mine-uid');
    watches.observe(mine);
    const before = heapAfterGc();
    for (let i = 0; i < 300; i++) reports.observe(pod(mine, `mine-${i}`, { bulk: 2 ** 20 }));
    const grown = heapAfterGc() - before;
    expect(grown).toBeLessThan(5 * 2 ** 20);
    expect(reports.count).toBe(0);
  });

  it('300 pods of a verified Job with 1 MiB of env each keep only their summaries: < 5 MiB of heap', () => {
    const { watches, reports } = wired();
    const j = injected('team-a', 'job-1');
    watches.observe(j);
    const before = heapAfterGc();
    for (let i = 0; i < 300; i++) reports.observe(pod(j, `build-${i}`, { bulk: 2 ** 20, message: `{"state":"complete","n":${i}}`.padEnd(1024) }));
    const grown = heapAfterGc() - before;
    expect(grown).toBeLessThan(5 * 2 ** 20);
    expect(reports.count).toBe(300);
  });

  it('20,000 pods in namespace A leave namespace B\'s kept reports whole; A stays within the budget, newest kept', () => {
    const { watches, reports } = wired();
    const b = injected('team-b', 'job-b');
    watches.observe(b);
    for (let i = 0; i < 50; i++) reports.observe(pod(b, `b-${i}`, { message: `{"state":"complete","pod":${i}}` }));
    const jobsA = Array.from({ length: 20 }, (_, k) => injected('team-a', `job-a-${k}`));
    for (const j of jobsA) watches.observe(j);
    const full = 'z'.repeat(4096);
    for (let i = 0; i < 20_000; i++) reports.observe(pod(jobsA[i % 20]!, `a-${i}`, { message: full }));
    expect(reports.countIn('team-b')).toBe(50);
    expect(reports.gone('job-b', []).map((p) => p.status?.initContainerStatuses?.[0]?.state?.terminated?.message)).toEqual(Array.from({ length: 50 }, (_, i) => `{"state":"complete","pod":${i}}`));
    expect(reports.usedBytes).toBeLessThanOrEqual(DEFAULT_BUDGET_BYTES);
    expect(reports.evicted).toBeGreaterThan(0);
    expect(reports.countIn('team-a')).toBe(20_000 - reports.evicted);
    // The last pod A made is still there.
    expect(reports.gone('job-a-19', []).some((p) => p.metadata?.name === 'a-19999')).toBe(true);
  });

  it('over the budget, the namespace holding the most gives up its oldest pod, whichever came first', () => {
    const a = injected('team-a', 'job-a');
    const b = injected('team-b', 'job-b');
    // What one such summary counts (the same for each: names of one length, the same message).
    const probe = wired();
    probe.watches.observe(a);
    probe.reports.observe(pod(a, 'a-999', { message: 'x'.repeat(20) }));
    const one = probe.reports.usedBytes;
    const { watches, reports } = wired(10 * one);
    watches.observe(a);
    watches.observe(b);
    // A first, then B: an oldest-first rule would take A's and then B's oldest.
    for (let i = 0; i < 4; i++) reports.observe(pod(a, `a-00${i}`, { message: 'x'.repeat(20) }));
    for (let i = 0; i < 3; i++) reports.observe(pod(b, `b-00${i}`, { message: 'x'.repeat(20) }));
    for (let i = 4; i < 9; i++) reports.observe(pod(a, `a-00${i}`, { message: 'x'.repeat(20) }));
    expect(reports.count).toBe(10);
    expect(reports.usedBytes).toBe(10 * one);
    expect(reports.countIn('team-b')).toBe(3);
    expect(reports.gone('job-a', []).map((p) => p.metadata?.name)).toEqual(['a-002', 'a-003', 'a-004', 'a-005', 'a-006', 'a-007', 'a-008']);
  });
});
