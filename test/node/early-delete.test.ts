/**
 * Pods deleted while they start (issue 41): an active deadline, a deleted or
 * suspended Job, an eviction, a JobSet restarting its children. The kubelet's
 * SIGTERM can then reach the sidecar within milliseconds of its container's
 * start, before Node has booted and the sidecar's handler is in. The sidecar
 * is PID 1 of its container, and the kernel discards a signal sent to a
 * namespace's init that has no handler for it: such a sidecar never drains,
 * runs until the grace period's SIGKILL (exit 137) and holds the pod, and the
 * Job's Failed condition, that long.
 *
 * 1. Jobs whose pod is deleted 0, 50, 100, 200 and 500 ms after the first
 *    container of the pod started (the sidecar; the main container in the
 *    control, the same Jobs in a namespace without jobharvest), 10 pods at
 *    each offset (JOBHARVEST_EARLY_DELETE_PODS), the arms alternating
 *    A B B A. The start is containerd's own StartedAt, read from its record
 *    of the container as soon as it is written (trials run one at a time, so
 *    the first container record that appears is the pod's first container;
 *    its ID is checked against the pod's status afterwards). Printed per
 *    offset: deletion → pod gone, median and
 *    max of each arm, and the ratio of the medians. No injected pod may wait
 *    out its grace period (30 s) because of jobharvest: each is gone within
 *    the drain budget, no sidecar ends with 137, and every Job's delivery
 *    record accounts for its pod.
 * 2. Jobs whose pods are deleted as soon as containerd has a record of their
 *    main container (created, its start under way), JOBHARVEST_AT_CREATE_PODS
 *    (8) per arm, grace period 15 s in both: the same moment of the main
 *    container's start in both arms, which the offsets of 1. cannot give (a
 *    control deletion there always comes after its main container started).
 *    Printed per arm: how many main containers the kubelet still started
 *    after the deletion and how many lost their SIGTERM (137), the main
 *    container's create → start, deletion → gone, and main end → gone.
 * 3. The shape of the upstream e2e spec "should fail when exceeds active
 *    deadline": `activeDeadlineSeconds: 1` and a container that sleeps (the
 *    pause image, as upstream now uses), injected and not.
 *
 * The main container sets its SIGTERM trap first thing (busybox sh), so that
 * it ends on the kubelet's SIGTERM in both arms and what is measured is the
 * sidecar. The kubelet may still start the main container of a pod it already
 * knows is deleted (its start was under way) and signal it within a
 * millisecond; that main container then loses its own SIGTERM the same way
 * and waits out the grace period. That is the user's container's own time, as
 * it would be without jobharvest: such a pod is reported, and the sidecar may
 * add no more than its drain budget after it.
 */
import { Watch, type V1Job, type V1JobSpec, type V1Pod } from '@kubernetes/client-node';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { DELIVERY_ANNOTATION, type DeliveryRecord } from '../../harvester/report.ts';
import { NAMES } from '../../src/contract/env.ts';
import { kubeConfigFor } from '../harness/kubelet/stack.ts';
import { BUSYBOX_IMAGE, PAUSE_IMAGE } from '../harness/node/images.ts';
import { waitFor } from '../support/wait.ts';
import { createNamespace, startProductOnNode, type NodeEnv, type ProductOnNode } from '../support/node-env.ts';
import { describeRealNode } from './support.ts';

const IMAGE = BUSYBOX_IMAGE.replace('docker.io/library/', '');
const PAUSE = PAUSE_IMAGE.replace('docker.io/library/', '');
const OFFSETS_MS = [0, 50, 100, 200, 500];
const PER_OFFSET = Number(process.env.JOBHARVEST_EARLY_DELETE_PODS ?? 10);
const DEADLINE_JOBS = Number(process.env.JOBHARVEST_DEADLINE_JOBS ?? 3);
const MAIN_CREATE_PODS = Number(process.env.JOBHARVEST_AT_CREATE_PODS ?? 8);
/** The drain budget + the webhook's 5 s margin, so the webhook keeps it: a main container that loses its SIGTERM costs this, not 30 s. */
const SHORT_GRACE_SECONDS = 15;
const DRAIN_SECONDS = 10;
/** The API server's default, which the webhook keeps: it covers the drain budget + 5 s. */
const GRACE_SECONDS = 30;
const MAIN_SCRIPT = `trap 'echo stopping; exit 0' TERM; echo started; sleep 3600 & wait`;

