/**
 * JobSet as a real controller: the JobSet controller manager of the pinned
 * release (test/harness/jobset/) with its CRD and its webhooks, the real API
 * server and controllers, jobharvest's webhook and harvester, the test kubelet
 * running the real sidecar, and VictoriaLogs.
 *
 * J1 runs a JobSet shaped like a Kubeflow TrainJob: an `initializer`
 * replicated Job (dataset and model initializers, done in seconds) and a
 * `node` replicated Job of two replicas that starts once the initializer is
 * Complete (`dependsOn`) and trains for a minute. jobharvest injects every
 * child Job and gives none a TTL (the JobSet owns them), so the initializer
 * runs once while the nodes train; every child's lines arrive; each child has
 * its delivery record; the JobSet's own TTL deletes it all at the end.
 *
 * J2 is the hazard the rule avoids, on the same controller: a child Job that
 * does carry a TTL (its own, written in the JobSet's template, which jobharvest
 * keeps) is deleted after it finishes and the JobSet creates it again, so the
 * initializer runs over and over until the JobSet is done.
 */
import { CustomObjectsApi, Watch, type V1Job, type V1Pod } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DELIVERY_ANNOTATION, type DeliveryRecord } from '../../harvester/report.ts';
import { useCluster, waitFor } from '../harness/cluster/client.ts';
import { JOBSET_GROUP, JOBSET_VERSION, JobSetController, type JobSetObject } from '../harness/jobset/controller.ts';
import { Stack } from '../harness/kubelet/stack.ts';
import { exact } from '../harness/servers/victorialogs.ts';

const cluster = useCluster();
const objects = cluster.kc.makeApiClient(CustomObjectsApi);
let stack: Stack;
let jobset: JobSetController;

/** The TTL jobharvest gives a Job it may give one to (Stack.namespace's annotation): short, so that a wrong one would show within the test. */
const NS_TTL = 3;
const JOBSET_TTL = 15;
const INIT_LINES = 500;
const NODE_SECONDS = 60;
const NODE_LINES_PER_SECOND = 10;

interface Row {
  job: string;
  injected: boolean;
  ttl: string;
  runs: number;
  written: number;
  received: number;
  duplicated: number;
  delivery: string;
  qos: string;
}
const table: Row[] = [];
const notes: string[] = [];

