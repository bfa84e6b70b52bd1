// `npm run bench:node`: what the injected sidecar costs a Job on the real node
// (test/harness/node/): the real kubelet, containerd and runc, the real
// jobharvest image, the webhook registered against the test control plane.
//
// 1. Start delay. BENCH_NODE_JOBS (20) Jobs in a namespace opted in (node
//    mode, Loki sink to VictoriaLogs) and as many in one not opted in (the
//    baseline): same busybox image, same node, one Job at a time, the two
//    arms alternating A B B A so that drift in the machine's load falls on
//    both. Per Job: pod creation → main container start, where creation is
//    when a watch on the API server first sees the pod (the pod's
//    creationTimestamp has whole seconds only) and start is containerd's CRI
//    StartedAt (nanoseconds; the API's startedAt has whole seconds too). One
//    Job per arm first, unmeasured, so that neither arm pays for unpacking an
//    image. Reported: median and p90 of each arm; the delay is the difference
//    of the medians, and its ratio to the baseline container's own create →
//    start (the goal is at most 2.5). Beside them, the medians of containerd's CreatedAt and
//    StartedAt of the sidecar's and the main container, from the same pod
//    creation: where the delay goes. Also the end: the median of the time
//    from the main container's end to the sidecar's (containerd's FinishedAt
//    of each), which is what the sidecar's stop (the kubelet's preStop hook,
//    the SIGTERM, the drain) adds before the pod can succeed.
// 2. Idle memory. An injected Job printing 20 lines and then sleeping 10 s:
//    the sidecar's memory cgroup sampled every 100 ms from 2 s after the main
//    container started (its 20 lines shipped) until it ends. The figure is the
//    median of the working set, memory.usage_in_bytes − total_inactive_file,
//    the kubelet's (cAdvisor's) figure: what `kubectl top` shows, what
//    eviction weighs against the request, and what the limit is held against
//    once the kernel has dropped inactive page cache. total_rss (anonymous
//    memory only) leaves out page cache the sidecar did make active, and the
//    processes' VmRSS counts the node binary's mapped file pages, which are
//    charged to whichever cgroup first read them (on a node, usually an
//    earlier sidecar's); both are printed beside it, with total_cache,
//    mapped_file and usage − total_cache.
// 3. Flood peak memory. An injected Job writing 50 MiB of numbered 100-byte
//    lines as fast as busybox awk can: the sidecar's cgroup sampled every
//    100 ms while it runs. The figure is the highest working-set sample; the
//    same peaks of the other figures, memory.max_usage_in_bytes (the kernel's
//    high-water mark, page cache included) and the injected memory limit are
//    printed beside it, and how many lines, and distinct lines, reached
//    VictoriaLogs.
// The last line is `start_delay_ms=… start_delay_ratio=… sidecar_end_ms=… idle_rss_MiB=… flood_peak_rss_MiB=…`,
// the two memory figures being working sets (the names are kept for
// comparison with earlier runs).
// Everything the run started is stopped at the end, on failure too.
import { Watch, type V1Pod } from '@kubernetes/client-node';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { NAMES } from '../../src/contract/env.ts';
import { kubeConfigFor, numberedLines } from '../../test/harness/kubelet/stack.ts';
import { BUSYBOX_IMAGE } from '../../test/harness/node/images.ts';
import { exact } from '../../test/harness/servers/victorialogs.ts';
import { waitFor } from '../../test/support/wait.ts';
import { createNamespace, startProductOnNode, unavailable, type NodeEnv } from '../../test/support/node-env.ts';
import { bareId, criTimesMs, findMemoryCgroup, MiB, readMemory, type MemorySample } from './cgroup.ts';

const JOBS = Number(process.env.BENCH_NODE_JOBS ?? 20);
const FLOOD_BYTES = 50 * 1024 * 1024;
const SAMPLE_MS = 100;
const IMAGE = BUSYBOX_IMAGE.replace('docker.io/library/', '');

const log = (m: string) => console.log(`[node] ${m}`);
const fmt = (n: number, d = 1) => (Number.isFinite(n) ? n.toFixed(d) : 'n/a');
const nowMs = () => performance.timeOrigin + performance.now();

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const pos = (s.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return s[lo]! + (s[hi]! - s[lo]!) * (pos - lo);
}

/** Epoch ms at which a watch on all pods first saw each pod (by UID). */
async function watchPodCreations(env: NodeEnv): Promise<{ seen: Map<string, number>; stop(): void }> {
  const seen = new Map<string, number>();
  const controller = await new Watch(kubeConfigFor(env.cluster)).watch(
    '/api/v1/pods',
    {},
    (type, obj: V1Pod) => {
      const uid = obj.metadata?.uid;
      if (type === 'ADDED' && uid !== undefined && !seen.has(uid)) seen.set(uid, nowMs());
    },
    (err) => {
      if (err !== null && err !== undefined && (err as { name?: string }).name !== 'AbortError') log(`pod watch ended: ${String(err)}`);
    },
  );
  return { seen, stop: () => controller.abort() };
}

