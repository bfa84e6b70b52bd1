/**
 * Kueue v0.17 as a real controller beside jobharvest, on the real control
 * plane with the test kubelet, the webhook, the harvester and VictoriaLogs.
 * Kueue's controller-manager and webhooks run from the pinned module
 * (test/harness/kueue), with a Topology, a ResourceFlavor (node labels,
 * a toleration, topology-aware scheduling), a ClusterQueue, a LocalQueue
 * and two WorkloadPriorityClasses. Jobs carry the LocalQueue's label, so
 * Kueue's webhook suspends them at CREATE, its controller admits them and
 * unsuspends them (adding node selectors, tolerations, labels, annotations
 * and a scheduling gate to the template), and preempts a lower-priority Job
 * for a higher-priority one (suspending it and restoring its template).
 */
import { PatchStrategy, setHeaderOptions, Watch, type V1Container, type V1Job, type V1Pod, type V1PodTemplateSpec } from '@kubernetes/client-node';
import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyFromText, type SigningKey } from '../../src/contract/signature.ts';
import { STATUS_ANNOTATION } from '../../src/contract/harvest.ts';
import { DELIVERY_ANNOTATION, type DeliveryRecord } from '../../harvester/report.ts';
import { verifyInjection } from '../../harvester/trust.ts';
import { useCluster, waitFor } from '../harness/cluster/client.ts';
import { followJob } from '../harness/kubelet/follow-job.ts';
import { shellJob, Stack } from '../harness/kubelet/stack.ts';
import { Kueue, PRIORITY_LABEL, QUEUE_LABEL } from '../harness/kueue/kueue.ts';

const cluster = useCluster();
const RUN = Kueue.suffix();
const TTL = 10;
const POOL_LABEL = 'jobharvest.test/kueue-pool';
const TOLERATION = { key: 'jobharvest.test/kueue', operator: 'Exists', effect: 'NoSchedule' };
const N = {
  topology: `kq-topology-${RUN}`,
  flavor: `kq-flavor-${RUN}`,
  cq: `kq-cq-${RUN}`,
  low: `kq-low-${RUN}`,
  high: `kq-high-${RUN}`,
  lq: 'kq-lq',
};
/** The ClusterQueue's nominal quota: one of the Jobs below fits, two do not. */
const QUOTA = { cpu: '600m', memory: '1Gi' };
const BURSTABLE = { requests: { cpu: '400m', memory: '128Mi' } };
const GUARANTEED = { requests: { cpu: '400m', memory: '128Mi' }, limits: { cpu: '400m', memory: '128Mi' } };

let stack: Stack;
let kueue: Kueue;
let ns: string;
let key: SigningKey;
let stopPods: (() => void) | undefined;

interface Row {
  job: string;
  injected: string;
  ttl: string;
  runs: number;
  written: number;
  received: number;
  duplicates: number;
  delivery: string;
  qos: string;
}
const table: Row[] = [];
const figures: string[] = [];
const timings: string[] = [];

