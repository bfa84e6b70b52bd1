// The harvester's reconcile against a fake API: what it trusts, what it
// writes, and what it sends where. Each forgery here was a way to make the
// old in-webhook harvester act on a tenant's say-so.
import type { CoreV1Event, V1Container, V1Job, V1Pod, V1Volume } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { encodeTermination } from '../../src/contract/termination.ts';
import { INJECTED_LABEL } from '../../src/contract/harvest.ts';
import { keyId, keyRing, SIGNATURE_ANNOTATION } from '../../src/contract/signature.ts';
import { mutateJob } from '../../src/core/mutate.ts';
import { parseDestinations, type Destination } from '../destinations.ts';
import { deliveryRecordOf, encodeDeliveryRecord, HOLD_ANNOTATION } from '../hold.ts';
import { DELIVERY_ANNOTATION, type DeliveryRecord } from '../report.ts';
import { MAX_NOTES, Reconciler, type HarvestApi, type ReconcilerOptions, type WriteResult } from '../reconcile.ts';
import { DEFAULT_LIMITS, type ShipRequest, type ShipResult } from '../ship.ts';
import { verifyInjection } from '../trust.ts';
import { PodReports } from '../pod-reports.ts';
import { missedInjection } from '../missed.ts';
import type { NamespaceMeta } from '../../src/core/kube.ts';
import { durableConfig, job as jobFixture, optedIn } from '../../test/support/fixtures.ts';

const KEY = Buffer.from('0123456789abcdef0123456789abcdef');
const ENDPOINT = 'http://logs.example:8080/ingest';
const APPROVED: Destination[] = parseDestinations([{ name: 'default', sink: 'http', endpoint: ENDPOINT }]);

/** A Job as the webhook stores it: injected, signed, then given a uid and a finished status by the API server. */
function injectedJob(over: { endpoint?: string; key?: Buffer } = {}): V1Job {
  const config = durableConfig(over.endpoint ? { sink: { type: 'http', endpoint: over.endpoint } } : {});
  const r = mutateJob(jobFixture('build') as never, { config, namespace: optedIn('team-a'), signingKey: over.key ?? KEY, now: 0 });
  expect(r.decision.action).toBe('inject');
  return finished(r.job as V1Job);
}

function finished(j: V1Job): V1Job {
  return {
    ...j,
    metadata: { ...j.metadata, namespace: 'team-a', uid: 'job-uid', resourceVersion: '1' },
    status: { conditions: [{ type: 'Complete', status: 'True', lastTransitionTime: new Date(Date.now() - 1000) }] },
  };
}

/** A pod of the Job: its controller reference, and the sidecar of `from`'s template, as the Job controller creates it. */
function pod(name: string, message: string | undefined, owner: string | null = 'job-uid', from: V1Job = injectedJob()): V1Pod {
  return {
    metadata: {
      name,
      namespace: 'team-a',
      uid: `${name}-uid`,
      labels: { 'batch.kubernetes.io/controller-uid': 'job-uid', 'batch.kubernetes.io/job-name': 'build' },
      ...(owner ? { ownerReferences: [{ apiVersion: 'batch/v1', kind: 'Job', name: 'build', uid: owner, controller: true }] } : {}),
    },
    // The template's spec, volumes included: the signature covers the volumes the sidecar mounts.
    spec: structuredClone(from.spec!.template.spec!),
    status: {
      phase: 'Succeeded',
      initContainerStatuses: [{ name: 'jobharvest', image: 'x', imageID: '', ready: false, restartCount: 0, state: message === undefined ? {} : { terminated: { exitCode: 3, message } } }],
    },
  };
}

/** The volume the ServiceAccount admission plugin adds to a pod whose token is automounted. */
function serviceAccountVolume(name: string): V1Volume {
  return {
    name,
    projected: {
      defaultMode: 420,
      sources: [
        { serviceAccountToken: { expirationSeconds: 3607, path: 'token' } },
        { configMap: { name: 'kube-root-ca.crt', items: [{ key: 'ca.crt', path: 'ca.crt' }] } },
        { downwardAPI: { items: [{ fieldRef: { apiVersion: 'v1', fieldPath: 'metadata.namespace' }, path: 'namespace' }] } },
      ],
    },
  };
}

const unsent = (n: number) => encodeTermination({ state: 'incomplete', mode: 'node', sink: 'http', shipped: 10, unsent: n, dead_lettered: 0 }, [['main', 0, '2026-01-01T00:00:01Z', 1]], []);

class FakeApi implements HarvestApi {
  patches: object[] = [];
  events: CoreV1Event[] = [];
  constructor(
    public job: V1Job,
    public pods: V1Pod[],
  ) {}
  async readJob(): Promise<V1Job | undefined> {
    return structuredClone(this.job);
  }
  async listPods(): Promise<V1Pod[]> {
    return this.pods;
  }
  async patchJob(_ns: string, _name: string, patch: object): Promise<WriteResult> {
    const p = patch as { metadata?: { resourceVersion?: string; annotations?: Record<string, string | null> }; spec?: { ttlSecondsAfterFinished?: number | null } };
    if (p.metadata?.resourceVersion && p.metadata.resourceVersion !== this.job.metadata?.resourceVersion) return 'conflict';
    this.patches.push(patch);
    const ann = { ...(this.job.metadata?.annotations ?? {}) };
    for (const [k, v] of Object.entries(p.metadata?.annotations ?? {})) if (v === null) delete ann[k];
    else ann[k] = v;
    const spec = { ...this.job.spec!, ...(p.spec && 'ttlSecondsAfterFinished' in p.spec ? { ttlSecondsAfterFinished: p.spec.ttlSecondsAfterFinished ?? undefined } : {}) };
    this.job = { ...this.job, metadata: { ...this.job.metadata, annotations: ann, resourceVersion: String(Number(this.job.metadata?.resourceVersion) + 1) }, spec };
    return 'ok';
  }
  async createEvent(_ns: string, e: CoreV1Event): Promise<void> {
    this.events.push(e);
  }
  /** What the node controller recorded in the namespace (NodeNotReady only, as the field selector asks). */
  nodeEvents: CoreV1Event[] = [];
  async listNodeNotReadyEvents(): Promise<CoreV1Event[]> {
    return this.nodeEvents;
  }
  delivery(): DeliveryRecord | undefined {
    return deliveryRecordOf(this.job, KEY);
  }
}

