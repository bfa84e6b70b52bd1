// The Kubernetes edge of the delivery report: watches injected Jobs and, once
// a Job and its pods are done, writes the `jobharvest.io/delivery` annotation
// and one Event. The decisions are in src/harvester/report.ts.
//
// API cost per Job: one pod list, one patch of the Job, one Event. Two
// replicas never report twice: the patch carries the resourceVersion it read,
// so the slower one gets a conflict, sees the annotation and stops before
// creating the Event. State lives in the annotation only, so a restarted
// webhook picks up every finished Job not yet reported.
import { BatchV1Api, CoreV1Api, makeInformer, PatchStrategy, setHeaderOptions, type CoreV1Event, type KubeConfig, type V1Job, type V1Pod } from '@kubernetes/client-node';
import { DELIVERY_ANNOTATION, deliveryEvent, deliveryOf, encodeDelivery, injectionStatus, jobFinished, podDone, podOutcome, withResumeGaps, type Delivery, type PodOutcome } from '../harvester/report.ts';
import type { TerminationMessage } from '../contract/termination.ts';
import { finishedAt, needsHarvest } from '../harvester/report.ts';
import { holdDeadline, holdOf, holdPatch, releasePatch, type Hold } from '../harvester/hold.ts';
import { messageOf, statusOf } from './errors.ts';
import type { HarvestResult } from './harvest-runner.ts';
import type { Log } from './log.ts';

export const CONTROLLER_UID_LABEL = 'batch.kubernetes.io/controller-uid';
export const EVENT_SOURCE = 'jobharvest';

export interface DeliveryControllerOptions {
  log: Log;
  /** How long to wait for a finished Job's pods to be done before reporting what is known. */
  podsDoneTimeoutMs?: number;
  retryMs?: number;
  /**
   * Whether a namespace is this installation's: opted in under its own
   * configuration and not terminating. Elsewhere (a namespace being deleted,
   * or Jobs another installation injected) this one holds no log-reader
   * binding, so reading pods would fail with 403 until the namespace is gone.
   * Unset: every namespace.
   */
  inScope?: (namespace: string) => Promise<boolean>;
  /**
   * The harvester: for Jobs with pods whose sidecar did not deliver
   * everything, hold the Job, ship the rest through pods/log, then release.
   */
  harvester?: {
    readonly maxHoldSeconds: number;
    /** Ships one pod's missing lines; injected in tests. */
    readonly run: (pod: V1Pod, container: string, message: TerminationMessage | undefined, deadlineMs: number) => Promise<HarvestResult>;
  };
}

export interface DeliveryController {
  /** Resolves once nothing is queued or running (tests). */
  idle(): Promise<void>;
  /** Jobs being harvested by this process. */
  harvesting(): number;
  stop(): Promise<void>;
}

interface Pending {
  namespace: string;
  name: string;
  uid: string;
  firstSeen: number;
}