function jobBody(name: string, script: string) {
  return {
    metadata: { name },
    spec: {
      backoffLimit: 0,
      template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: IMAGE, command: ['sh', '-c', script] }] } },
    },
  };
}

async function jobPod(env: NodeEnv, namespace: string, job: string): Promise<V1Pod> {
  return waitFor(
    `the pod of ${namespace}/${job}`,
    async () => (await env.core.listNamespacedPod({ namespace, labelSelector: `batch.kubernetes.io/job-name=${job}` })).items[0],
    { timeoutMs: 60_000, intervalMs: 100 },
  );
}

async function waitJobDone(env: NodeEnv, namespace: string, name: string, timeoutMs = 180_000): Promise<string> {
  const c = await waitFor(
    `Job ${namespace}/${name} to finish`,
    async () => {
      const job = await env.batch.readNamespacedJob({ name, namespace });
      return job.status?.conditions?.find((x) => (x.type === 'Complete' || x.type === 'Failed') && x.status === 'True');
    },
    { timeoutMs, intervalMs: 250 },
  );
  return c.type;
}

/** The pod once the named container (main, or an init container such as the sidecar) has a container ID and has started. */
async function started(env: NodeEnv, namespace: string, pod: string, container: string, timeoutMs = 120_000): Promise<V1Pod> {
  return waitFor(
    `${container} of ${namespace}/${pod} to start`,
    async () => {
      const p = await env.core.readNamespacedPod({ name: pod, namespace });
      const s = [...(p.status?.containerStatuses ?? []), ...(p.status?.initContainerStatuses ?? [])].find((x) => x.name === container);
      return s?.containerID && (s.state?.running || s.state?.terminated) ? p : undefined;
    },
    { timeoutMs, intervalMs: 50 },
  );
}

function containerId(pod: V1Pod, container: string): string {
  const s = [...(pod.status?.containerStatuses ?? []), ...(pod.status?.initContainerStatuses ?? [])].find((x) => x.name === container);
  return bareId(s?.containerID);
}

/** Samples a container's memory cgroup every SAMPLE_MS until stop(). */
function sampler(cgroupRoot: string, id: string) {
  const samples: Array<{ t: number; m: MemorySample }> = [];
  let cgroup: string | undefined;
  let running = true;
  const done = (async () => {
    while (running) {
      cgroup ??= findMemoryCgroup(cgroupRoot, id);
      const m = cgroup === undefined ? undefined : readMemory(cgroup);
      if (m !== undefined) samples.push({ t: nowMs(), m });
      await sleep(SAMPLE_MS);
    }
  })();
  return {
    samples,
    async stop() {
      running = false;
      await done;
    },
  };
}