/** A reconciler at the harvester's defaults; its ship step records each request and returns `result`. */
function reconciler(api: FakeApi, shipped: ShipRequest[], o: { result?: ShipResult } & Partial<ReconcilerOptions> = {}): Reconciler {
  const { result, ...over } = o;
  return new Reconciler({
    api,
    key: KEY,
    destinations: APPROVED,
    maxHoldSeconds: 86_400,
    limits: DEFAULT_LIMITS,
    kube: { apiUrl: new URL('https://127.0.0.1:6443'), credentials: async () => ({ token: 't' }) },
    ship: async (req) => {
      shipped.push(req);
      return result ?? { missing: 5, shipped: 5, lost: 0 };
    },
    log: () => {},
    podsDoneTimeoutMs: 60_000,
    ...over,
  });
}

const run = (r: Reconciler, signal = new AbortController().signal) => r.reconcile('team-a/build', signal);

describe('the webhook signs what it injected', () => {
  it('labels the Job for the watch and signs status and sidecar; the signature verifies', () => {
    const j = injectedJob();
    expect(j.metadata?.labels?.[INJECTED_LABEL]).toBe('true');
    expect(j.metadata?.annotations?.[SIGNATURE_ANNOTATION]).toMatch(/^v2\.[A-Za-z0-9_-]{8}\.[A-Za-z0-9_-]{43}$/);
    const v = verifyInjection(j, KEY);
    expect(v.ok && v.value.env.JOBHARVEST_ENDPOINT).toBe(ENDPOINT);
  });

  it('without a key nothing is signed or labelled (the offline CLI, the goldens)', () => {
    const r = mutateJob(jobFixture('build') as never, { config: durableConfig(), namespace: optedIn('team-a'), now: 0 });
    expect(r.job.metadata?.annotations?.[SIGNATURE_ANNOTATION]).toBeUndefined();
    expect(r.job.metadata?.labels?.[INJECTED_LABEL]).toBeUndefined();
  });

  it('a changed sidecar, a hand-written status or a copied signature does not verify', () => {
    const j = injectedJob();
    const altered = structuredClone(j);
    altered.spec!.template.spec!.initContainers![0]!.env!.push({ name: 'JOBHARVEST_HEADERS', value: 'metadata-flavor=Google' });
    expect(verifyInjection(altered, KEY)).toMatchObject({ ok: false });
    const other = injectedJob({ key: Buffer.from('another-key-another-key-32-bytes') });
    expect(verifyInjection(other, KEY)).toMatchObject({ ok: false });
    const unsigned = structuredClone(j);
    delete unsigned.metadata!.annotations![SIGNATURE_ANNOTATION];
    expect(verifyInjection(unsigned, KEY)).toMatchObject({ ok: false, why: expect.stringContaining('not signed') });
    const moved = structuredClone(j);
    moved.metadata!.namespace = 'team-b';
    expect(verifyInjection(moved, KEY)).toMatchObject({ ok: false });
  });
});