export async function startDeliveryController(kc: KubeConfig, opts: DeliveryControllerOptions): Promise<DeliveryController> {
  const batch = kc.makeApiClient(BatchV1Api);
  const core = kc.makeApiClient(CoreV1Api);
  const log = opts.log;
  const podsDoneTimeout = opts.podsDoneTimeoutMs ?? 5 * 60_000;
  const retryMs = opts.retryMs ?? 2000;
  const queue = new Map<string, Pending>();
  /** Harvests running in this process, by Job uid; the hold annotation is what survives a restart. */
  const harvests = new Map<string, Promise<void>>();
  /** Jobs this process has released: a Job read before the release must not start another harvest. */
  const released = new Map<string, number>();
  const RELEASED_MEMORY_MS = 10 * 60_000;
  const timers = new Set<NodeJS.Timeout>();
  let running: Promise<void> | undefined;
  let stopped = false;
  let idleWaiters: Array<() => void> = [];

  const informer = makeInformer<V1Job>(kc, '/apis/batch/v1/jobs', () => batch.listJobForAllNamespaces());
  const consider = (job: V1Job): void => {
    const uid = job.metadata?.uid;
    if (!uid || stopped) return;
    if (!injectionStatus(job) || job.metadata?.annotations?.[DELIVERY_ANNOTATION] !== undefined) return;
    if (job.metadata?.deletionTimestamp || !jobFinished(job)) return;
    if (!queue.has(uid)) queue.set(uid, { namespace: job.metadata!.namespace!, name: job.metadata!.name!, uid, firstSeen: Date.now() });
    kick();
  };
  informer.on('add', consider);
  informer.on('update', consider);
  informer.on('error', (err) => {
    if (stopped) return;
    log('warn', 'job watch failed; re-listing', { error: messageOf(err) });
    later(() => void informer.start().catch(() => {}), retryMs);
  });

  function later(f: () => void, ms: number): void {
    const t = setTimeout(() => {
      timers.delete(t);
      f();
    }, ms);
    t.unref();
    timers.add(t);
  }

  function kick(): void {
    if (running || stopped) return;
    running = drainQueue().finally(() => {
      running = undefined;
      if (queue.size > 0 && !stopped) kick();
      else {
        const w = idleWaiters;
        idleWaiters = [];
        for (const f of w) f();
      }
    });
  }

  async function drainQueue(): Promise<void> {
    const deferred: Pending[] = [];
    while (queue.size > 0 && !stopped) {
      const [uid, p] = queue.entries().next().value as [string, Pending];
      queue.delete(uid);
      try {
        if (!(await handle(p))) deferred.push(p);
      } catch (err) {
        log('warn', 'delivery report failed; retrying', { namespace: p.namespace, job: p.name, error: messageOf(err) });
        deferred.push(p);
      }
    }
    // Jobs whose pods are not done yet, or whose report failed, come back later.
    if (deferred.length > 0) later(() => {
      for (const p of deferred) if (!queue.has(p.uid)) queue.set(p.uid, p);
      kick();
    }, retryMs);
  }

  /** True when the Job is settled (reported, gone, or not ours); false to try again later. */
  async function handle(p: Pending): Promise<boolean> {
    if (harvests.has(p.uid) || released.has(p.uid)) return true;
    // Left alone, not reported: a later update of the Job considers it again.
    if (opts.inScope && !(await opts.inScope(p.namespace))) return true;
    let job: V1Job;
    try {
      job = await batch.readNamespacedJob({ name: p.name, namespace: p.namespace });
    } catch (err) {
      if (statusOf(err) === 404) return true;
      throw err;
    }
    if (job.metadata?.uid !== p.uid || job.metadata?.annotations?.[DELIVERY_ANNOTATION] !== undefined) return true;
    const status = injectionStatus(job);
    if (!status) return true;
    const list = await core.listNamespacedPod({ namespace: p.namespace, labelSelector: `${CONTROLLER_UID_LABEL}=${p.uid}` });
    const pods = list.items;
    const outcomes = pods.map((pod) => podOutcome(pod, status.container));
    const waiting = pods.some((pod) => !podDone(pod) && !pod.metadata?.deletionTimestamp) || outcomes.some((o) => o.sidecar.kind === 'running');
    if (waiting && Date.now() - p.firstSeen < podsDoneTimeout) return false;
    const delivery = deliveryOf(status.sink, outcomes);
    const h = opts.harvester;
    const work = pods.filter((_pod, i) => needsHarvest(outcomes[i]!.sidecar));
    if (!h || (work.length === 0 && !holdOf(job))) return report(p, delivery);
    // A harvest may have started or ended while the Job and its pods were read.
    if (harvests.has(p.uid) || released.has(p.uid)) return true;
    let hold = holdOf(job);
    if (!hold) {
      // First, before the TTL runs out: the pods (and their logs) stay as long as the Job does.
      const plan = holdPatch(job, finishedAt(job)?.getTime() ?? Date.now(), Date.now(), h.maxHoldSeconds)!;
      try {
        await batch.patchNamespacedJob({ name: p.name, namespace: p.namespace, body: plan.patch }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
      } catch (err) {
        const code = statusOf(err);
        if (code === 404) {
          log('warn', 'the Job was deleted before it could be held; its missing lines are lost', { namespace: p.namespace, job: p.name });
          return true;
        }
        if (code === 409) return false;
        throw err;
      }
      hold = plan.hold;
      log('info', 'holding the Job to ship what its sidecar could not', { namespace: p.namespace, job: p.name, pods: work.length, originalTtl: hold.originalTtl, maxHoldSeconds: hold.maxHoldSeconds });
    }
    const held = hold;
    const run = harvest(p, held, status.sink, status.container, pods, outcomes, h)
      .catch((err: unknown) => {
        log('warn', 'harvest failed; retrying', { namespace: p.namespace, job: p.name, error: messageOf(err) });
        later(() => {
          if (!queue.has(p.uid)) queue.set(p.uid, p);
          kick();
        }, retryMs);
      })
      .finally(() => harvests.delete(p.uid));
    harvests.set(p.uid, run);
    return true;
  }

  async function harvest(p: Pending, hold: Hold, sink: string, container: string, pods: readonly V1Pod[], outcomes: readonly PodOutcome[], h: NonNullable<DeliveryControllerOptions['harvester']>): Promise<void> {
    let shipped = 0;
    let lost = 0;
    let unaccounted = 0;
    let harvested = 0;
    for (let i = 0; i < pods.length; i++) {
      const o = outcomes[i]!.sidecar;
      const message = o.kind === 'reported' ? o.message : undefined;
      shipped += message?.shipped ?? 0;
      // Refused for good by the server: not sent again, lost.
      lost += message?.dead_lettered ?? 0;
      if (!needsHarvest(o)) continue;
      const deadlineMs = Math.max(1000, holdDeadline(hold) - Date.now());
      try {
        const r = await h.run(pods[i]!, container, message, deadlineMs);
        shipped += r.shipped;
        harvested += r.shipped;
        lost += r.lost;
        log(r.lost === 0 ? 'info' : 'warn', 'harvested a pod', { namespace: p.namespace, job: p.name, pod: pods[i]!.metadata?.name, ...r });
      } catch (err) {
        // The pod's logs cannot be read (gone, forbidden): nobody knows how many lines it had.
        unaccounted++;
        log('warn', 'could not harvest a pod; its missing lines are unaccounted', { namespace: p.namespace, job: p.name, pod: pods[i]!.metadata?.name, error: messageOf(err) });
      }
    }
    const delivery = withResumeGaps({ sink, pods: pods.length, shipped, lost, unaccounted, harvested }, outcomes);
    await release(p, hold, delivery);
  }

  async function release(p: Pending, hold: Hold, delivery: Delivery): Promise<void> {
    for (;;) {
      let job: V1Job;
      try {
        job = await batch.readNamespacedJob({ name: p.name, namespace: p.namespace });
      } catch (err) {
        if (statusOf(err) === 404) return;
        throw err;
      }
      // Released already (by a former leader that finished after all).
      if (job.metadata?.uid !== p.uid || job.metadata?.annotations?.[DELIVERY_ANNOTATION] !== undefined) return;
      try {
        await batch.patchNamespacedJob({ name: p.name, namespace: p.namespace, body: releasePatch(job, holdOf(job) ?? hold, delivery) }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
      } catch (err) {
        const code = statusOf(err);
        if (code === 404) return;
        if (code === 409) continue;
        throw err;
      }
      const ev = deliveryEvent(delivery);
      try {
        await core.createNamespacedEvent({ namespace: p.namespace, body: jobEvent(job, ev.type, ev.reason, ev.message) });
      } catch (err) {
        log('warn', 'could not record the delivery Event; the annotation is there', { namespace: p.namespace, job: p.name, error: messageOf(err) });
      }
      const now = Date.now();
      released.set(p.uid, now);
      // The informer's view catches up within moments; ten minutes is plenty and keeps the map small.
      for (const [uid, at] of released) {
        if (now - at < RELEASED_MEMORY_MS) break;
        released.delete(uid);
      }
      log('info', 'released the Job', { namespace: p.namespace, job: p.name, ttlSecondsAfterFinished: hold.originalTtl, ...delivery });
      return;
    }
  }

  async function report(p: Pending, delivery: Delivery): Promise<boolean> {
    // Read again: a harvest may have taken long and changed the Job.
    let job: V1Job;
    try {
      job = await batch.readNamespacedJob({ name: p.name, namespace: p.namespace });
    } catch (err) {
      if (statusOf(err) === 404) return true;
      throw err;
    }
    if (job.metadata?.uid !== p.uid || job.metadata?.annotations?.[DELIVERY_ANNOTATION] !== undefined) return true;
    try {
      await batch.patchNamespacedJob(
        {
          name: p.name,
          namespace: p.namespace,
          body: { metadata: { resourceVersion: job.metadata?.resourceVersion, annotations: { [DELIVERY_ANNOTATION]: encodeDelivery(delivery) } } },
        },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      );
    } catch (err) {
      const code = statusOf(err);
      if (code === 404) return true;
      // Changed meanwhile (maybe reported by another replica): look again.
      if (code === 409) return false;
      throw err;
    }
    const ev = deliveryEvent(delivery);
    try {
      await core.createNamespacedEvent({ namespace: p.namespace, body: jobEvent(job, ev.type, ev.reason, ev.message) });
    } catch (err) {
      log('warn', 'could not record the delivery Event; the annotation is there', { namespace: p.namespace, job: p.name, error: messageOf(err) });
    }
    log('info', 'delivery reported', { namespace: p.namespace, job: p.name, ...delivery });
    return true;
  }

  try {
    await informer.start();
  } catch (err) {
    log('warn', 'job list failed; will retry', { error: messageOf(err) });
    later(() => void informer.start().catch(() => {}), retryMs);
  }

  return {
    idle: () =>
      !running && queue.size === 0
        ? Promise.resolve()
        : new Promise<void>((resolve) => {
            idleWaiters.push(resolve);
          }),
    async stop() {
      stopped = true;
      for (const t of timers) clearTimeout(t);
      await informer.stop();
      await running;
    },
    harvesting: () => harvests.size,
  };
}

/** A core/v1 Event about a Job, as `kubectl describe job` lists them. */
export function jobEvent(job: V1Job, type: 'Normal' | 'Warning', reason: string, message: string): CoreV1Event {
  const now = new Date();
  return {
    metadata: { generateName: `${job.metadata?.name ?? 'job'}.`, namespace: job.metadata?.namespace },
    involvedObject: { apiVersion: 'batch/v1', kind: 'Job', name: job.metadata?.name, namespace: job.metadata?.namespace, uid: job.metadata?.uid },
    type,
    reason,
    message,
    source: { component: EVENT_SOURCE },
    reportingComponent: EVENT_SOURCE,
    reportingInstance: process.env.POD_NAME ?? EVENT_SOURCE,
    firstTimestamp: now,
    lastTimestamp: now,
    count: 1,
  };
}