beforeAll(async () => {
  stack = await Stack.start({ info: cluster.info, name: 'js', kubelet: { restartBackoffMs: 300 } });
  const started = Date.now();
  jobset = await JobSetController.start({ info: cluster.info, name: 'jobset-e2e', log: (m) => console.log(`[jobset] ${m}`) });
  notes.push(`JobSet ${jobset.release} manager ready and its webhooks answering in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}, 300_000);

afterAll(async () => {
  console.log('JobSet (TrainJob-shaped): job / injected / TTL set by jobharvest / runs / lines written / received / duplicates / delivery record / QoS before -> after');
  for (const r of table) console.log(`  ${r.job}: ${r.injected ? 'yes' : 'no'} / ${r.ttl} / ${r.runs} / ${r.written} / ${r.received} / ${r.duplicated} / ${r.delivery} / ${r.qos}`);
  for (const n of notes) console.log(`  ${n}`);
  await jobset?.stop();
  await stack?.stop();
}, 120_000);

/**
 * Every version of every object under `path` as the watch delivers it. A
 * watch that ends (the client's request timeout) is started again; its first
 * events then repeat what exists as ADDED, which only adds versions already seen.
 */
function record<T extends { metadata?: { name?: string; uid?: string } }>(path: string): { versions: Array<{ type: string; obj: T; at: number }>; stop(): void } {
  const versions: Array<{ type: string; obj: T; at: number }> = [];
  let req: { abort(): void } | undefined;
  let stopped = false;
  const start = (): void => {
    void new Watch(cluster.kc)
      .watch(
        path,
        {},
        (type, obj: T) => versions.push({ type, obj, at: Date.now() }),
        () => {
          if (!stopped) setTimeout(start, 100);
        },
      )
      .then(
        (r) => {
          req = r;
          if (stopped) r.abort();
        },
        () => {
          if (!stopped) setTimeout(start, 500);
        },
      );
  };
  start();
  return {
    versions,
    stop: () => {
      stopped = true;
      req?.abort();
    },
  };
}

const res = (cpu: string, memory: string) => ({ cpu, memory });

function container(name: string, script: string, resources: { requests?: Record<string, string>; limits?: Record<string, string> }) {
  return {
    name,
    image: 'busybox:1.36',
    command: ['sh', '-c', script],
    // The replicated Job's index, from the annotation JobSet puts on every pod.
    env: [{ name: 'JOB_INDEX', valueFrom: { fieldRef: { fieldPath: "metadata.annotations['jobset.sigs.k8s.io/job-index']" } } }],
    resources,
  };
}

/** `n` numbered lines `<tag> line <i>`, unique within a run. */
const lines = (tag: string, n: number) => `i=1; while [ $i -le ${n} ]; do echo "${tag} line $i"; i=$((i+1)); done`;

/** The initializer's pod: a dataset and a model initializer, requests only (Burstable). */
const INIT_POD = {
  restartPolicy: 'Never',
  containers: [
    container('dataset-initializer', `sleep 1; ${lines('dataset-initializer', INIT_LINES)}`, { requests: res('100m', '64Mi') }),
    container('model-initializer', `sleep 1; ${lines('model-initializer', INIT_LINES)}`, { requests: res('100m', '64Mi') }),
  ],
};

/** A trainer node: requests equal to limits (Guaranteed), a minute of work, a line every 100 ms in bursts of one second. */
function nodePod(seconds: number) {
  const script = `s=1; while [ $s -le ${seconds} ]; do j=1; while [ $j -le ${NODE_LINES_PER_SECOND} ]; do echo "node $JOB_INDEX second $s line $j"; j=$((j+1)); done; sleep 1; s=$((s+1)); done`;
  return { restartPolicy: 'Never', containers: [container('node', script, { requests: res('500m', '256Mi'), limits: res('500m', '256Mi') })] };
}

function trainJobShaped(name: string, o: { nodeSeconds: number; initializerTtl?: number }): JobSetObject {
  return {
    apiVersion: `${JOBSET_GROUP}/${JOBSET_VERSION}`,
    kind: 'JobSet',
    metadata: { name, labels: { 'trainer.kubeflow.org/trainjob-name': name } },
    spec: {
      ttlSecondsAfterFinished: JOBSET_TTL,
      replicatedJobs: [
        {
          name: 'initializer',
          replicas: 1,
          template: {
            metadata: { labels: { 'trainer.kubeflow.org/trainjob-ancestor-step': 'initializer' } },
            spec: { backoffLimit: 0, ttlSecondsAfterFinished: o.initializerTtl, template: { spec: INIT_POD } },
          },
        },
        {
          name: 'node',
          replicas: 2,
          dependsOn: [{ name: 'initializer', status: 'Complete' }],
          template: { metadata: { labels: { 'trainer.kubeflow.org/trainjob-ancestor-step': 'trainer' } }, spec: { backoffLimit: 0, template: { spec: nodePod(o.nodeSeconds) } } },
        },
      ],
    },
  };
}

async function createJobSet(ns: string, body: JobSetObject): Promise<JobSetObject> {
  return (await objects.createNamespacedCustomObject({ group: JOBSET_GROUP, version: JOBSET_VERSION, namespace: ns, plural: 'jobsets', body })) as JobSetObject;
}

async function readJobSet(ns: string, name: string): Promise<JobSetObject | undefined> {
  try {
    return (await objects.getNamespacedCustomObject({ group: JOBSET_GROUP, version: JOBSET_VERSION, namespace: ns, plural: 'jobsets', name })) as JobSetObject;
  } catch (err) {
    if ((err as { code?: number }).code === 404) return undefined;
    throw err;
  }
}

/** The QoS class the API server gives a pod of this spec, without jobharvest (a dry-run create; jobharvest admits Jobs, not pods). */
async function qosOf(ns: string, spec: Record<string, unknown>): Promise<string> {
  const pod = await cluster.core.createNamespacedPod({ namespace: ns, body: { metadata: { name: 'qos-probe' }, spec: spec as never }, dryRun: 'All' });
  return pod.status?.qosClass ?? '?';
}

function unsigned(raw: string): DeliveryRecord {
  const { sig, ...d } = JSON.parse(raw) as DeliveryRecord & { sig?: string };
  expect(sig, 'the delivery record is signed').toMatch(/^v2\.[A-Za-z0-9_-]{8}\./);
  return d;
}

/** Lines at the server for one Job's containers: total and distinct messages. */
async function receivedFor(ns: string, job: string): Promise<{ total: number; distinct: number }> {
  return stack.vl.countWithDistinct(`${exact('namespace', ns)} ${exact('job', job)} -${exact('container', 'jobharvest')}`, '_msg');
}

describe('JobSet (the pinned release, as a real controller)', () => {
  it('J1. a TrainJob-shaped JobSet: every child injected and given no TTL, the initializer runs once, every line arrives, a delivery record per child, the JobSet\'s TTL deletes it all', async () => {
    const ns = await stack.namespace('train', { ttlSeconds: NS_TTL });
    const jobs = record<V1Job>(`/apis/batch/v1/namespaces/${ns}/jobs`);
    const pods = record<V1Pod>(`/api/v1/namespaces/${ns}/pods`);
    try {
      const qosBefore = { initializer: await qosOf(ns, INIT_POD), node: await qosOf(ns, nodePod(NODE_SECONDS)) };
      const t0 = Date.now();
      const stored = await createJobSet(ns, trainJobShaped('train', { nodeSeconds: NODE_SECONDS }));
      // Defaulted by JobSet's own webhook.
      expect((stored.spec.network as { enableDNSHostnames?: boolean }).enableDNSHostnames).toBe(true);
      const names = ['train-initializer-0', 'train-node-0', 'train-node-1'];

      const init = await waitFor('the initializer Job', () => jobs.versions.find((v) => v.obj.metadata?.name === names[0])?.obj, { timeoutMs: 30_000 });
      const initCreatedAt = Date.now();
      const done = await waitFor(
        'the JobSet Completed',
        async () => {
          const js = await readJobSet(ns, 'train');
          const c = js?.status?.conditions?.find((x) => x.type === 'Completed' && x.status === 'True');
          if (js?.status?.conditions?.some((x) => x.type === 'Failed' && x.status === 'True')) throw new Error(`the JobSet failed: ${JSON.stringify(js.status)}`);
          return c ? { js, at: Date.now(), transition: new Date(c.lastTransitionTime!).getTime() } : undefined;
        },
        { timeoutMs: 180_000, intervalMs: 500 },
      );
      notes.push(`J1: initializer Job created ${((initCreatedAt - t0) / 1000).toFixed(1)} s after the JobSet; JobSet Completed ${((done.at - t0) / 1000).toFixed(1)} s after`);

      // The Jobs JobSet created, as stored after jobharvest's webhook.
      const created = (name: string) => jobs.versions.filter((v) => v.type === 'ADDED' && v.obj.metadata?.name === name).map((v) => v.obj);
      for (const name of names) {
        const firsts = created(name);
        expect(firsts.length, `${name} created`).toBeGreaterThanOrEqual(1);
        const j = firsts[0]!;
        const ref = j.metadata?.ownerReferences?.find((r) => r.controller);
        expect(ref, `${name} is controlled by the JobSet`).toMatchObject({ apiVersion: `${JOBSET_GROUP}/${JOBSET_VERSION}`, kind: 'JobSet', name: 'train', blockOwnerDeletion: true });
        expect(j.spec?.template.spec?.initContainers?.[0]?.name, `${name} injected`).toBe('jobharvest');
        expect(j.spec?.ttlSecondsAfterFinished, `${name}: no TTL from jobharvest`).toBeUndefined();
        const status = JSON.parse(j.metadata!.annotations!['jobharvest.io/status']!) as { ttlLeftTo?: string };
        expect(status.ttlLeftTo).toBe('jobset.x-k8s.io/JobSet "train"');
      }
      expect(init.spec?.ttlSecondsAfterFinished).toBeUndefined();

      // dependsOn: no node Job before the initializer was Complete.
      const initComplete = jobs.versions.find((v) => v.obj.metadata?.name === names[0] && v.obj.status?.conditions?.some((c) => c.type === 'Complete' && c.status === 'True'));
      expect(initComplete, 'the initializer completed').toBeDefined();
      for (const name of names.slice(1)) {
        const added = jobs.versions.find((v) => v.type === 'ADDED' && v.obj.metadata?.name === name)!;
        expect(added.at, `${name} created after the initializer was Complete`).toBeGreaterThanOrEqual(initComplete!.at);
      }
      const initDoneAt = new Date(initComplete!.obj.status!.conditions!.find((c) => c.type === 'Complete')!.lastTransitionTime!).getTime();
      expect(done.transition - initDoneAt, 'the nodes trained for longer than the TTL jobharvest would have given the initializer').toBeGreaterThan(10 * NS_TTL * 1000);

      // Delivery records: every child, seen on the Job (the watch keeps every version, so a record is seen even if the JobSet's TTL comes first).
      const deliveries = new Map<string, DeliveryRecord>();
      await waitFor(
        'a delivery record on every child Job',
        () => {
          for (const name of names) {
            const v = jobs.versions.find((x) => x.type !== 'DELETED' && x.obj.metadata?.name === name && x.obj.metadata.annotations?.[DELIVERY_ANNOTATION]);
            if (v) deliveries.set(name, unsigned(v.obj.metadata!.annotations![DELIVERY_ANNOTATION]!));
          }
          return deliveries.size === names.length ? true : undefined;
        },
        { timeoutMs: 60_000, intervalMs: 250 },
      );

      // The JobSet's own TTL: the JobSet, its Jobs and their pods go, not before the TTL.
      const goneAt = await waitFor('the JobSet deleted by its TTL', async () => ((await readJobSet(ns, 'train')) === undefined ? Date.now() : undefined), { timeoutMs: (JOBSET_TTL + 60) * 1000, intervalMs: 250 });
      await waitFor('every child Job gone', async () => ((await stack.batch.listNamespacedJob({ namespace: ns })).items.length === 0 ? true : undefined), { timeoutMs: 60_000 });
      await waitFor('every pod gone', async () => ((await stack.core.listNamespacedPod({ namespace: ns })).items.length === 0 ? true : undefined), { timeoutMs: 60_000 });
      // The headless Service JobSet makes for the pods' hostnames goes with it too.
      await waitFor('the JobSet\'s Service gone', async () => ((await stack.core.listNamespacedService({ namespace: ns })).items.length === 0 ? true : undefined), { timeoutMs: 30_000 });
      expect(goneAt - done.transition, 'the JobSet stayed for its TTL').toBeGreaterThanOrEqual((JOBSET_TTL - 1) * 1000);
      notes.push(`J1: JobSet deleted ${((goneAt - done.transition) / 1000).toFixed(1)} s after Completed (ttlSecondsAfterFinished ${JOBSET_TTL}); the whole JobSet took ${((goneAt - t0) / 1000).toFixed(1)} s`);

      const written: Record<string, number> = { [names[0]!]: 2 * INIT_LINES, [names[1]!]: NODE_SECONDS * NODE_LINES_PER_SECOND, [names[2]!]: NODE_SECONDS * NODE_LINES_PER_SECOND };
      for (const name of names) {
        const jobUids = new Set(jobs.versions.filter((v) => v.obj.metadata?.name === name).map((v) => v.obj.metadata!.uid));
        const podUids = new Set(pods.versions.filter((v) => v.obj.metadata?.labels?.['batch.kubernetes.io/job-name'] === name).map((v) => v.obj.metadata!.uid));
        const ran = stack.jobWorkers(ns, name);
        const lastPod = [...pods.versions].reverse().find((v) => v.obj.metadata?.labels?.['batch.kubernetes.io/job-name'] === name && v.obj.status?.qosClass)?.obj;
        const got = await receivedFor(ns, name);
        const d = deliveries.get(name)!;
        const rj = name.includes('initializer') ? 'initializer' : 'node';
        table.push({
          job: name,
          injected: true,
          ttl: 'no (owned by JobSet "train"; its ttlSecondsAfterFinished deletes the children)',
          runs: ran.length,
          written: written[name]!,
          received: got.total,
          duplicated: got.total - got.distinct,
          delivery: JSON.stringify(d),
          qos: `${qosBefore[rj]} -> ${lastPod?.status?.qosClass ?? '?'}`,
        });
        if (rj === 'initializer') notes.push(`J1: initializer pods counted: ${podUids.size} in the API server's watch, ${ran.length} run by the kubelet; Job objects of that name: ${jobUids.size}`);
        expect(jobUids.size, `${name}: one Job, never re-created`).toBe(1);
        expect(podUids.size, `${name}: one pod`).toBe(1);
        expect(ran, `${name}: the kubelet ran one pod`).toHaveLength(1);
        expect(got, `${name}: every line once`).toEqual({ total: written[name], distinct: written[name] });
        const { usage, ...counts } = d;
        expect(counts).toEqual({ sink: 'loki', pods: 1, shipped: written[name], lost: 0, unaccounted: 0 });
        expect(usage?.pods, `${name}: the pod's requests and run time recorded`).toBe(1);
        expect(lastPod?.status?.qosClass, `${name}: the QoS class is kept`).toBe(qosBefore[rj]);
        expect(stack.sidecarSummary(ran[0]!.uid)?.lines_unsent).toBe(0);
      }
      expect(qosBefore).toEqual({ initializer: 'Burstable', node: 'Guaranteed' });
      // jobharvest's admission warning goes to whoever created the Job: the JobSet manager, which logs it.
      const warned = jobset.log().split('\n').filter((l) => l.includes('jobharvest: the Job is controlled by jobset.x-k8s.io/JobSet "train"'));
      expect(warned.length, 'the admission warning reached the JobSet manager').toBeGreaterThanOrEqual(1);
      notes.push(`J1: the JobSet manager logged jobharvest's admission warning ${warned.length} times: ${warned[0]!.slice(warned[0]!.indexOf('jobharvest:')).split('\t')[0]!.slice(0, 200)}…`);
    } finally {
      jobs.stop();
      pods.stop();
    }
  }, 360_000);

  it('J2. the hazard the rule avoids: a child Job that has a TTL is deleted when it finishes and the JobSet runs it again', async () => {
    const ns = await stack.namespace('rerun', { ttlSeconds: NS_TTL });
    const jobs = record<V1Job>(`/apis/batch/v1/namespaces/${ns}/jobs`);
    try {
      // The TTL a webhook that ignored ownership would have set, written here in the template (jobharvest keeps a Job's own TTL).
      await createJobSet(ns, trainJobShaped('rerun', { nodeSeconds: 25, initializerTtl: 2 }));
      const js = await waitFor(
        'the JobSet finished',
        async () => {
          const o = await readJobSet(ns, 'rerun');
          return o?.status?.conditions?.some((c) => (c.type === 'Completed' || c.type === 'Failed') && c.status === 'True') ? o : undefined;
        },
        { timeoutMs: 180_000, intervalMs: 500 },
      );
      const initUids = new Set(jobs.versions.filter((v) => v.obj.metadata?.name === 'rerun-initializer-0').map((v) => v.obj.metadata!.uid));
      const runs = stack.jobWorkers(ns, 'rerun-initializer-0').length;
      const got = await receivedFor(ns, 'rerun-initializer-0');
      notes.push(`J2: with a TTL of 2 s on the initializer Job, JobSet created it ${initUids.size} times and the kubelet ran ${runs} initializer pods while the node trained 25 s; ${got.total} initializer lines arrived (${2 * INIT_LINES} a run); the JobSet ended ${js.status!.conditions!.filter((c) => c.status === 'True').map((c) => c.type).join(', ')}`);
      expect(initUids.size, 'the initializer Job was created again after its TTL deleted it').toBeGreaterThanOrEqual(2);
      expect(runs).toBeGreaterThanOrEqual(2);
    } finally {
      jobs.stop();
    }
  }, 240_000);
});