describe('reconcile', () => {
  it("pods refused (403: the namespace's log-reader binding gone with the namespace) are looked at again quietly for a grace period, then a failure", async () => {
    const api = new FakeApi(injectedJob(), []);
    const forbidden = Object.assign(new Error('HTTP-Code: 403'), { code: 403, body: '{"kind":"Status","message":"pods is forbidden: User \\"system:serviceaccount:jobharvest:harvester\\" cannot list resource \\"pods\\"","reason":"Forbidden","code":403}' });
    api.listPods = async () => {
      throw forbidden;
    };
    let clock = Date.now();
    const logs: Array<[string, string]> = [];
    const r = reconciler(api, [], { log: (l, m) => logs.push([l, m]), now: () => clock, retryMs: 2000 });
    expect(await run(r)).toEqual({ kind: 'requeue', afterMs: 2000 });
    clock += 30_000;
    expect(await run(r)).toEqual({ kind: 'requeue', afterMs: 2000 });
    expect(logs.map(([l]) => l)).toEqual(['debug', 'debug']);
    expect(api.patches).toEqual([]);
    // Still refused a minute on: the queue's failure (and its warning).
    clock += 31_000;
    await expect(run(r)).rejects.toBe(forbidden);
    // The usual end: the namespace's Jobs are deleted with it.
    const gone = new FakeApi(injectedJob(), []);
    gone.listPods = api.listPods;
    const r2 = reconciler(gone, [], { log: (l, m) => logs.push([l, m]), now: () => clock });
    expect(await run(r2)).toMatchObject({ kind: 'requeue' });
    gone.readJob = async () => undefined;
    expect(await run(r2)).toEqual({ kind: 'done' });
  });

  it('an Event refused because the namespace is being deleted (403 NamespaceTerminating) or gone (404) is logged at debug; any other failure at warn', async () => {
    const done = encodeTermination({ state: 'complete', mode: 'node', sink: 'http', shipped: 40, unsent: 0, dead_lettered: 0 }, [], ['main/0']);
    // As kube-apiserver answers (client-node's ApiException: code, and the Status as JSON text).
    const terminating = Object.assign(new Error('HTTP-Code: 403'), { code: 403, body: JSON.stringify({ kind: 'Status', message: 'events "build." is forbidden: unable to create new content in namespace team-a because it is being terminated', reason: 'Forbidden', details: { kind: 'events', causes: [{ reason: 'NamespaceTerminating', message: 'namespace team-a is being terminated', field: 'metadata.namespace' }] }, code: 403 }) });
    const gone = Object.assign(new Error('HTTP-Code: 404'), { code: 404, body: JSON.stringify({ kind: 'Status', message: 'namespaces "team-a" not found', reason: 'NotFound', details: { name: 'team-a', kind: 'namespaces' }, code: 404 }) });
    const rbac = Object.assign(new Error('HTTP-Code: 403'), { code: 403, body: JSON.stringify({ kind: 'Status', message: 'events is forbidden: User "system:serviceaccount:jobharvest:harvester" cannot create resource "events"', reason: 'Forbidden', code: 403 }) });
    for (const [err, level] of [[terminating, 'debug'], [gone, 'debug'], [rbac, 'warn']] as const) {
      const api = new FakeApi(injectedJob(), [pod('p1', done)]);
      api.createEvent = async () => {
        throw err;
      };
      const logs: Array<[string, string]> = [];
      expect(await run(reconciler(api, [], { log: (l, m) => logs.push([l, m]) }))).toEqual({ kind: 'done' });
      // The record is written either way.
      expect(api.delivery()).toMatchObject({ shipped: 40 });
      expect(logs.filter(([, m]) => m.startsWith('could not record the delivery Event'))).toEqual([[level, 'could not record the delivery Event; the annotation is there']]);
    }
  });

  it('reports a Job whose sidecars delivered everything, signed, with one Event; a second pass does nothing', async () => {
    const done = encodeTermination({ state: 'complete', mode: 'node', sink: 'http', shipped: 40, unsent: 0, dead_lettered: 0 }, [], ['main/0']);
    const api = new FakeApi(injectedJob(), [pod('p1', done)]);
    const shipped: ShipRequest[] = [];
    expect(await run(reconciler(api, shipped))).toEqual({ kind: 'done' });
    expect(api.delivery()).toEqual({ sink: 'http', pods: 1, shipped: 40, lost: 0, unaccounted: 0 });
    expect(api.events.map((e) => e.reason)).toEqual(['LogsShipped']);
    expect(shipped).toHaveLength(0);
    await run(reconciler(api, shipped));
    expect(api.patches).toHaveLength(1);
  });

  it('holds, ships from the termination message to the approved destination, then releases with the original TTL', async () => {
    const api = new FakeApi(injectedJob(), [pod('p1', unsent(5))]);
    const ttl = api.job.spec?.ttlSecondsAfterFinished;
    const shipped: ShipRequest[] = [];
    expect(await run(reconciler(api, shipped))).toEqual({ kind: 'done' });
    expect(shipped).toHaveLength(1);
    expect(shipped[0]!.destination.name).toBe('default');
    expect(shipped[0]!.message?.runs).toEqual([['main', 0, '2026-01-01T00:00:01Z', 1]]);
    expect(shipped[0]!.limits).toBe(DEFAULT_LIMITS);
    // At the default maximum hold the ship step gets (almost) the whole day to retry.
    expect(shipped[0]!.deadlineMs).toBeGreaterThan(86_000_000);
    expect(api.patches).toHaveLength(2);
    expect(api.job.spec?.ttlSecondsAfterFinished).toBe(ttl);
    expect(api.job.metadata?.annotations?.[HOLD_ANNOTATION]).toBeUndefined();
    expect(api.delivery()).toMatchObject({ shipped: 15, harvested: 5, lost: 0, unaccounted: 0 });
  });

  it('a Job without a TTL (a JobSet\'s child, say) is shipped without a hold: its TTL stays unset, one write, the record as usual', async () => {
    const child = jobFixture('build') as any;
    child.metadata.ownerReferences = [{ apiVersion: 'jobset.x-k8s.io/v1alpha2', kind: 'JobSet', name: 'train', uid: 'js-uid', controller: true }];
    const r = mutateJob(child, { config: durableConfig(), namespace: optedIn('team-a'), signingKey: KEY, now: 0 });
    const j = finished(r.job as V1Job);
    expect(j.spec?.ttlSecondsAfterFinished).toBeUndefined();
    const api = new FakeApi(j, [pod('p1', unsent(5), 'job-uid', j)]);
    const shipped: ShipRequest[] = [];
    expect(await run(reconciler(api, shipped))).toEqual({ kind: 'done' });
    expect(shipped).toHaveLength(1);
    expect(shipped[0]!.deadlineMs).toBeGreaterThan(86_000_000);
    // A hold would have given the Job a TTL, and a JobSet re-creates a child that a TTL deleted.
    expect(api.patches).toHaveLength(1);
    expect(api.patches.some((p) => 'spec' in p)).toBe(false);
    expect(api.job.spec?.ttlSecondsAfterFinished).toBeUndefined();
    expect(api.job.metadata?.annotations?.[HOLD_ANNOTATION]).toBeUndefined();
    expect(api.delivery()).toMatchObject({ shipped: 15, harvested: 5, lost: 0, unaccounted: 0 });
  });

  it('a forged sidecar (status written by hand) is not held or shipped; the delivery record says why', async () => {
    const forged = injectedJob();
    delete forged.metadata!.annotations![SIGNATURE_ANNOTATION];
    const api = new FakeApi(forged, [pod('p1', unsent(5))]);
    const shipped: ShipRequest[] = [];
    await run(reconciler(api, shipped));
    expect(shipped).toHaveLength(0);
    expect(api.patches).toHaveLength(1);
    expect(api.job.metadata?.annotations?.[HOLD_ANNOTATION]).toBeUndefined();
    expect(api.delivery()?.notes?.[0]).toMatch(/^not harvested: the injection is not signed/);
  });

  it('a pod the Job counted as finished but that is gone (evicted, preempted, deleted) is unaccounted, not a clean record', async () => {
    // An evicted pod is deleted as soon as the Job controller has counted it,
    // before the Job is finished: its termination message and logs went with it.
    const j = injectedJob();
    j.status = { ...j.status, conditions: [{ type: 'Failed', status: 'True', lastTransitionTime: new Date(Date.now() - 1000) }], failed: 1 };
    const api = new FakeApi(j, []);
    const shipped: ShipRequest[] = [];
    await run(reconciler(api, shipped));
    expect(shipped).toHaveLength(0);
    expect(api.delivery()).toMatchObject({ pods: 1, shipped: 0, lost: 0, unaccounted: 1, notes: [expect.stringMatching(/^1 pod\(s\) the Job counted .* gone/)] });
    expect(api.events.map((e) => e.reason)).toEqual(['LogsLost']);
    // With one pod still there and harvested, the gone one is still counted.
    const k = injectedJob();
    k.status = { ...k.status, succeeded: 1, failed: 1 };
    const api2 = new FakeApi(k, [pod('p1', unsent(5))]);
    await run(reconciler(api2, []));
    expect(api2.delivery()).toMatchObject({ pods: 2, shipped: 15, harvested: 5, lost: 0, unaccounted: 1 });
  });

  it('a pod gone before its Job finished (evicted) counts what its sidecar reported, as the pod watch last saw it', async () => {
    const j = injectedJob();
    j.status = { ...j.status, conditions: [{ type: 'Failed', status: 'True', lastTransitionTime: new Date(Date.now() - 1000) }], failed: 1 };
    const api = new FakeApi(j, []);
    // Kept for the Job the leader verified, as harvester/main.ts wires it.
    const v = verifyInjection(j, KEY);
    const digest = v.ok ? v.value.sidecarDigest : undefined;
    const reports = new PodReports({ container: 'jobharvest', trusted: (ns, uid) => (ns === 'team-a' && uid === 'job-uid' ? digest : undefined) });
    const evicted = pod('build-abcde', encodeTermination({ state: 'complete', mode: 'node', sink: 'http', shipped: 3900, unsent: 0, dead_lettered: 0 }, [], ['main/0']));
    evicted.status!.phase = 'Failed';
    reports.observe(evicted);
    // A forged one: another sidecar under the name, carrying a count of its
    // choosing. Not its Job's signed sidecar, so it is not even kept.
    const forged = pod('build-fghij', encodeTermination({ state: 'complete', mode: 'node', sink: 'http', shipped: 1_000_000, unsent: 0, dead_lettered: 0 }, [], []));
    forged.spec!.initContainers![0]!.env!.push({ name: 'JOBHARVEST_HEADERS', value: 'x=y' });
    reports.observe(forged);
    expect(reports.count).toBe(1);
    const shipped: ShipRequest[] = [];
    await run(reconciler(api, shipped, { reports }));
    expect(shipped).toHaveLength(0);
    expect(api.delivery()).toMatchObject({ pods: 1, shipped: 3900, lost: 0, unaccounted: 0 });
    expect(api.delivery()?.notes ?? []).toEqual([]);
    expect(reports.count).toBe(1);
    // The record is written: the next look at the Job lets them go.
    await run(reconciler(api, shipped, { reports }));
    expect(reports.count).toBe(0);
  });

  it('a pod lost with its node, still listed: unaccounted, node lost, not waited for and not harvested', async () => {
    // The taint manager evicted it; no kubelet is left to end it, so its
    // sidecar still reads as running, and pods/log has nobody to ask.
    const j = injectedJob();
    j.status = { ...j.status, conditions: [{ type: 'Failed', status: 'True', lastTransitionTime: new Date(Date.now() - 1000) }], failed: 1 };
    const p = pod('build-abcde', undefined);
    p.metadata!.deletionTimestamp = new Date();
    p.status = { ...p.status, phase: 'Running', initContainerStatuses: [{ name: 'jobharvest', image: 'x', imageID: '', ready: true, restartCount: 0, state: { running: {} } }], conditions: [{ type: 'DisruptionTarget', status: 'True', reason: 'DeletionByTaintManager' }] };
    const api = new FakeApi(j, [p]);
    const shipped: ShipRequest[] = [];
    expect(await run(reconciler(api, shipped))).toEqual({ kind: 'done' });
    expect(shipped).toHaveLength(0);
    expect(api.delivery()).toMatchObject({ pods: 1, shipped: 0, unaccounted: 1, notes: ['build-abcde: unaccounted: node lost'] });
  });

  it('a pod lost with its node and gone: the NodeNotReady Event names it; other Events change nothing', async () => {
    const j = injectedJob();
    j.metadata!.creationTimestamp = new Date(Date.now() - 60_000);
    j.status = { ...j.status, conditions: [{ type: 'Failed', status: 'True', lastTransitionTime: new Date(Date.now() - 1000) }], failed: 2 };
    const api = new FakeApi(j, []);
    const ev = (name: string, uid: string, agoMs = 10_000): CoreV1Event => ({
      metadata: { name: `${name}.1` },
      involvedObject: { kind: 'Pod', name, uid, namespace: 'team-a' },
      reason: 'NodeNotReady',
      message: 'Node is not ready',
      lastTimestamp: new Date(Date.now() - agoMs),
    });
    api.nodeEvents = [
      ev('build-abcde', 'u1'),
      ev('build-abcde', 'u1'), // the same pod twice
      ev('builder-xyz12', 'u2'), // another Job's pod
      ev('build-fghij', 'u3', 120_000), // before this Job existed: a Job of the same name before it
    ];
    await run(reconciler(api, []));
    expect(api.delivery()).toMatchObject({ pods: 2, unaccounted: 2, notes: ['build-abcde: unaccounted: node lost', expect.stringMatching(/^1 pod\(s\) the Job counted .* gone/)] });
    // The Events cannot be read: the counts stay, the cause is not named.
    const k = injectedJob();
    k.status = { ...k.status, conditions: [{ type: 'Failed', status: 'True', lastTransitionTime: new Date(Date.now() - 1000) }], failed: 1 };
    const api2 = new FakeApi(k, []);
    api2.listNodeNotReadyEvents = async () => {
      throw new Error('forbidden');
    };
    await run(reconciler(api2, []));
    expect(api2.delivery()).toMatchObject({ pods: 1, unaccounted: 1, notes: [expect.stringMatching(/^1 pod\(s\) .* gone/)] });
  });

  it('a pod that only carries the controller-uid label is not the Job\'s: ignored and said so', async () => {
    const api = new FakeApi(injectedJob(), [pod('bare', unsent(5), null), pod('other', unsent(5), 'someone-else')]);
    const shipped: ShipRequest[] = [];
    await run(reconciler(api, shipped));
    expect(shipped).toHaveLength(0);
    expect(api.delivery()).toMatchObject({ pods: 0, notes: [expect.stringContaining('2 pod(s)')] });
  });

  it("the pod's sidecar as admission leaves it (the ServiceAccount token mount, the API server's defaults, its image pinned to a digest) is still the signed one", async () => {
    const j = injectedJob();
    const p = pod('p1', unsent(5), 'job-uid', j);
    const c = p.spec!.initContainers![0]!;
    c.image = 'docker.io/library/jobharvest:0.1.0@sha256:' + 'a'.repeat(64);
    c.volumeMounts = [...(c.volumeMounts ?? []), { name: 'kube-api-access-x7k2p', mountPath: '/var/run/secrets/kubernetes.io/serviceaccount', readOnly: true }];
    p.spec!.volumes = [...(p.spec!.volumes ?? []), serviceAccountVolume('kube-api-access-x7k2p')];
    c.terminationMessagePath = '/dev/termination-log';
    c.terminationMessagePolicy = 'File';
    c.securityContext = { ...c.securityContext, runAsUser: 1000, seccompProfile: { type: 'Localhost', localhostProfile: 'policy.json' } };
    c.resources = { requests: { cpu: '1', memory: '1Gi' }, limits: { cpu: '2', memory: '2Gi' } };
    const api = new FakeApi(j, [p]);
    const shipped: ShipRequest[] = [];
    await run(reconciler(api, shipped));
    expect(shipped).toHaveLength(1);
    expect(api.delivery()?.notes).toBeUndefined();
  });

  it("a pod whose sidecar another admission changed in what it runs or where it sends (env, a mount, another repository) is not the signed one", async () => {
    // Once, a webhook's env (proxies, APM agents) was left out of the digest;
    // HTTP_PROXY decides where the sidecar sends, so now it counts.
    const changes: Array<[string, (c: V1Container, p: V1Pod) => void]> = [
      ['HTTP_PROXY', (c) => c.env!.push({ name: 'HTTP_PROXY', value: 'http://proxy:3128' })],
      ['an APM agent variable', (c) => c.env!.push({ name: 'DD_AGENT_HOST', valueFrom: { fieldRef: { fieldPath: 'status.hostIP' } } })],
      ['a mount of its own', (c, p) => {
        c.volumeMounts!.push({ name: 'certs', mountPath: '/etc/ssl/certs' });
        p.spec!.volumes!.push({ name: 'certs', emptyDir: {} });
      }],
      ['a token mount not as the ServiceAccount plugin adds it', (c, p) => {
        c.volumeMounts!.push({ name: 'kube-api-access-x7k2p', mountPath: '/var/run/secrets/kubernetes.io/serviceaccount', readOnly: true });
        p.spec!.volumes!.push({ name: 'kube-api-access-x7k2p', emptyDir: {} });
      }],
      ['a mirror registry', (c) => (c.image = 'mirror.example/library/jobharvest:0.1.0')],
      ['a termination message from the logs', (c) => (c.terminationMessagePolicy = 'FallbackToLogsOnError')],
    ];
    for (const [what, change] of changes) {
      const j = injectedJob();
      const p = pod('p1', unsent(5), 'job-uid', j);
      change(p.spec!.initContainers![0]!, p);
      const api = new FakeApi(j, [p]);
      const shipped: ShipRequest[] = [];
      await run(reconciler(api, shipped));
      expect(shipped, what).toHaveLength(0);
      expect(api.delivery(), what).toMatchObject({ pods: 0, notes: [expect.stringContaining('not running the sidecar jobharvest rendered')] });
    }
  });

  it('a pod the Job controls but whose sidecar is not the signed one (an adopted orphan) is not the Job\'s either', async () => {
    const j = injectedJob();
    const adopted = pod('adopted', unsent(5));
    adopted.spec = { containers: [], initContainers: [{ name: 'jobharvest', image: 'busybox', env: [{ name: 'JOBHARVEST_ENDPOINT', value: 'http://169.254.169.254/' }] }] };
    const genuine = pod('genuine', unsent(5), 'job-uid', j);
    const api = new FakeApi(j, [adopted, genuine]);
    const shipped: ShipRequest[] = [];
    await run(reconciler(api, shipped));
    expect(shipped.map((r) => r.pod.metadata?.name)).toEqual(['genuine']);
    expect(api.delivery()).toMatchObject({ pods: 1, notes: [expect.stringContaining('1 pod(s)')] });
  });

  it('a sink endpoint the operator did not approve: nothing sent, no hold, and the record says why', async () => {
    const j = injectedJob({ endpoint: 'http://169.254.169.254/latest/meta-data' });
    const api = new FakeApi(j, [pod('p1', unsent(5), 'job-uid', j)]);
    const shipped: ShipRequest[] = [];
    await run(reconciler(api, shipped));
    expect(shipped).toHaveLength(0);
    expect(api.job.metadata?.annotations?.[HOLD_ANNOTATION]).toBeUndefined();
    expect(api.delivery()).toMatchObject({ lost: 5, notes: [expect.stringContaining('not an approved destination')] });
  });

  it('a delivery record or hold set in advance changes nothing', async () => {
    const j = injectedJob();
    j.metadata!.annotations![DELIVERY_ANNOTATION] = JSON.stringify({ sink: 'http', pods: 1, shipped: 999, lost: 0, unaccounted: 0 });
    j.metadata!.annotations![HOLD_ANNOTATION] = JSON.stringify({ originalTtl: null, since: new Date().toISOString(), maxHoldSeconds: 600 });
    const ttl = j.spec?.ttlSecondsAfterFinished;
    const api = new FakeApi(j, [pod('p1', unsent(5))]);
    const shipped: ShipRequest[] = [];
    await run(reconciler(api, shipped));
    expect(shipped).toHaveLength(1);
    // The release restores the Job's real TTL, not the forged `null`.
    expect(api.job.spec?.ttlSecondsAfterFinished).toBe(ttl);
    expect(api.delivery()).toMatchObject({ shipped: 15, harvested: 5 });
  });

  it('termination counts a tenant could write (negative, huge, malformed runs) count as no report', async () => {
    const bad = [
      JSON.stringify({ v: 1, state: 'incomplete', mode: 'node', sink: 'http', shipped: -2000, unsent: 0, dead_lettered: -10, runs: [], done: [] }),
      JSON.stringify({ v: 1, state: 'incomplete', mode: 'node', sink: 'http', shipped: 1e308, unsent: 0, dead_lettered: 0, runs: [], done: [] }),
      JSON.stringify({ v: 1, state: 'incomplete', mode: 'node', sink: 'http', shipped: 1, unsent: 0, dead_lettered: 0, runs: [5], done: [] }),
    ];
    for (const message of bad) {
      const api = new FakeApi(injectedJob(), [pod('p1', message)]);
      const shipped: ShipRequest[] = [];
      await run(reconciler(api, shipped));
      const d = api.delivery()!;
      expect(d.shipped).toBe(5);
      expect(d.lost).toBe(0);
      expect(Number.isSafeInteger(d.shipped)).toBe(true);
      // The pod is harvested from the start, since its positions are unknown.
      expect(shipped[0]!.message).toBeUndefined();
      expect(api.events[0]!.message).not.toMatch(/-|Infinity/);
    }
  });

  it('leadership lost mid-harvest: nothing more is written', async () => {
    const api = new FakeApi(injectedJob(), [pod('p1', unsent(5))]);
    const abort = new AbortController();
    const r = reconciler(api, [], {
      ship: async () => {
        abort.abort();
        return { missing: 5, shipped: 2, lost: 3 };
      },
    });
    await r.reconcile('team-a/build', abort.signal);
    // The hold only: the next leader finds it and harvests again.
    expect(api.patches).toHaveLength(1);
    expect(api.job.metadata?.annotations?.[HOLD_ANNOTATION]).toBeDefined();
    expect(api.job.metadata?.annotations?.[DELIVERY_ANNOTATION]).toBeUndefined();
  });

  it('a Job of thousands of pods without a report gets a bounded record: a few notes, the rest counted', async () => {
    const j = injectedJob();
    const pods = Array.from({ length: 2000 }, (_, i) => pod(`p${i}-${'x'.repeat(200)}`, undefined, 'job-uid', j));
    const api = new FakeApi(j, pods);
    await run(reconciler(api, [], { maxHoldSeconds: 0 }));
    const d = api.delivery()!;
    expect(d).toMatchObject({ pods: 2000, unaccounted: 2000 });
    expect(d.notes).toHaveLength(MAX_NOTES + 1);
    expect(d.notes!.at(-1)).toBe(`and ${2000 - MAX_NOTES} more`);
    expect(Buffer.byteLength(api.job.metadata!.annotations![DELIVERY_ANNOTATION]!)).toBeLessThan(8 * 1024);
  });

  it('a replica past its renew deadline writes nothing, even before its signal is aborted', async () => {
    const api = new FakeApi(injectedJob(), [pod('p1', unsent(5))]);
    const shipped: ShipRequest[] = [];
    const r = reconciler(api, shipped, { mayWrite: () => false });
    await r.reconcile('team-a/build', new AbortController().signal);
    expect(api.patches).toHaveLength(0);
    expect(shipped).toHaveLength(0);
  });

  it("rewrites the logs-url with the Job's uid and real end time once it is done", async () => {
    const j = injectedJob();
    j.metadata!.creationTimestamp = new Date('2026-01-01T00:00:00Z');
    j.status!.conditions![0]!.lastTransitionTime = new Date('2026-01-01T00:05:00Z');
    j.metadata!.annotations!['jobharvest.io/logs-url'] = 'https://evil.example/phish';
    const done = encodeTermination({ state: 'complete', mode: 'node', sink: 'http', shipped: 1, unsent: 0, dead_lettered: 0 }, [], ['main/0']);
    const api = new FakeApi(j, [pod('p1', done)]);
    const r = reconciler(api, [], {
      logsUrlTemplate: 'https://grafana.example/explore?ns={namespace}&job={job}&uid={uid}&from={from}&to={to}',
      podsDoneTimeoutMs: 0,
    });
    await r.reconcile('team-a/build', new AbortController().signal);
    expect(api.job.metadata?.annotations?.['jobharvest.io/logs-url']).toBe(`https://grafana.example/explore?ns=team-a&job=build&uid=job-uid&from=${Date.parse('2026-01-01T00:00:00Z')}&to=${Date.parse('2026-01-01T00:05:00Z')}`);
  });

  it('a Job reported by this harvester stays reported; one it did not sign is reported again', () => {
    const j = injectedJob();
    const d = { sink: 'http', pods: 1, shipped: 1, lost: 0, unaccounted: 0 };
    j.metadata!.annotations![DELIVERY_ANNOTATION] = encodeDeliveryRecord(j, KEY, d);
    expect(deliveryRecordOf(j, KEY)).toEqual(d);
  });
});