beforeAll(async () => {
  const started = Date.now();
  stack = await Stack.start({ info: cluster.info, name: 'kq', kubelet: { restartBackoffMs: 300 } });
  key = keyFromText(readFileSync(stack.harvesterFiles.signingKeyFile));
  const k0 = Date.now();
  kueue = await Kueue.start({ info: cluster.info, name: `kq-${RUN}` });
  timings.push(`Kueue ${kueue.version} started (CRDs, manager ready, webhooks registered) in ${((Date.now() - k0) / 1000).toFixed(1)} s`);
  // The flavor's node: the test kubelet's, with the flavor's label.
  await stack.core.patchNode({ name: stack.kubelet.nodeName, body: { metadata: { labels: { [POOL_LABEL]: RUN } } } }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
  await kueue.createClusterObject('topologies', { apiVersion: 'kueue.x-k8s.io/v1beta2', kind: 'Topology', metadata: { name: N.topology }, spec: { levels: [{ nodeLabel: 'kubernetes.io/hostname' }] } });
  await kueue.createClusterObject('resourceflavors', {
    apiVersion: 'kueue.x-k8s.io/v1beta2',
    kind: 'ResourceFlavor',
    metadata: { name: N.flavor },
    spec: { nodeLabels: { [POOL_LABEL]: RUN }, tolerations: [TOLERATION], topologyName: N.topology },
  });
  await kueue.createClusterObject('clusterqueues', {
    apiVersion: 'kueue.x-k8s.io/v1beta2',
    kind: 'ClusterQueue',
    metadata: { name: N.cq },
    spec: {
      namespaceSelector: { matchLabels: kueue.namespaceLabel },
      preemption: { withinClusterQueue: 'LowerPriority' },
      resourceGroups: [{ coveredResources: ['cpu', 'memory'], flavors: [{ name: N.flavor, resources: [{ name: 'cpu', nominalQuota: QUOTA.cpu }, { name: 'memory', nominalQuota: QUOTA.memory }] }] }],
    },
  });
  await kueue.createClusterObject('workloadpriorityclasses', { apiVersion: 'kueue.x-k8s.io/v1beta2', kind: 'WorkloadPriorityClass', metadata: { name: N.low }, value: 100 });
  await kueue.createClusterObject('workloadpriorityclasses', { apiVersion: 'kueue.x-k8s.io/v1beta2', kind: 'WorkloadPriorityClass', metadata: { name: N.high }, value: 1000 });
  ns = await stack.namespace('q', { ttlSeconds: TTL });
  await stack.core.patchNamespace({ name: ns, body: { metadata: { labels: kueue.namespaceLabel } } }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
  stopPods = recordPods();
  await kueue.createNamespaced(ns, 'localqueues', { apiVersion: 'kueue.x-k8s.io/v1beta2', kind: 'LocalQueue', metadata: { name: N.lq, namespace: ns }, spec: { clusterQueue: N.cq } });
  await waitFor('the ClusterQueue active', async () => {
    const cq = await kueue.readClusterObject('clusterqueues', N.cq);
    return condition(cq, 'Active') === 'True' ? true : undefined;
  }, { timeoutMs: 30_000 });
  timings.push(`set-up (stack, Kueue, queues) in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}, 1_800_000 /* a first build of Kueue on a cold cache; `npm run test:e2e` builds it before */);

afterAll(async () => {
  console.log(`Kueue ${kueue?.version ?? '(not started)'} with jobharvest`);
  for (const t of timings) console.log(`  ${t}`);
  for (const f of figures) console.log(`  ${f}`);
  console.log('  job: injected / TTL by jobharvest / runs / lines written / received / duplicates / delivery record / QoS before -> after');
  for (const r of table) console.log(`  ${r.job}: ${r.injected} / ${r.ttl} / ${r.runs} / ${r.written} / ${r.received} / ${r.duplicates} / ${r.delivery} / ${r.qos}`);
  stopPods?.();
  for (const f of readdirSync(tmpdir()).filter((x) => x.startsWith(`jh-kueue-${RUN}-`))) rmSync(join(tmpdir(), f), { force: true });
  // Jobs first, while Kueue still runs and releases its finalizers.
  if (ns) await stack.batch.deleteCollectionNamespacedJob({ namespace: ns, propagationPolicy: 'Foreground' }).catch(() => undefined);
  if (ns && kueue) await waitFor('the Workloads gone', async () => ((await kueue.listNamespaced(ns, 'workloads')).length === 0 ? true : undefined), { timeoutMs: 30_000 }).catch(() => undefined);
  await kueue?.stop();
  await stack?.stop();
}, 180_000);

type Obj = Record<string, any>;

function condition(o: Obj, type: string): string | undefined {
  return (o.status?.conditions as Array<{ type: string; status: string }> | undefined)?.find((c) => c.type === type)?.status;
}

/** A Job for the LocalQueue: `sh -c script` in `main`, with the given requests and limits. */
function queuedJob(name: string, o: { script: string; resources: V1Container['resources']; priority?: string; backoffLimit?: number; annotations?: Record<string, string> }): V1Job {
  const job = shellJob(name, { script: o.script, backoffLimit: o.backoffLimit ?? 0, env: [{ name: 'S', value: `${join(tmpdir(), `jh-kueue-${RUN}-${name}`)}` }] });
  job.metadata = { name, labels: { [QUEUE_LABEL]: N.lq, ...(o.priority ? { [PRIORITY_LABEL]: o.priority } : {}) }, annotations: o.annotations };
  job.spec!.template.spec!.containers[0]!.resources = o.resources;
  return job;
}

/** Prints `n` lines `<tag> run <r> line <i>`, where r counts this Job's runs (in a file on the node, as the pods of one Job share it here). */
function linesPerRun(tag: string, n: number, after = ''): string {
  return `r=$(cat "$S" 2>/dev/null || echo 0); r=$((r+1)); echo $r > "$S"; i=1; while [ $i -le ${n} ]; do echo "${tag} run $r line $i"; i=$((i+1)); done; ${after}`;
}

/** The webhook's decisions for a Job of the namespace, from its log: every review the API server sent it. */
function reviewsOf(name: string): string[] {
  return readFileSync(stack.webhook.logPath, 'utf8')
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { namespace?: string; name?: string; decision?: string; reason?: string })
    .filter((l) => l.namespace === ns && l.name === name && l.decision)
    .map((l) => (l.decision === 'inject' ? 'inject' : `skip (${l.reason})`));
}

const sidecarOf = (t: V1PodTemplateSpec | undefined): V1Container | undefined => t?.spec?.initContainers?.find((c) => c.name === 'jobharvest');

/** QoS class the API server gives a pod of this template (a dry-run create). */
async function qosOf(template: V1PodTemplateSpec, name: string): Promise<string> {
  const pod = await stack.core.createNamespacedPod({ namespace: ns, dryRun: 'All', body: { metadata: { name, labels: template.metadata?.labels }, spec: template.spec! } });
  return pod.status?.qosClass ?? '?';
}

/** Every version of the Job as the watch delivers it: the delivery record and the TTL deletion come within seconds of each other. */
function recordJob(name: string): { versions: Array<{ type: string; job: V1Job }>; stop(): void } {
  const versions: Array<{ type: string; job: V1Job }> = [];
  let req: { abort(): void } | undefined;
  void new Watch(cluster.kc).watch(`/apis/batch/v1/namespaces/${ns}/jobs`, { fieldSelector: `metadata.name=${name}` }, (type, job: V1Job) => versions.push({ type, job }), () => {}).then((r) => (req = r));
  return { versions, stop: () => req?.abort() };
}

/** Every Workload event in the namespace, to tell one Workload re-admitted from one deleted and made again. */
function recordWorkloads(): { events: Array<{ type: string; wl: Obj }>; stop(): void } {
  const events: Array<{ type: string; wl: Obj }> = [];
  let req: { abort(): void } | undefined;
  void new Watch(cluster.kc).watch(`/apis/kueue.x-k8s.io/v1beta2/namespaces/${ns}/workloads`, {}, (type, wl: Obj) => events.push({ type, wl }), () => {}).then((r) => (req = r));
  return { events, stop: () => req?.abort() };
}

/** The QoS class the API server gave each pod of the namespace, by Job: pods of a preempted run are gone by the end. */
const qosSeen = new Map<string, Set<string>>();
function recordPods(): () => void {
  let req: { abort(): void } | undefined;
  void new Watch(cluster.kc)
    .watch(`/api/v1/namespaces/${ns}/pods`, {}, (_type, pod: V1Pod) => {
      const job = pod.metadata?.labels?.['batch.kubernetes.io/job-name'];
      if (!job || !pod.status?.qosClass) return;
      if (!qosSeen.has(job)) qosSeen.set(job, new Set());
      qosSeen.get(job)!.add(pod.status.qosClass);
    }, () => {})
    .then((r) => (req = r));
  return () => req?.abort();
}
const qosAfter = (job: string) => [...(qosSeen.get(job) ?? [])].join(',') || '?';

function deliveryIn(rec: ReturnType<typeof recordJob>): DeliveryRecord | undefined {
  const v = rec.versions.find((x) => x.type !== 'DELETED' && x.job.metadata?.annotations?.[DELIVERY_ANNOTATION]);
  if (!v) return undefined;
  const { sig, ...d } = JSON.parse(v.job.metadata!.annotations![DELIVERY_ANNOTATION]!) as DeliveryRecord & { sig?: string };
  expect(sig, 'the record is signed').toMatch(/^v2\.[A-Za-z0-9_-]{8}\./);
  return d;
}

async function admittedWorkload(jobUid: string, what: string, timeoutMs = 60_000): Promise<Obj> {
  return waitFor(what, async () => {
    const wl = await kueue.workloadOf(ns, jobUid);
    return wl && condition(wl, 'Admitted') === 'True' ? wl : undefined;
  }, { timeoutMs });
}

async function readJob(name: string): Promise<V1Job> {
  return stack.batch.readNamespacedJob({ name, namespace: ns });
}

async function running(name: string): Promise<V1Job> {
  return waitFor(`${name} unsuspended`, async () => {
    const j = await readJob(name);
    return j.spec?.suspend === false ? j : undefined;
  });
}

async function podsOf(job: string): Promise<V1Pod[]> {
  return (await stack.core.listNamespacedPod({ namespace: ns, labelSelector: `batch.kubernetes.io/job-name=${job}` })).items;
}

function expectSigned(job: V1Job, original: V1Container | undefined, when: string): void {
  expect(sidecarOf(job.spec?.template), `${when}: the sidecar is the one injected at CREATE`).toEqual(original);
  const v = verifyInjection(job, key);
  expect(v.ok ? 'valid' : v.why, `${when}: the injection signature`).toBe('valid');
}

/** A ClusterQueue's reservation as `cpu=…, memory=…`. */
function reservation(cq: Obj): string {
  const f = (cq.status?.flavorsReservation as Array<{ name: string; resources: Array<{ name: string; total: string }> }> | undefined)?.find((x) => x.name === N.flavor);
  return (f?.resources ?? []).map((r) => `${r.name}=${r.total}`).join(', ');
}

function usageOf(wl: Obj): Record<string, string> {
  return wl.status?.admission?.podSetAssignments?.[0]?.resourceUsage ?? {};
}

describe('Kueue', () => {
  it('K1. the order of the two webhooks does not matter: the Job is suspended by Kueue and injected once by jobharvest, and its Workload carries the sidecar', async () => {
    const original = kueue.mutatingConfigurationName;
    const orders: Array<[string, string]> = [
      ['kueue-after', original], // `jobharvest-kq` sorts before `kueue-…`: jobharvest first
      ['kueue-first', `0-kueue-${RUN}-mutating`], // this name sorts first: Kueue first
    ];
    try {
      for (const [name, config] of orders) {
        await kueue.registerWebhooks(config);
        const body = queuedJob(name, { script: linesPerRun(name, 50), resources: BURSTABLE });
        const stored = await stack.batch.createNamespacedJob({ namespace: ns, body });
        expect(stored.spec?.suspend, `${name}: suspended by Kueue's webhook`).toBe(true);
        const inits = stored.spec?.template.spec?.initContainers ?? [];
        expect(inits.map((c) => c.name), `${name}: one sidecar, first`).toEqual(['jobharvest']);
        expect(JSON.parse(stored.metadata!.annotations![STATUS_ANNOTATION]!).ttlSecondsAfterFinished).toBe(TTL);
        expectSigned(stored, inits[0], `${name} at CREATE`);
        const wl = await admittedWorkload(stored.metadata!.uid!, `${name}'s Workload admitted`);
        const psInit = wl.spec.podSets[0].template.spec.initContainers as V1Container[];
        expect(psInit.map((c) => c.name), `${name}: the Workload's pod set has the sidecar`).toEqual(['jobharvest']);
        expect(psInit[0]!.resources).toEqual(inits[0]!.resources);
        await waitFor(`${name} Complete`, async () => (condition((await readJob(name)) as Obj, 'Complete') === 'True' ? true : undefined), { timeoutMs: 60_000 });
        const reviews = reviewsOf(name);
        expect(reviews.filter((r) => r === 'inject'), `${name}: injected once`).toHaveLength(1);
        figures.push(`K1 ${name}: mutating configurations called in the order ${[config, 'jobharvest-kq'].sort().join(' then ')}; jobharvest's reviews: ${reviews.join(', ')}; stored Job suspended, one sidecar, Workload admitted with it`);
      }
    } finally {
      await kueue.registerWebhooks(original);
    }
  });

  it('K2. admitted and unsuspended: Kueue adds node selector, tolerations, labels and a scheduling gate, the sidecar and its signature are unchanged, every line arrives, and the sidecar counts against the quota', async () => {
    const LINES = 2000;
    const body = queuedJob('happy', { script: linesPerRun('happy', LINES, 'while [ ! -e "$S.go" ]; do sleep 0.05; done'), resources: BURSTABLE });
    const rec = recordJob('happy');
    const stored = await stack.batch.createNamespacedJob({ namespace: ns, body });
    const injected = sidecarOf(stored.spec?.template);
    const lifeP = followJob(stack, ns, 'happy', { expected: LINES, filter: stack.filter(ns) + ' "happy run"', timeoutMs: 120_000 });
    const wl = await admittedWorkload(stored.metadata!.uid!, 'the Workload admitted');
    const job = await running('happy');
    // What the unsuspend UPDATE added to the template.
    const t0 = stored.spec!.template;
    const t1 = job.spec!.template;
    expect(t1.spec?.nodeSelector?.[POOL_LABEL], 'the flavor\'s node label').toBe(RUN);
    expect(t1.spec?.tolerations).toContainEqual(TOLERATION);
    expect(t1.metadata?.labels?.['kueue.x-k8s.io/podset']).toBe('main');
    expect(t1.spec?.schedulingGates?.map((g) => g.name)).toContain('kueue.x-k8s.io/topology');
    expect(t0.spec?.nodeSelector?.[POOL_LABEL]).toBeUndefined();
    expectSigned(job, injected, 'after the unsuspend UPDATE');
    // jobharvest is registered for CREATE only: Kueue's UPDATE never reached it.
    const reviews = reviewsOf('happy');
    expect(reviews.filter((r) => r === 'inject')).toHaveLength(1);
    const added = (a: Record<string, string> | undefined, b: Record<string, string> | undefined) => Object.keys(b ?? {}).filter((k) => (a ?? {})[k] === undefined);
    figures.push(
      `K2 unsuspend UPDATE added: nodeSelector ${JSON.stringify(added(t0.spec?.nodeSelector, t1.spec?.nodeSelector))}, tolerations ${JSON.stringify(t1.spec?.tolerations)}, labels ${JSON.stringify(added(t0.metadata?.labels, t1.metadata?.labels))}, annotations ${JSON.stringify(added(t0.metadata?.annotations, t1.metadata?.annotations))}, schedulingGates ${JSON.stringify(t1.spec?.schedulingGates?.map((g) => g.name))}`,
    );
    // The pod: ungated by Kueue's topology ungater, bound, running with the sidecar.
    const pod = await waitFor('the pod running', async () => (await podsOf('happy')).find((p) => p.status?.phase === 'Running'), { timeoutMs: 60_000 });
    expect(pod.spec?.schedulingGates ?? []).toEqual([]);
    expect(pod.spec?.nodeName).toBe(stack.kubelet.nodeName);
    const cq = await waitFor('the happy Job\'s reservation in the ClusterQueue', async () => {
      const c = await kueue.readClusterObject('clusterqueues', N.cq);
      return reservation(c).includes('cpu=410m') ? c : undefined;
    }, { timeoutMs: 20_000 });
    const withSidecar = { workload: usageOf(wl), podSet: wl.spec.podSets[0].template.spec.initContainers[0].resources, cq: reservation(cq) };
    // Let it finish.
    writeFileSync(join(tmpdir(), `jh-kueue-${RUN}-happy.go`), '');
    const life = await lifeP;
    expect(life.violations).toEqual([]);
    expect(life.completeAt).toBeDefined();
    const delivery = await waitFor('the delivery record', async () => deliveryIn(rec), { timeoutMs: 30_000 });
    rec.stop();
    const got = await stack.vl.countWithDistinct(`${stack.filter(ns)} "happy run"`, '_msg');
    expect(got).toEqual({ total: LINES, distinct: LINES });
    const { usage, ...counts } = delivery;
    expect(counts).toEqual({ sink: 'loki', pods: 1, shipped: LINES, lost: 0, unaccounted: 0 });
    // The pod's request as Kueue reserved it.
    expect(usage).toMatchObject({ pods: 1, cpu_request_millicores: 410, memory_request_bytes: 152 * 2 ** 20 });
    const before = await qosOf(body.spec!.template, 'qos-happy');
    table.push({
      job: 'K2 happy (Burstable)',
      injected: 'yes, once at CREATE',
      ttl: `yes, ${stored.spec?.ttlSecondsAfterFinished} s (no controller owner: Kueue owns the Workload, not the Job)`,
      runs: stack.jobWorkers(ns, 'happy').length,
      written: LINES,
      received: got.total,
      duplicates: got.total - got.distinct,
      delivery: JSON.stringify(delivery),
      qos: `${before} -> ${pod.status?.qosClass}`,
    });
    expect(pod.status?.qosClass).toBe(before);
    expect(qosAfter('happy')).toBe(before);

    // The same Job without jobharvest, for the quota figure.
    const bare = queuedJob('bare', { script: 'echo bare; while [ ! -e "$S.go" ]; do sleep 0.05; done', resources: BURSTABLE, annotations: { 'jobharvest.io/inject': 'false' } });
    const bareStored = await stack.batch.createNamespacedJob({ namespace: ns, body: bare });
    expect(sidecarOf(bareStored.spec?.template)).toBeUndefined();
    const bareWl = await admittedWorkload(bareStored.metadata!.uid!, 'the bare Workload admitted');
    await running('bare');
    // The ClusterQueue's status is written a moment after the admission.
    const bareCq = await waitFor('the bare Job\'s reservation in the ClusterQueue', async () => {
      const cq = await kueue.readClusterObject('clusterqueues', N.cq);
      return reservation(cq).includes('cpu=400m') ? cq : undefined;
    }, { timeoutMs: 20_000 });
    const without = { workload: usageOf(bareWl), cq: reservation(bareCq) };
    writeFileSync(join(tmpdir(), `jh-kueue-${RUN}-bare.go`), '');
    await waitFor('bare Complete', async () => (condition((await readJob('bare')) as Obj, 'Complete') === 'True' ? true : undefined), { timeoutMs: 60_000 });
    figures.push(`K2 quota: Workload resourceUsage with the sidecar ${JSON.stringify(withSidecar.workload)} (sidecar requests ${JSON.stringify(withSidecar.podSet?.requests)}), without ${JSON.stringify(without.workload)}; ClusterQueue flavorsReservation with ${withSidecar.cq}, without ${without.cq}`);
    expect(withSidecar.workload).toEqual({ cpu: '410m', memory: '152Mi' });
    expect(without.workload).toEqual({ cpu: '400m', memory: '128Mi' });
  });

  it('K3. preemption: a higher-priority Job evicts a running one; Kueue suspends it, restores its template and re-admits it later, once; every line of both runs arrives and the record counts both runs\' pods', async () => {
    const LOW = 1000;
    const HIGH = 500;
    const wls = recordWorkloads();
    const recLow = recordJob('low');
    const recHigh = recordJob('high');
    // The first run prints its lines and then runs until it is preempted; the second finishes.
    const low = queuedJob('low', { script: linesPerRun('low', LOW, '[ $r -ge 2 ] || while true; do sleep 0.1; done'), resources: BURSTABLE, priority: N.low });
    const lowStored = await stack.batch.createNamespacedJob({ namespace: ns, body: low });
    const lowSidecar = sidecarOf(lowStored.spec?.template);
    const lowFilter = `${stack.filter(ns)} "low run"`;
    const lifeLow = followJob(stack, ns, 'low', { expected: 2 * LOW, filter: lowFilter, timeoutMs: 240_000 });
    const wl1 = await admittedWorkload(lowStored.metadata!.uid!, 'low admitted');
    await running('low');
    await waitFor(`${LOW} lines of low's first run`, async () => ((await stack.vl.count(`${stack.filter(ns)} "low run 1"`)) >= LOW ? true : undefined), { timeoutMs: 60_000 });
    const firstPod = stack.jobWorkers(ns, 'low')[0]!;

    const high = queuedJob('high', { script: linesPerRun('high', HIGH), resources: GUARANTEED, priority: N.high });
    const t0 = Date.now();
    const highStored = await stack.batch.createNamespacedJob({ namespace: ns, body: high });
    const lifeHigh = followJob(stack, ns, 'high', { expected: HIGH, filter: `${stack.filter(ns)} "high run"`, timeoutMs: 180_000 });
    // Kueue evicts low: suspended, template restored.
    const suspended = await waitFor('low evicted and suspended', async () => {
      const j = await readJob('low');
      return j.spec?.suspend === true ? Date.now() : undefined;
    }, { timeoutMs: 30_000, intervalMs: 50 });
    // The template is restored in a later UPDATE: the API server lets the
    // scheduling directives change only once the Job controller has seen
    // it suspended (startTime cleared).
    const evicted = await waitFor('low\'s template restored', async () => {
      const j = await readJob('low');
      return j.spec?.suspend === true && j.spec.template.spec?.nodeSelector?.[POOL_LABEL] === undefined ? j : undefined;
    }, { timeoutMs: 60_000, intervalMs: 50 });
    const restoredAfter = Date.now() - suspended;
    expectSigned(evicted, lowSidecar, 'after the eviction');
    expect(evicted.spec?.template.spec?.schedulingGates ?? []).toEqual([]);
    expect(evicted.spec?.template.spec?.tolerations ?? []).toEqual(lowStored.spec?.template.spec?.tolerations ?? []);
    expect(evicted.spec?.template.metadata?.labels).toEqual(lowStored.spec?.template.metadata?.labels);
    figures.push(`K3 low evicted: suspended, then its template restored ${restoredAfter} ms later (node selector, tolerations, labels, gate as at CREATE; sidecar and signature unchanged)`);
    const highWl = await admittedWorkload(highStored.metadata!.uid!, 'high admitted', 60_000);
    const highAdmitted = Date.now();
    // The first run's pod was deleted: its sidecar drained what it had.
    const drained = await stack.kubelet.waitForEvent((e) => e.uid === firstPod.uid && e.type === 'exit' && e.container === 'jobharvest', 30_000);
    const highStart = await stack.kubelet.waitForEvent((e) => e.namespace === ns && e.pod.startsWith('high-') && e.type === 'start' && e.container === 'main', 60_000);
    figures.push(
      `K3 high admitted ${((highAdmitted - t0) / 1000).toFixed(1)} s after its creation (Kueue releases low's quota once the Job has no active pod; a terminating pod is not active); ` +
        `low's first pod: sidecar exited ${drained.t - suspended} ms after the suspension; high's main container started ${highStart.t - drained.t} ms after that; high's Workload usage ${JSON.stringify(usageOf(highWl))}`,
    );
    expect(stack.sidecarSummary(firstPod.uid)?.lines_unsent, 'the preempted run left nothing unsent').toBe(0);
    const hl = await lifeHigh;
    expect(hl.violations).toEqual([]);
    // Re-admitted once high is done, and run to completion.
    const ll = await lifeLow;
    expect(ll.violations).toEqual([]);
    expect(ll.completeAt, 'low completed').toBeDefined();
    const lowDelivery = await waitFor('low\'s delivery record', async () => deliveryIn(recLow), { timeoutMs: 30_000 });
    const highDelivery = await waitFor('high\'s delivery record', async () => deliveryIn(recHigh), { timeoutMs: 30_000 });
    recLow.stop();
    recHigh.stop();
    wls.stop();
    // One Workload for low throughout: evicted and admitted again, never deleted and made again (kueue#3090).
    const lowWls = wls.events.filter((e) => e.wl.metadata?.ownerReferences?.some((r: { uid: string }) => r.uid === lowStored.metadata!.uid));
    const uids = new Set(lowWls.map((e) => e.wl.metadata.uid));
    expect(uids, 'one Workload for low').toEqual(new Set([wl1.metadata.uid]));
    expect(lowWls.filter((e) => e.type === 'ADDED')).toHaveLength(1);
    const admissions = new Set(lowWls.filter((e) => e.wl.status?.admission).map((e) => e.wl.status.conditions?.find((c: { type: string }) => c.type === 'QuotaReserved')?.lastTransitionTime));
    const lastWl = lowWls.at(-1)!.wl;
    const evictions = lastWl.status?.schedulingStats?.evictions;
    const runs = stack.jobWorkers(ns, 'low');
    expect(runs, 'two runs of low, no more').toHaveLength(2);
    const st = ll.final?.status;
    figures.push(
      `K3 low: one Workload (${wl1.metadata.uid}), ${lowWls.filter((e) => e.type === 'ADDED').length} ADDED, quota reserved ${admissions.size} times, evictions ${JSON.stringify(evictions)}, pods ${runs.length}; ` +
        `the Job's status at the end: succeeded ${st?.succeeded ?? 0}, failed ${st?.failed ?? 0} (backoffLimit ${low.spec?.backoffLimit}: the Job controller drops its tracking finalizer from a pod it deletes for a suspension, so the preempted pod is not counted)`,
    );
    expect(st?.failed ?? 0, 'the preempted pod is not a failure').toBe(0);
    const gotLow = await stack.vl.countWithDistinct(lowFilter, '_msg');
    const gotHigh = await stack.vl.countWithDistinct(`${stack.filter(ns)} "high run"`, '_msg');
    for (const r of [1, 2]) expect(await stack.vl.count(`${stack.filter(ns)} "low run ${r} line"`), `low run ${r}`).toBe(LOW);
    const lowBefore = await qosOf(low.spec!.template, 'qos-low');
    const highBefore = await qosOf(high.spec!.template, 'qos-high');
    table.push({
      job: 'K3 low (Burstable, preempted once)',
      injected: 'yes, once at CREATE',
      ttl: `yes, ${lowStored.spec?.ttlSecondsAfterFinished} s (no controller owner)`,
      runs: runs.length,
      written: 2 * LOW,
      received: gotLow.total,
      duplicates: gotLow.total - gotLow.distinct,
      delivery: JSON.stringify(lowDelivery),
      qos: `${lowBefore} -> ${qosAfter('low')}`,
    });
    table.push({
      job: 'K3 high (Guaranteed, preempts low)',
      injected: 'yes, once at CREATE',
      ttl: `yes, ${highStored.spec?.ttlSecondsAfterFinished} s (no controller owner)`,
      runs: stack.jobWorkers(ns, 'high').length,
      written: HIGH,
      received: gotHigh.total,
      duplicates: gotHigh.total - gotHigh.distinct,
      delivery: JSON.stringify(highDelivery),
      qos: `${highBefore} -> ${qosAfter('high')}`,
    });
    expect(qosAfter('low')).toBe(lowBefore);
    expect(qosAfter('high')).toBe(highBefore);
    expect(gotLow).toEqual({ total: 2 * LOW, distinct: 2 * LOW });
    expect(gotHigh).toEqual({ total: HIGH, distinct: HIGH });
    const { usage: highUsage, ...highCounts } = highDelivery;
    expect(highCounts).toEqual({ sink: 'loki', pods: 1, shipped: HIGH, lost: 0, unaccounted: 0 });
    expect(highUsage?.pods, "high's pod's requests and run time recorded").toBe(1);
    expect(lowDelivery).toMatchObject({ sink: 'loki', pods: 2, shipped: 2 * LOW, lost: 0, unaccounted: 0 });
  }, 300_000);
});