type Arm = 'injected' | 'control';
const nowMs = () => performance.timeOrigin + performance.now();

interface PodRecord {
  last?: V1Pod;
  goneAt?: number;
}

interface Trial {
  arm: Arm;
  offsetMs: number;
  job: string;
  namespace: string;
  /** Deletion request sent, ms after containerd's StartedAt of the pod's first container. */
  sentAfterStartMs: number;
  /** ...and after the test saw that StartedAt. */
  sentAfterSeenMs: number;
  goneMs: number;
  sidecarExit: number | undefined;
  /** Whether the sidecar logged its SIGTERM, and when, in ms since its process started (and when the handler went in). */
  sidecarSignal: string | undefined;
  mainExit: number | string;
}

function stateOf(pod: V1Pod | undefined, container: string) {
  return [...(pod?.status?.initContainerStatuses ?? []), ...(pod?.status?.containerStatuses ?? [])].find((s) => s.name === container);
}

function criMessages(text: string): string[] {
  return text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => l.split(' ').slice(3).join(' '));
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

describeRealNode('pods deleted while they start', () => {
  let env: NodeEnv;
  let product: ProductOnNode | undefined;
  let injected: string;
  let control: string;
  let containerdRoot: string;
  let failed = false;
  const pods = new Map<string, PodRecord>();
  let stopWatch: (() => void) | undefined;

  beforeAll(async () => {
    // With the harvester: the delivery record must account for every pod.
    product = await startProductOnNode('jobharvest-node-early-delete');
    env = product.env;
    containerdRoot = join(env.node.dir, 'containerd', 'root');
    const sinkHost = await env.node.expose(product.vl.port);
    injected = await createNamespace(env.core, 'early-del', {
      'jobharvest.io/inject': 'enabled',
      'jobharvest.io/mode': 'node',
      'jobharvest.io/sink': 'loki',
      'jobharvest.io/endpoint': `http://${sinkHost}/insert/loki/api/v1/push`,
      'jobharvest.io/ttl-seconds-after-finished': '600',
      'jobharvest.io/drain-seconds': String(DRAIN_SECONDS),
    });
    control = await createNamespace(env.core, 'early-del-ctl');
    // A watch the API server or the client ends is started again; a deletion it missed meanwhile is found by polling (gone()).
    let watching = true;
    let req: { abort(): void } | undefined;
    const watch = async (): Promise<void> => {
      req = await new Watch(kubeConfigFor(env.cluster)).watch(
        '/api/v1/pods',
        {},
        (type, pod: V1Pod) => {
          const uid = pod.metadata?.uid;
          if (uid === undefined) return;
          let r = pods.get(uid);
          if (!r) pods.set(uid, (r = {}));
          r.last = pod;
          if (type === 'DELETED') r.goneAt ??= nowMs();
        },
        () => {
          if (watching) void watch().catch(() => {});
        },
      );
    };
    await watch();
    stopWatch = () => {
      watching = false;
      req?.abort();
    };
  });
  afterAll(async () => {
    stopWatch?.();
    await product?.stop(failed);
  });

  function scenario(title: string, timeoutMs: number, body: () => Promise<void>): void {
    it(
      title,
      async () => {
        try {
          await body();
        } catch (err) {
          failed = true;
          throw err;
        }
      },
      timeoutMs,
    );
  }

  function jobBody(name: string, spec: Partial<V1JobSpec>, container: Record<string, unknown>): V1Job {
    return {
      metadata: { name },
      spec: { backoffLimit: 0, ...spec, template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', ...container }] } } },
    };
  }

  async function podOf(namespace: string, job: string): Promise<{ name: string; uid: string }> {
    let listed = nowMs();
    const pod = await waitFor(
      `the pod of ${namespace}/${job}`,
      async () => {
        for (const [uid, r] of pods) {
          const m = r.last?.metadata;
          if (m?.namespace === namespace && m.labels?.['batch.kubernetes.io/job-name'] === job) return { name: m.name!, uid };
        }
        if (nowMs() - listed < 500) return undefined;
        listed = nowMs();
        const p = (await env.core.listNamespacedPod({ namespace, labelSelector: `batch.kubernetes.io/job-name=${job}` })).items[0];
        if (p === undefined) return undefined;
        if (!pods.has(p.metadata!.uid!)) pods.set(p.metadata!.uid!, { last: p });
        return { name: p.metadata!.name!, uid: p.metadata!.uid! };
      },
      { timeoutMs: 60_000, intervalMs: 2 },
    );
    return pod;
  }

  /** When the pod was gone: from the watch, or from a poll where the watch missed it. */
  async function gone(namespace: string, name: string, uid: string, timeoutMs: number): Promise<number> {
    const rec = pods.get(uid)!;
    let polled = 0;
    return waitFor(
      `${namespace}/${name} to be gone`,
      async () => {
        if (rec.goneAt !== undefined) return rec.goneAt;
        if (nowMs() - polled < 500) return undefined;
        polled = nowMs();
        try {
          await env.core.readNamespacedPod({ name, namespace });
          return undefined;
        } catch (err) {
          if ((err as { code?: number }).code === 404) return (rec.goneAt ??= nowMs());
          throw err;
        }
      },
      { timeoutMs, intervalMs: 10 },
    );
  }

  const criContainers = () => join(containerdRoot, 'io.containerd.grpc.v1.cri', 'containers');

  /** The containers containerd has a record of. */
  function containerIds(): Set<string> {
    return existsSync(criContainers()) ? new Set(readdirSync(criContainers())) : new Set();
  }

  /** Spins until a container not in `known` has a StartedAt in containerd's record: its ID, that StartedAt and when it was seen (epoch ms). */
  async function nextStarted(known: Set<string>, timeoutMs = 60_000): Promise<{ id: string; startedAt: number; seenAt: number }> {
    const until = nowMs() + timeoutMs;
    for (;;) {
      for (const id of containerIds()) {
        if (known.has(id)) continue;
        try {
          const status = JSON.parse(readFileSync(join(criContainers(), id, 'status'), 'utf8')) as { StartedAt?: number };
          if (typeof status.StartedAt === 'number' && status.StartedAt > 0) return { id, startedAt: status.StartedAt / 1e6, seenAt: nowMs() };
        } catch {
          // created, not yet written
        }
      }
      if (nowMs() > until) throw new Error('no container started');
      await sleep(1);
    }
  }

  /** Copies of the sidecar's log file, refreshed until the kubelet removes it. */
  function copying(file: string): { text(): string; stop(): Promise<void> } {
    let text = '';
    let on = true;
    const done = (async () => {
      while (on) {
        try {
          text = readFileSync(file, 'utf8');
        } catch {
          // not there yet, or removed
        }
        await sleep(20);
      }
    })();
    return {
      text: () => text,
      stop: async () => {
        on = false;
        await done;
      },
    };
  }

  async function trial(arm: Arm, offsetMs: number, job: string): Promise<Trial> {
    const namespace = arm === 'injected' ? injected : control;
    const known = containerIds();
    const stored = await env.batch.createNamespacedJob({ namespace, body: jobBody(job, {}, { image: IMAGE, command: ['sh', '-c', MAIN_SCRIPT] }) });
    const hasSidecar = stored.spec?.template.spec?.initContainers?.[0]?.name === NAMES.container;
    expect(hasSidecar, `${namespace}/${job}: injected or not as its arm says`).toBe(arm === 'injected');
    const pod = await podOf(namespace, job);
    const podDir = join(env.node.podLogsDir, `${namespace}_${pod.name}_${pod.uid}`);
    const first = arm === 'injected' ? NAMES.container : 'main';
    const start = await nextStarted(known);
    const copy = arm === 'injected' ? copying(join(podDir, NAMES.container, '0.log')) : undefined;
    const wait = start.startedAt + offsetMs - nowMs();
    if (wait > 0) await sleep(wait);
    const sentAt = nowMs();
    await env.core.deleteNamespacedPod({ name: pod.name, namespace });
    const rec = pods.get(pod.uid)!;
    await gone(namespace, pod.name, pod.uid, (GRACE_SECONDS + 30) * 1000);
    await copy?.stop();
    const firstId = stateOf(rec.last, first)?.containerID?.replace(/^[a-z]+:\/\//, '');
    if (firstId !== undefined) expect(firstId, `${namespace}/${pod.name}: the container whose start was timed is its ${first}`).toBe(start.id);
    const entries = criMessages(copy?.text() ?? '')
      .filter((m) => m.startsWith('{'))
      .map((m) => {
        try {
          return JSON.parse(m) as Record<string, unknown>;
        } catch {
          return {};
        }
      });
    const signal = entries.find((e) => e.msg === 'signal received, draining');
    const main = stateOf(rec.last, 'main');
    return {
      arm,
      offsetMs,
      job,
      namespace,
      sentAfterStartMs: sentAt - start.startedAt,
      sentAfterSeenMs: sentAt - start.seenAt,
      goneMs: rec.goneAt! - sentAt,
      sidecarExit: stateOf(rec.last, NAMES.container)?.state?.terminated?.exitCode,
      sidecarSignal: arm === 'control' ? undefined : signal === undefined ? 'none logged' : `${String(signal.sinceStartMs)}/${String(signal.handlerSinceStartMs)} ms`,
      mainExit: main?.state?.terminated?.exitCode ?? (main?.state?.waiting ? 'never started' : (main === undefined ? 'no status' : 'running')),
    };
  }

  async function deliveryOf(namespace: string, job: string): Promise<DeliveryRecord> {
    return waitFor(
      `the delivery record of ${namespace}/${job}`,
      async () => {
        const j = await env.batch.readNamespacedJob({ name: job, namespace });
        const raw = j.metadata?.annotations?.[DELIVERY_ANNOTATION];
        if (raw === undefined) return undefined;
        const { sig: _sig, ...d } = JSON.parse(raw) as DeliveryRecord & { sig?: string };
        return d;
      },
      { timeoutMs: 120_000, intervalMs: 500 },
    );
  }

  scenario(`Jobs whose pods are deleted ${OFFSETS_MS.join(', ')} ms after the first container started, ${PER_OFFSET} each, against the same Jobs without jobharvest`, 90 * 60_000, async () => {
    // Unmeasured: neither arm pays for the first container start after the images were imported.
    await trial('control', 1000, 'warm-ctl');
    await trial('injected', 1000, 'warm-inj');
    const trials: Trial[] = [];
    let seq = 0;
    for (let i = 0; i < PER_OFFSET; i++) {
      for (const offset of OFFSETS_MS) {
        const order: Arm[] = seq++ % 2 === 0 ? ['control', 'injected'] : ['injected', 'control'];
        for (const arm of order) trials.push(await trial(arm, offset, `del-${offset}-${i}-${arm === 'injected' ? 'inj' : 'ctl'}`));
      }
      console.log(`round ${i + 1}/${PER_OFFSET}: ${trials.slice(-2 * OFFSETS_MS.length).map((t) => `${t.arm[0]}${t.offsetMs}=${Math.round(t.goneMs)}`).join(' ')}`);
    }

    console.log('job: deletion sent after containerd StartedAt / after the test saw it (ms), deletion → gone (ms), sidecar exit, sidecar SIGTERM at / handler at (ms since its process started), main exit');
    for (const t of trials) {
      console.log(`  ${t.job}: ${Math.round(t.sentAfterStartMs)} / ${Math.round(t.sentAfterSeenMs)}, ${Math.round(t.goneMs)}, ${t.sidecarExit ?? '-'}, ${t.sidecarSignal ?? '-'}, ${t.mainExit}`);
    }
    console.log('offset (ms) | n | control gone median / max (ms) | injected gone median / max (ms) | ratio of medians | sidecar exits | main containers SIGKILLed, control / injected | deletion sent after StartedAt, injected min…max (ms)');
    for (const offset of OFFSETS_MS) {
      const arm = (a: Arm) => trials.filter((t) => t.offsetMs === offset && t.arm === a);
      const c = arm('control').map((t) => t.goneMs);
      const j = arm('injected');
      const g = j.map((t) => t.goneMs);
      const exits = new Map<string, number>();
      for (const t of j) exits.set(String(t.sidecarExit), (exits.get(String(t.sidecarExit)) ?? 0) + 1);
      const starts = j.map((t) => t.sentAfterStartMs);
      const killed = (ts: Trial[]) => ts.filter((t) => t.mainExit === 137).length;
      console.log(
        `${String(offset).padStart(6)} | ${j.length} | ${median(c).toFixed(0)} / ${Math.max(...c).toFixed(0)} | ${median(g).toFixed(0)} / ${Math.max(...g).toFixed(0)} | ${(median(g) / median(c)).toFixed(2)} | ` +
          `${[...exits].map(([k, n]) => `${k}×${n}`).join(' ')} | ${killed(arm('control'))} / ${killed(j)} | ${Math.min(...starts).toFixed(0)}…${Math.max(...starts).toFixed(0)}`,
      );
    }

    const inj = trials.filter((t) => t.arm === 'injected');
    const deliveries = [];
    for (const t of inj) deliveries.push({ job: t.job, ...(await deliveryOf(t.namespace, t.job)) });
    const unaccounted = deliveries.filter((d) => d.unaccounted !== 0 || d.pods !== 1);
    console.log(`delivery records: ${deliveries.length}, accounting for every pod: ${deliveries.length - unaccounted.length}${unaccounted.length ? `; not: ${JSON.stringify(unaccounted)}` : ''}`);

    expect(inj.filter((t) => t.sidecarExit !== 0).map((t) => `${t.job}: sidecar exit ${t.sidecarExit}`), 'every sidecar drained and exited 0 (137: SIGKILL at the end of the grace period)').toEqual([]);
    // A main container that the kubelet started as the deletion came lost its
    // own SIGTERM the same way (PID 1, its handler not yet in) and waited out
    // the grace period: the user's container's own time, as without
    // jobharvest. The sidecar may add no more than its drain budget after it.
    const ownWait = (t: Trial) => (t.mainExit === 137 ? GRACE_SECONDS * 1000 : 0);
    expect(
      inj.filter((t) => t.goneMs >= ownWait(t) + DRAIN_SECONDS * 1000).map((t) => `${t.job}: gone after ${Math.round(t.goneMs)} ms, main exit ${t.mainExit}`),
      `every injected pod gone within the drain budget (${DRAIN_SECONDS} s) of its main container's end, not after the sidecar's grace period`,
    ).toEqual([]);
    expect(unaccounted, 'every delivery record accounts for its pod').toEqual([]);
  });

  /** Spins until a container not in `known` has containerd's record, written when it is created and before it is started: its ID and when the test saw it. */
  async function nextCreated(known: Set<string>, timeoutMs = 60_000): Promise<{ id: string; seenAt: number }> {
    const until = nowMs() + timeoutMs;
    for (;;) {
      for (const id of containerIds()) if (!known.has(id) && existsSync(join(criContainers(), id, 'status'))) return { id, seenAt: nowMs() };
      if (nowMs() > until) throw new Error('no container created');
      await sleep(1);
    }
  }

  /** containerd's times of a container (epoch ms), read again every 10 ms until `stop`: the kubelet removes the record soon after the pod is gone. */
  function following(id: string): { times(): { createdAt?: number; startedAt?: number; finishedAt?: number }; stop(): Promise<void> } {
    let times: { createdAt?: number; startedAt?: number; finishedAt?: number } = {};
    let on = true;
    const ms = (ns: unknown) => (typeof ns === 'number' && ns > 0 ? ns / 1e6 : undefined);
    const done = (async () => {
      while (on) {
        try {
          const r = JSON.parse(readFileSync(join(criContainers(), id, 'status'), 'utf8')) as Record<string, unknown>;
          times = { createdAt: ms(r.CreatedAt), startedAt: ms(r.StartedAt), finishedAt: ms(r.FinishedAt) };
        } catch {
          // being rewritten, or removed
        }
        await sleep(10);
      }
    })();
    return {
      times: () => times,
      stop: async () => {
        on = false;
        await done;
      },
    };
  }

  // The offsets above are measured from the pod's first container, which in
  // the control is the main container itself: a control deletion always
  // comes after its main container started, an injected one may come while
  // the kubelet is starting the main container. Whether the sidecar makes
  // the main container lose its own SIGTERM more often than it would without
  // jobharvest is asked here at the same moment of both arms: the deletion
  // is sent as soon as containerd has a record of the main container
  // (created, its start under way).
  scenario(`Jobs whose pods are deleted as their main container is being created, ${MAIN_CREATE_PODS} each, against the same Jobs without jobharvest`, 30 * 60_000, async () => {
    interface AtCreate {
      arm: Arm;
      job: string;
      namespace: string;
      goneMs: number;
      /** Deletion sent, ms after containerd's CreatedAt of the main container. */
      sentAfterCreatedMs: number;
      /** The main container's StartedAt, ms after the deletion was sent (undefined: never started). */
      startedAfterSentMs: number | undefined;
      createToStartMs: number | undefined;
      /** Pod gone, ms after the main container's end (containerd's FinishedAt). */
      goneAfterMainEndMs: number | undefined;
      mainExit: number | string;
      sidecarExit: number | undefined;
    }
    const rows: AtCreate[] = [];
    for (let i = 0; i < MAIN_CREATE_PODS; i++) {
      for (const arm of (i % 2 === 0 ? ['control', 'injected'] : ['injected', 'control']) as Arm[]) {
        const namespace = arm === 'injected' ? injected : control;
        const job = `at-create-${i}-${arm === 'injected' ? 'inj' : 'ctl'}`;
        const known = containerIds();
        const body = jobBody(job, {}, { image: IMAGE, command: ['sh', '-c', MAIN_SCRIPT] });
        body.spec!.template.spec!.terminationGracePeriodSeconds = SHORT_GRACE_SECONDS;
        const stored = await env.batch.createNamespacedJob({ namespace, body });
        expect(stored.spec?.template.spec?.initContainers?.[0]?.name === NAMES.container, `${namespace}/${job} injected as its arm says`).toBe(arm === 'injected');
        expect(stored.spec?.template.spec?.terminationGracePeriodSeconds, `${namespace}/${job}: the grace period kept`).toBe(SHORT_GRACE_SECONDS);
        const pod = await podOf(namespace, job);
        if (arm === 'injected') known.add((await nextStarted(known)).id);
        const main = await nextCreated(known);
        const sentAt = nowMs();
        await env.core.deleteNamespacedPod({ name: pod.name, namespace });
        const times = following(main.id);
        await gone(namespace, pod.name, pod.uid, (SHORT_GRACE_SECONDS + 30) * 1000);
        await times.stop();
        const rec = pods.get(pod.uid)!;
        const mainId = stateOf(rec.last, 'main')?.containerID?.replace(/^[a-z]+:\/\//, '');
        if (mainId !== undefined) expect(mainId, `${namespace}/${pod.name}: the container timed is its main container`).toBe(main.id);
        const t = times.times();
        const mainState = stateOf(rec.last, 'main');
        rows.push({
          arm,
          job,
          namespace,
          goneMs: rec.goneAt! - sentAt,
          sentAfterCreatedMs: t.createdAt === undefined ? NaN : sentAt - t.createdAt,
          startedAfterSentMs: t.startedAt === undefined ? undefined : t.startedAt - sentAt,
          createToStartMs: t.startedAt !== undefined && t.createdAt !== undefined ? t.startedAt - t.createdAt : undefined,
          goneAfterMainEndMs: t.finishedAt === undefined ? undefined : rec.goneAt! - t.finishedAt,
          mainExit: mainState?.state?.terminated?.exitCode ?? (mainState?.state?.waiting ? 'never started' : 'no status'),
          sidecarExit: stateOf(rec.last, NAMES.container)?.state?.terminated?.exitCode,
        });
      }
    }
    const r = (n: number | undefined) => (n === undefined || Number.isNaN(n) ? '-' : String(Math.round(n)));
    console.log('job: deletion sent after main CreatedAt (ms), main StartedAt after the deletion (ms), main create → start (ms), deletion → gone (ms), main end → gone (ms), main exit, sidecar exit');
    for (const x of rows) console.log(`  ${x.job}: ${r(x.sentAfterCreatedMs)}, ${r(x.startedAfterSentMs)}, ${r(x.createToStartMs)}, ${r(x.goneMs)}, ${r(x.goneAfterMainEndMs)}, ${x.mainExit}, ${x.sidecarExit ?? '-'}`);
    console.log('arm | n | main started after the deletion | main SIGKILLed (137) | main create → start median (ms) | deletion → gone median / max (ms) | main end → gone median / max (ms)');
    for (const arm of ['control', 'injected'] as Arm[]) {
      const xs = rows.filter((x) => x.arm === arm);
      const ends = xs.map((x) => x.goneAfterMainEndMs).filter((v): v is number => v !== undefined);
      console.log(
        `${arm} | ${xs.length} | ${xs.filter((x) => x.startedAfterSentMs !== undefined).length} | ${xs.filter((x) => x.mainExit === 137).length} | ` +
          `${r(median(xs.map((x) => x.createToStartMs).filter((v): v is number => v !== undefined)))} | ${r(median(xs.map((x) => x.goneMs)))} / ${r(Math.max(...xs.map((x) => x.goneMs)))} | ${r(median(ends))} / ${r(ends.length ? Math.max(...ends) : undefined)}`,
      );
    }
    const inj = rows.filter((x) => x.arm === 'injected');
    const deliveries = [];
    for (const x of inj) deliveries.push({ job: x.job, ...(await deliveryOf(x.namespace, x.job)) });
    const unaccounted = deliveries.filter((d) => d.unaccounted !== 0 || d.pods !== 1);
    console.log(`delivery records: ${deliveries.length}, accounting for every pod: ${deliveries.length - unaccounted.length}${unaccounted.length ? `; not: ${JSON.stringify(unaccounted)}` : ''}`);
    expect(inj.filter((x) => x.sidecarExit !== 0).map((x) => `${x.job}: sidecar exit ${x.sidecarExit}`), 'every sidecar drained and exited 0').toEqual([]);
    // Whatever the main container took with its own signal, the sidecar adds at most its drain budget after it.
    const ownWait = (x: AtCreate) => (x.mainExit === 137 ? SHORT_GRACE_SECONDS * 1000 : 0);
    expect(
      inj.filter((x) => x.goneMs >= ownWait(x) + DRAIN_SECONDS * 1000).map((x) => `${x.job}: gone after ${Math.round(x.goneMs)} ms, main exit ${x.mainExit}`),
      `every injected pod gone within the drain budget (${DRAIN_SECONDS} s) of its main container's own end`,
    ).toEqual([]);
    expect(unaccounted, 'every delivery record accounts for its pod').toEqual([]);
  });

  scenario('the active-deadline spec\'s shape: activeDeadlineSeconds 1 and a container that sleeps', 20 * 60_000, async () => {
    const rows: Array<{ arm: Arm; job: string; failedMs: number; reason: string | undefined; sidecarExit: number | undefined }> = [];
    for (let i = 0; i < DEADLINE_JOBS; i++) {
      for (const arm of (i % 2 === 0 ? ['control', 'injected'] : ['injected', 'control']) as Arm[]) {
        const namespace = arm === 'injected' ? injected : control;
        const job = `deadline-${i}-${arm === 'injected' ? 'inj' : 'ctl'}`;
        const body = jobBody(job, { activeDeadlineSeconds: 1, parallelism: 1, completions: 1, backoffLimit: 6 }, { image: PAUSE });
        const createdAt = nowMs();
        const stored = await env.batch.createNamespacedJob({ namespace, body });
        expect(stored.spec?.activeDeadlineSeconds).toBe(1);
        expect(stored.spec?.template.spec?.initContainers?.[0]?.name === NAMES.container, `${namespace}/${job} injected as its arm says`).toBe(arm === 'injected');
        const pod = await podOf(namespace, job);
        const failed = await waitFor(
          `${namespace}/${job} to fail`,
          async () => {
            const j = await env.batch.readNamespacedJob({ name: job, namespace });
            const c = j.status?.conditions?.find((x) => x.type === 'Failed' && x.status === 'True');
            return c ? { at: nowMs(), reason: c.reason } : undefined;
          },
          { timeoutMs: (GRACE_SECONDS + 60) * 1000, intervalMs: 50 },
        );
        const rec = pods.get(pod.uid)!;
        await gone(namespace, pod.name, pod.uid, (GRACE_SECONDS + 30) * 1000);
        rows.push({ arm, job, failedMs: failed.at - createdAt, reason: failed.reason, sidecarExit: stateOf(rec.last, NAMES.container)?.state?.terminated?.exitCode });
      }
    }
    console.log('active deadline 1 s, pause container: Job created → Failed (ms), reason, sidecar exit');
    for (const r of rows) console.log(`  ${r.job}: ${Math.round(r.failedMs)}, ${r.reason}, ${r.sidecarExit ?? '-'}`);
    const med = (a: Arm) => median(rows.filter((r) => r.arm === a).map((r) => r.failedMs));
    console.log(`median created → Failed: control ${med('control').toFixed(0)} ms, injected ${med('injected').toFixed(0)} ms, ratio ${(med('injected') / med('control')).toFixed(2)}`);
    expect(rows.map((r) => r.reason)).toEqual(rows.map(() => 'DeadlineExceeded'));
    const inj = rows.filter((r) => r.arm === 'injected');
    expect(inj.map((r) => r.sidecarExit), 'every sidecar drained and exited 0').toEqual(inj.map(() => 0));
    expect(inj.filter((r) => r.failedMs >= (1 + DRAIN_SECONDS) * 1000).map((r) => r.job), 'every injected Job failed within its deadline and the drain budget').toEqual([]);
  });
});