describe('reconcile across a key rotation', () => {
  const NEW = Buffer.from('the-new-key-the-new-key-32-bytes');
  const OLD = KEY;

  /** A Job injected and held under OLD: the first harvest is cut short (leadership lost) after the hold. */
  async function heldUnderOld(): Promise<FakeApi> {
    const j = injectedJob({ key: OLD });
    const api = new FakeApi(j, [pod('p1', unsent(5), 'job-uid', j)]);
    const lost = new AbortController();
    await reconciler(api, [], {
      key: OLD,
      ship: async () => {
        lost.abort();
        return { missing: 5, shipped: 0, lost: 0 };
      },
    }).reconcile('team-a/build', lost.signal);
    expect(JSON.parse(api.job.metadata!.annotations![HOLD_ANNOTATION]!)).toMatchObject({ sig: expect.stringMatching(new RegExp(`^v2\\.${keyId(OLD)}\\.`)) });
    expect(api.job.metadata?.annotations?.[DELIVERY_ANNOTATION]).toBeUndefined();
    return api;
  }

  it('a Job injected and held under the previous key is shipped and released; the record is signed with the current key', async () => {
    const api = await heldUnderOld();
    const writes = api.patches.length;
    const shipped: ShipRequest[] = [];
    expect(await run(reconciler(api, shipped, { key: keyRing(NEW, [OLD]) }))).toEqual({ kind: 'done' });
    expect(shipped).toHaveLength(1);
    // The old hold is the harvester's own: not placed again, released in one write.
    expect(api.patches.length - writes).toBe(1);
    expect(api.job.spec?.ttlSecondsAfterFinished).toBe(injectedJob().spec?.ttlSecondsAfterFinished);
    expect(api.job.metadata?.annotations?.[HOLD_ANNOTATION]).toBeUndefined();
    const raw = api.job.metadata!.annotations![DELIVERY_ANNOTATION]!;
    expect((JSON.parse(raw) as { sig: string }).sig.split('.')[1]).toBe(keyId(NEW));
    expect(deliveryRecordOf(api.job, NEW)).toMatchObject({ shipped: 15, harvested: 5, lost: 0, unaccounted: 0 });
    expect(deliveryRecordOf(api.job, OLD)).toBeUndefined();
    expect(api.events.map((e) => e.reason)).toEqual(['LogsShipped']);
  });

  it('a Job recorded under the previous key stays recorded: nothing is written again', async () => {
    const j = injectedJob({ key: OLD });
    j.metadata!.annotations![DELIVERY_ANNOTATION] = encodeDeliveryRecord(j, OLD, { sink: 'http', pods: 1, shipped: 1, lost: 0, unaccounted: 0 });
    const api = new FakeApi(j, [pod('p1', unsent(5), 'job-uid', j)]);
    const shipped: ShipRequest[] = [];
    expect(await run(reconciler(api, shipped, { key: keyRing(NEW, [OLD]) }))).toEqual({ kind: 'done' });
    expect(shipped).toHaveLength(0);
    expect(api.patches).toHaveLength(0);
  });

  it('once the previous key is dropped, a Job injected and recorded under it keeps its record: nothing is written over it', async () => {
    const j = injectedJob({ key: OLD });
    const record = encodeDeliveryRecord(j, OLD, { sink: 'http', pods: 1, shipped: 15, lost: 0, unaccounted: 0, harvested: 5 });
    j.metadata!.annotations![DELIVERY_ANNOTATION] = record;
    const api = new FakeApi(j, [pod('p1', unsent(5), 'job-uid', j)]);
    expect(await run(reconciler(api, [], { key: keyRing(NEW) }))).toEqual({ kind: 'done' });
    expect(api.patches).toHaveLength(0);
    expect(api.job.metadata?.annotations?.[DELIVERY_ANNOTATION]).toBe(record);
  });

  it('a record naming a key the harvester does not hold silences nothing on a Job it can verify, nor on one injected under another key', async () => {
    // Injected under the current key, with a record a tenant wrote under a made-up key id: harvested as usual.
    const ours = injectedJob({ key: NEW });
    ours.metadata!.annotations![DELIVERY_ANNOTATION] = JSON.stringify({ sink: 'http', pods: 1, shipped: 999, lost: 0, unaccounted: 0, sig: 'v2.zzzzzzzz.forged' });
    const api = new FakeApi(ours, [pod('p1', unsent(5), 'job-uid', ours)]);
    const shipped: ShipRequest[] = [];
    await run(reconciler(api, shipped, { key: keyRing(NEW) }));
    expect(shipped).toHaveLength(1);
    expect(deliveryRecordOf(api.job, NEW)).toMatchObject({ shipped: 15, harvested: 5 });
    // Injected under a dropped key, recorded under yet another id: reported.
    const other = injectedJob({ key: OLD });
    other.metadata!.annotations![DELIVERY_ANNOTATION] = JSON.stringify({ sink: 'http', pods: 1, shipped: 999, lost: 0, unaccounted: 0, sig: 'v2.zzzzzzzz.forged' });
    const api2 = new FakeApi(other, [pod('p1', unsent(5), 'job-uid', other)]);
    await run(reconciler(api2, [], { key: keyRing(NEW) }));
    expect(deliveryRecordOf(api2.job, NEW)?.notes?.[0]).toMatch(/^not harvested: the injection was signed with another signing key/);
  });

  it('once the previous key is dropped, a Job injected under it is reported as signed by a key not held: not shipped, not held', async () => {
    const j = injectedJob({ key: OLD });
    const api = new FakeApi(j, [pod('p1', unsent(5), 'job-uid', j)]);
    const shipped: ShipRequest[] = [];
    await run(reconciler(api, shipped, { key: keyRing(NEW) }));
    expect(shipped).toHaveLength(0);
    expect(api.patches).toHaveLength(1);
    expect(api.job.metadata?.annotations?.[HOLD_ANNOTATION]).toBeUndefined();
    const d = deliveryRecordOf(api.job, NEW)!;
    expect(d).toMatchObject({ sink: 'unknown', shipped: 0, unaccounted: 1 });
    expect(d.notes?.[0]).toContain(`not harvested: the injection was signed with another signing key (key id ${keyId(OLD)}, this one's is ${keyId(NEW)})`);
  });
});