async function main(): Promise<void> {
  if (unavailable !== undefined) throw new Error(`the real node cannot run here: ${unavailable}`);
  const cleanups: Array<() => Promise<unknown>> = [];
  let failed = true;
  try {
    log('starting the control plane and the real node (waits while another run holds the node lock)');
    // No harvester: the figures are the sidecar's, measured as before, with nothing else shipping from this machine.
    const product = await startProductOnNode('jobharvest-bench-node', [], { harvesterArgs: false });
    cleanups.push(() => product.stop(failed));
    const { env, vl } = product;
    const cgroupRoot = readFileSync(join(env.node.dir, 'cgroup-root'), 'utf8').trim();
    const containerdRoot = join(env.node.dir, 'containerd', 'root');
    const sinkHost = await env.node.expose(vl.port);
    const injected = await createNamespace(env.core, 'bench-inj', {
      'jobharvest.io/inject': 'enabled',
      'jobharvest.io/mode': 'node',
      'jobharvest.io/sink': 'loki',
      'jobharvest.io/endpoint': `http://${sinkHost}/insert/loki/api/v1/push`,
      'jobharvest.io/ttl-seconds-after-finished': '600',
    });
    const baseline = await createNamespace(env.core, 'bench-base');
    const watch = await watchPodCreations(env);
    cleanups.push(async () => watch.stop());

    // --- 1. start delay --------------------------------------------------
    const delays: Record<'baseline' | 'injected', number[]> = { baseline: [], injected: [] };
    // Where an injected Job's time goes, each from the pod's creation: the
    // sidecar's container created and started (containerd), the main
    // container's created and started.
    const steps: Record<'sidecarCreated' | 'sidecarStarted' | 'mainCreated' | 'baselineMainCreated' | 'sidecarEnd', number[]> = { sidecarCreated: [], sidecarStarted: [], mainCreated: [], baselineMainCreated: [], sidecarEnd: [] };
    let seq = 0;
    const oneJob = async (arm: 'baseline' | 'injected', record: boolean): Promise<number> => {
      const namespace = arm === 'injected' ? injected : baseline;
      const name = `start-${seq++}`;
      await env.batch.createNamespacedJob({ namespace, body: jobBody(name, 'echo started') });
      const pod = await jobPod(env, namespace, name);
      const after = await started(env, namespace, pod.metadata!.name!, 'main');
      if (arm === 'injected' && !after.spec?.initContainers?.some((c) => c.name === NAMES.container)) throw new Error(`${namespace}/${name}: no sidecar injected`);
      const created = watch.seen.get(pod.metadata!.uid!);
      if (created === undefined) throw new Error(`the pod watch never saw ${namespace}/${pod.metadata!.name}`);
      const main = criTimesMs(containerdRoot, containerId(after, 'main'));
      if (record && arm === 'injected') {
        const sidecar = criTimesMs(containerdRoot, containerId(after, NAMES.container));
        steps.sidecarCreated.push(sidecar.createdAt - created);
        steps.sidecarStarted.push(sidecar.startedAt - created);
        steps.mainCreated.push(main.createdAt - created);
      }
      if (record && arm === 'baseline') steps.baselineMainCreated.push(main.createdAt - created);
      const outcome = await waitJobDone(env, namespace, name);
      if (outcome !== 'Complete') throw new Error(`${namespace}/${name} ended ${outcome}`);
      if (record && arm === 'injected') {
        const mainEnd = criTimesMs(containerdRoot, containerId(after, 'main')).finishedAt;
        const sidecarEnd = criTimesMs(containerdRoot, containerId(after, NAMES.container)).finishedAt;
        if (mainEnd === undefined || sidecarEnd === undefined) throw new Error(`${namespace}/${name}: no FinishedAt in containerd's records`);
        steps.sidecarEnd.push(sidecarEnd - mainEnd);
      }
      return main.startedAt - created;
    };
    log('warm-up: one Job per arm, not counted');
    log(`  baseline ${fmt(await oneJob('baseline', false), 0)} ms, injected ${fmt(await oneJob('injected', false), 0)} ms`);
    for (let i = 0; i < JOBS; i++) {
      const order: Array<'baseline' | 'injected'> = i % 2 === 0 ? ['baseline', 'injected'] : ['injected', 'baseline'];
      for (const arm of order) delays[arm].push(await oneJob(arm, true));
      log(`  round ${i + 1}/${JOBS}: baseline ${fmt(delays.baseline.at(-1)!, 0)} ms, injected ${fmt(delays.injected.at(-1)!, 0)} ms`);
    }
    const med = { baseline: quantile(delays.baseline, 0.5), injected: quantile(delays.injected, 0.5) };
    const p90 = { baseline: quantile(delays.baseline, 0.9), injected: quantile(delays.injected, 0.9) };
    const startDelay = med.injected - med.baseline;
    log(`pod creation → main start, ${JOBS} Jobs each (ms):`);
    log(`  baseline  median ${fmt(med.baseline, 0)}  p90 ${fmt(p90.baseline, 0)}`);
    log(`  injected  median ${fmt(med.injected, 0)}  p90 ${fmt(p90.injected, 0)}`);
    const m = (xs: number[]) => fmt(quantile(xs, 0.5), 0);
    log(`  medians from pod creation (ms): baseline main created ${m(steps.baselineMainCreated)}, started ${fmt(med.baseline, 0)}; injected sidecar created ${m(steps.sidecarCreated)}, started ${m(steps.sidecarStarted)}, main created ${m(steps.mainCreated)}, started ${fmt(med.injected, 0)}`);
    log(`  start delay (difference of medians) ${fmt(startDelay, 0)} ms`);
    // The goal: the sidecar delays a Job's start by at most 2.5 times what one
    // container's own start costs on the same node in the same run.
    const ownStart = med.baseline - quantile(steps.baselineMainCreated, 0.5);
    log(`  baseline container's own create → start (median started − median created) ${fmt(ownStart, 0)} ms; start delay / that ${fmt(startDelay / ownStart, 2)} (goal ≤ 2.5)`);
    log(`  injected: main container's end → sidecar's end (containerd FinishedAt), median ${m(steps.sidecarEnd)} ms, p90 ${fmt(quantile(steps.sidecarEnd, 0.9), 0)} ms`);

    // --- 2. idle RSS ------------------------------------------------------
    const sidecarRun = async (name: string, script: string) => {
      await env.batch.createNamespacedJob({ namespace: injected, body: jobBody(name, script) });
      const pod = await jobPod(env, injected, name);
      const podName = pod.metadata!.name!;
      const withSidecar = await started(env, injected, podName, NAMES.container);
      const sidecar = withSidecar.spec?.initContainers?.find((c) => c.name === NAMES.container);
      const s = sampler(cgroupRoot, containerId(withSidecar, NAMES.container));
      const mainUp = await started(env, injected, podName, 'main');
      const mainStart = criTimesMs(containerdRoot, containerId(mainUp, 'main')).startedAt;
      const outcome = await waitJobDone(env, injected, name);
      await s.stop();
      if (outcome !== 'Complete') throw new Error(`${injected}/${name} ended ${outcome}`);
      if (s.samples.length === 0) throw new Error(`no cgroup sample of the sidecar of ${injected}/${podName}`);
      return { samples: s.samples, mainStart, limit: sidecar?.resources?.limits?.memory ?? 'none', request: sidecar?.resources?.requests?.memory ?? 'none' };
    };
    log('idle: an injected Job printing 20 lines, then sleeping 10 s');
    const idle = await sidecarRun('idle', `${numberedLines('idle', 20)}; sleep 10`);
    const window = idle.samples.filter((x) => x.t >= idle.mainStart + 2_000 && x.t <= idle.mainStart + 10_000);
    if (window.length < 10) throw new Error(`only ${window.length} sidecar samples during the main container's sleep`);
    const idleMedian = (f: (x: MemorySample) => number) => MiB(quantile(window.map((x) => f(x.m)), 0.5));
    const idleWs = idleMedian((x) => x.workingSet);
    log(`  sidecar, ${window.length} samples during the sleep, medians: working set ${fmt(idleWs)} MiB (max ${fmt(MiB(Math.max(...window.map((x) => x.m.workingSet))))}), total_rss ${fmt(idleMedian((x) => x.rss))} MiB, total_cache ${fmt(idleMedian((x) => x.cache))} MiB (mapped_file ${fmt(idleMedian((x) => x.mappedFile))}), usage−cache ${fmt(idleMedian((x) => x.usageNoCache))} MiB, process VmRSS ${fmt(idleMedian((x) => x.procRss))} MiB`);
    // Nothing but start-up outweighs a quiet sidecar, so the kernel's high-water
    // mark here is the start-up peak (a postStart handshake's second Node
    // process included, where a pod gets one), which happens before the API
    // reports the sidecar started and sampling begins.
    const idleHigh = MiB(Math.max(...idle.samples.map((x) => x.m.maxUsage)));
    log(`  memory.max_usage_in_bytes ${fmt(idleHigh)} MiB (start-up high-water, page cache included); injected memory request ${idle.request}, limit ${idle.limit}`);

    // --- 3. flood peak RSS ------------------------------------------------
    // Numbered lines, so that VictoriaLogs can tell a lost line from a duplicate.
    const floodLines = FLOOD_BYTES / 100;
    log(`flood: an injected Job writing ${FLOOD_BYTES / 1024 / 1024} MiB as ${floodLines} numbered 100-byte lines`);
    const flood = await sidecarRun('flood', `awk 'BEGIN { for (i = 1; i <= ${floodLines}; i++) printf "%099d\\n", i }'`);
    const peak = (f: (x: MemorySample) => number) => MiB(Math.max(...flood.samples.map((x) => f(x.m))));
    const peakWs = peak((x) => x.workingSet);
    await vl.flush();
    const received = await vl.countWithDistinct(`${exact('namespace', injected)} ${exact('job', 'flood')} ${exact('container', 'main')}`, '_msg');
    log(`  sidecar, ${flood.samples.length} samples, peaks: working set ${fmt(peakWs)} MiB, total_rss ${fmt(peak((x) => x.rss))} MiB, total_cache ${fmt(peak((x) => x.cache))} MiB, usage−cache ${fmt(peak((x) => x.usageNoCache))} MiB, process VmRSS ${fmt(peak((x) => x.procRss))} MiB, memory.max_usage_in_bytes ${fmt(peak((x) => x.maxUsage))} MiB (page cache included); injected limit ${flood.limit}`);
    log(`  lines in VictoriaLogs: ${received.total}, ${received.distinct} distinct, of ${floodLines} written`);

    failed = false;
    console.log(`start_delay_ms=${fmt(startDelay, 0)} start_delay_ratio=${fmt(startDelay / ownStart, 2)} sidecar_end_ms=${m(steps.sidecarEnd)} idle_rss_MiB=${fmt(idleWs)} flood_peak_rss_MiB=${fmt(peakWs)}`);
  } finally {
    for (const c of cleanups.reverse()) {
      try {
        await c();
      } catch (err) {
        log(`cleanup: ${String(err)}`);
      }
    }
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