describe('a Job that missed injection', () => {
  /** An opted-in namespace whose Jobs would ship to the approved destination. */
  const NS = optedIn('team-a', { annotations: { 'jobharvest.io/sink': 'http', 'jobharvest.io/endpoint': ENDPOINT } });
  const CONFIG = durableConfig();
  const missedCheck = (ns: NamespaceMeta | undefined = NS) => (j: V1Job) => missedInjection(j, ns, CONFIG);

  /** A Job as the API server stores it when the webhook was not there to patch it: no sidecar, no label, no status. */
  function uninjected(over: { ttl?: number; annotations?: Record<string, string>; labels?: Record<string, string> } = {}): V1Job {
    const j = jobFixture('build') as V1Job;
    j.metadata = { ...j.metadata, ...(over.annotations ? { annotations: over.annotations } : {}), ...(over.labels ? { labels: over.labels } : {}) };
    if (over.ttl !== undefined) j.spec = { ...j.spec!, ttlSecondsAfterFinished: over.ttl };
    return { ...finished(j), status: { conditions: [{ type: 'Complete', status: 'True', lastTransitionTime: new Date(Date.now() - 1000) }], succeeded: 1 } };
  }

  /** A pod of that Job: no sidecar in it, so no termination report either. */
  function plainPod(name: string, from: V1Job, owner: string | null = 'job-uid'): V1Pod {
    return {
      metadata: {
        name,
        namespace: 'team-a',
        uid: `${name}-uid`,
        labels: { 'batch.kubernetes.io/controller-uid': 'job-uid', 'batch.kubernetes.io/job-name': 'build' },
        ...(owner ? { ownerReferences: [{ apiVersion: 'batch/v1', kind: 'Job', name: 'build', uid: owner, controller: true }] } : {}),
      },
      spec: structuredClone(from.spec!.template.spec!),
      status: { phase: 'Succeeded', containerStatuses: [{ name: 'main', image: 'x', imageID: '', ready: false, restartCount: 0, state: { terminated: { exitCode: 0 } } }] },
    };
  }

  it("is told by the webhook's own decide: missed when it would have been injected, not when skipped on purpose", () => {
    expect(missedInjection(uninjected(), NS, CONFIG)).toEqual({ missed: true, sink: 'http', endpoint: ENDPOINT });
    // A label anyone can set hides nothing: without a status the Job is judged as it is.
    expect(missedInjection(uninjected({ labels: { [INJECTED_LABEL]: 'true' }, annotations: { [SIGNATURE_ANNOTATION]: 'v2.forged' } }), NS, CONFIG).missed).toBe(true);
    const skipped: Array<[string, V1Job, NamespaceMeta | undefined, string]> = [
      ['opted out by the Job', uninjected({ annotations: { 'jobharvest.io/inject': 'false' } }), NS, 'opted-out-job'],
      ['managed by another controller', { ...uninjected(), spec: { ...uninjected().spec!, managedBy: 'kueue.x-k8s.io/multikueue' } }, NS, 'managed-elsewhere'],
      ['with a status (went through the webhook, or forged: reported as an injection that does not verify)', uninjected({ annotations: { 'jobharvest.io/status': '{}' } }), NS, 'injection status'],
      ['in a namespace not opted in', uninjected(), undefined, 'not opted in'],
      ['in a namespace labelled disabled', uninjected(), optedIn('team-a', { labels: { 'jobharvest.io/inject': 'disabled' } }), 'not opted in'],
      ['in an excluded namespace', uninjected(), optedIn('kube-system'), 'not opted in'],
    ];
    for (const [what, j, ns, why] of skipped) {
      const r = missedInjection(j, ns, CONFIG);
      expect(r.missed, what).toBe(false);
      expect(r.missed === false && r.why, what).toContain(why);
    }
  });

  it('with a TTL of its own: held by the same hold, every line of its own pods shipped from the start, the TTL put back, the record and an InjectionMissed Event say so', async () => {
    const j = uninjected({ ttl: 30 });
    const api = new FakeApi(j, [plainPod('p1', j), plainPod('p2', j), plainPod('stray', j, null)]);
    const shipped: ShipRequest[] = [];
    let counted = 0;
    expect(await run(reconciler(api, shipped, { missed: missedCheck(), onMissed: () => counted++, result: { missing: 40, shipped: 40, lost: 0 } }))).toEqual({ kind: 'done' });
    // Only the Job's own pods (controller ownerReference), each from its start: there is no report to resume from.
    expect(shipped.map((r) => [r.pod.metadata?.name, r.message, r.sidecar, r.destination.name])).toEqual([
      ['p1', undefined, 'jobharvest', 'default'],
      ['p2', undefined, 'jobharvest', 'default'],
    ]);
    const [hold, release] = api.patches as Array<{ spec?: { ttlSecondsAfterFinished: number | null }; metadata: { annotations: Record<string, string | null> } }>;
    expect(api.patches).toHaveLength(2);
    expect(hold!.spec!.ttlSecondsAfterFinished).toBeGreaterThanOrEqual(86_400);
    expect(JSON.parse(hold!.metadata.annotations[HOLD_ANNOTATION]!)).toMatchObject({ originalTtl: 30 });
    expect(release!.spec!.ttlSecondsAfterFinished).toBe(30);
    expect(api.job.spec?.ttlSecondsAfterFinished).toBe(30);
    expect(api.job.metadata?.annotations?.[HOLD_ANNOTATION]).toBeUndefined();
    expect(api.delivery()).toEqual({ sink: 'http', pods: 2, shipped: 80, lost: 0, unaccounted: 0, harvested: 80, injection: 'missed', notes: [expect.stringMatching(/^1 pod\(s\) carry the Job's label but are not its own/)] });
    expect(api.events.map((e) => [e.type, e.reason])).toEqual([['Warning', 'InjectionMissed']]);
    expect(api.events[0]!.message).toMatch(/^created without the log sidecar .*; 80 lines from 2 pods shipped to http by the harvester/);
    expect(counted).toBe(1);
    // Recorded: a second pass writes nothing and counts nothing.
    await run(reconciler(api, shipped, { missed: missedCheck(), onMissed: () => counted++ }));
    expect(api.patches).toHaveLength(2);
    expect(counted).toBe(1);
  });

  it("without a TTL: no TTL of the harvester's own, one write, the record as usual", async () => {
    const j = uninjected();
    const api = new FakeApi(j, [plainPod('p1', j)]);
    const shipped: ShipRequest[] = [];
    await run(reconciler(api, shipped, { missed: missedCheck(), result: { missing: 7, shipped: 7, lost: 0 } }));
    expect(shipped).toHaveLength(1);
    expect(api.patches).toHaveLength(1);
    expect(api.patches.some((p) => 'spec' in p)).toBe(false);
    expect(api.job.spec?.ttlSecondsAfterFinished).toBeUndefined();
    expect(api.delivery()).toEqual({ sink: 'http', pods: 1, shipped: 7, lost: 0, unaccounted: 0, harvested: 7, injection: 'missed' });
  });

  it('a forged injected label does not hide it: found through the injected watch, shipped and recorded as missed', async () => {
    const j = uninjected({ ttl: 30, labels: { [INJECTED_LABEL]: 'true' } });
    const api = new FakeApi(j, [plainPod('p1', j)]);
    const shipped: ShipRequest[] = [];
    await run(reconciler(api, shipped, { missed: missedCheck() }));
    expect(shipped).toHaveLength(1);
    expect(api.delivery()).toMatchObject({ shipped: 5, harvested: 5, injection: 'missed' });
  });

  it('an endpoint the operator did not approve: nothing sent, no hold, and the record says why', async () => {
    const ns = optedIn('team-a', { annotations: { 'jobharvest.io/sink': 'http', 'jobharvest.io/endpoint': 'http://elsewhere.example/ingest' } });
    const j = uninjected({ ttl: 30 });
    const api = new FakeApi(j, [plainPod('p1', j)]);
    const shipped: ShipRequest[] = [];
    await run(reconciler(api, shipped, { missed: missedCheck(ns) }));
    expect(shipped).toHaveLength(0);
    expect(api.patches).toHaveLength(1);
    expect(api.job.spec?.ttlSecondsAfterFinished).toBe(30);
    expect(api.delivery()).toMatchObject({ pods: 1, shipped: 0, unaccounted: 1, injection: 'missed', notes: [expect.stringMatching(/is not an approved destination/)] });
  });

  it('skipped on purpose (opted out): no harvest, no InjectionMissed; reported as before, as an injection that does not verify', async () => {
    const j = uninjected({ ttl: 30, labels: { [INJECTED_LABEL]: 'true' }, annotations: { 'jobharvest.io/inject': 'false' } });
    const api = new FakeApi(j, [plainPod('p1', j)]);
    const shipped: ShipRequest[] = [];
    let counted = 0;
    await run(reconciler(api, shipped, { missed: missedCheck(), onMissed: () => counted++ }));
    expect(shipped).toHaveLength(0);
    expect(counted).toBe(0);
    expect(api.delivery()?.injection).toBeUndefined();
    expect(api.delivery()?.notes?.[0]).toMatch(/^not harvested:/);
    expect(api.events.map((e) => e.reason)).toEqual(['LogsLost']);
  });
});
