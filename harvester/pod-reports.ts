// The sidecar reports of pods that went before their Job finished. An
// evicted, preempted or deleted pod is removed as soon as the Job controller
// has counted it, and its termination message (the sidecar's counts) goes
// with it; the Job finishes later, and only then is it reconciled. Watching
// the pods of injected Jobs, the leader keeps the last state of each pod
// whose sidecar had ended, until its Job's delivery record is written. Pure:
// harvester/kube.ts feeds it, reconcile reads it.
//
// Every pod in a watched namespace is the tenant's to write, so what is kept
// is decided before anything is kept, and bounded in bytes:
//   - only a pod whose controller is a Job the leader verified (its injection
//     signature, looked up in the Job watch's cache: harvester/pod-watches.ts)
//     and whose sidecar is exactly the one signed: a tenant's own Job with a
//     container named `jobharvest` costs nothing;
//   - only a fixed-size summary (name, uid, phase, the sidecar's termination
//     state with its message capped at the kubelet's 4096 bytes), never the
//     pod's spec, env, labels or annotations;
//   - at most `budgetBytes` in all, and when that is reached the namespace
//     holding the most gives up its oldest pod: a namespace holding no more
//     than its share (the budget over the namespaces with reports) is never
//     evicted by another's flood.
import type { V1Pod } from '@kubernetes/client-node';
import { foreignMount, sidecarDigest } from '../src/contract/signature.ts';
import { TERMINATION_MESSAGE_MAX_BYTES } from '../src/contract/termination.ts';
import { nodeLost } from './report.ts';

/** The default bound of all kept summaries (`--pod-reports-mib`). */
export const DEFAULT_BUDGET_BYTES = 32 * 2 ** 20;

/**
 * Heap of one summary beyond its strings: the object, its Map entry, the
 * terminated-state object. bench/harvester/memory.ts measures the real figure
 * (about 250 bytes); this errs above it, so the bound holds.
 */
export const SUMMARY_OVERHEAD_BYTES = 320;

const MAX_NAME = 253;
const MAX_UID = 64;
const MAX_SHORT = 128;

/** What is kept of a pod: enough for reconcile to count it, nothing a tenant can grow. */
export interface PodSummary {
  readonly name: string;
  readonly uid: string;
  readonly phase: string | undefined;
  readonly deleting: boolean;
  /** The control plane marked it lost with its node (a note's wording only). */
  readonly nodeLost: boolean;
  readonly exitCode: number;
  readonly reason: string | undefined;
  readonly message: string | undefined;
  /** Its estimated heap, counted against the budget. */
  readonly bytes: number;
}

export interface PodReportsOptions {
  /** The sidecar's container name (the webhook's). */
  readonly container: string;
  /**
   * The signed sidecar digest of a Job the leader verified, by namespace and
   * uid; undefined for any other Job, whose pods are not kept.
   */
  readonly trusted: (namespace: string, jobUid: string) => string | undefined;
  readonly budgetBytes?: number;
}

interface Namespace {
  /** Job uid → pod uid → summary; Map order is insertion order, oldest first. */
  readonly jobs: Map<string, Map<string, PodSummary>>;
  bytes: number;
  pods: number;
}

/** The Job a pod's controller reference names, if it is a Job. */
function jobUidOf(pod: V1Pod): string | undefined {
  const ref = (pod.metadata?.ownerReferences ?? []).find((r) => r.controller === true);
  return ref?.kind === 'Job' && ref.apiVersion === 'batch/v1' ? ref.uid : undefined;
}

/** At most `max` UTF-8 bytes of `s`, cut at a character boundary. */
export function capBytes(s: string | undefined, max: number): string | undefined {
  if (s === undefined) return undefined;
  if (s.length * 3 <= max || Buffer.byteLength(s, 'utf8') <= max) return s;
  const b = Buffer.from(s, 'utf8').subarray(0, max);
  // A cut inside a character leaves U+FFFD at the end: drop it.
  return b.toString('utf8').replace(/\uFFFD$/, '');
}

/** V8 keeps a string one byte a character if all are Latin-1, else two. */
function heapOf(s: string | undefined): number {
  if (s === undefined) return 0;
  // eslint-disable-next-line no-control-regex
  return /[^\u0000-\u00ff]/.test(s) ? 2 * s.length : s.length;
}

export class PodReports {
  private readonly namespaces = new Map<string, Namespace>();
  private readonly budget: number;
  private bytes = 0;
  private size = 0;
  private dropped = 0;

  constructor(private readonly o: PodReportsOptions) {
    this.budget = o.budgetBytes ?? DEFAULT_BUDGET_BYTES;
  }

  /** A pod from the watch (added, changed or deleted): kept once its sidecar has ended, if its Job is verified. */
  observe(pod: V1Pod): void {
    const namespace = pod.metadata?.namespace;
    const uid = pod.metadata?.uid;
    const job = jobUidOf(pod);
    if (!namespace || !uid || !job) return;
    const status = (pod.status?.initContainerStatuses ?? []).find((s) => s.name === this.o.container);
    const terminated = status?.state?.terminated;
    if (!terminated) return;
    const digest = this.o.trusted(namespace, job);
    if (digest === undefined) return;
    const sidecar = (pod.spec?.initContainers ?? []).find((c) => c.name === this.o.container);
    // The signed digest covers the sidecar and the volumes it mounts; another
    // container mounting jobharvest's volumes voids its report (reconcile would refuse it).
    if (!sidecar || sidecarDigest(pod.spec) !== digest || foreignMount(pod.spec) !== undefined) return;
    const s = summarize(pod, terminated);
    let ns = this.namespaces.get(namespace);
    if (!ns) {
      ns = { jobs: new Map(), bytes: 0, pods: 0 };
      this.namespaces.set(namespace, ns);
    }
    let pods = ns.jobs.get(job);
    if (!pods) {
      pods = new Map();
      ns.jobs.set(job, pods);
    }
    const old = pods.get(uid);
    if (old) {
      ns.bytes -= old.bytes;
      this.bytes -= old.bytes;
    } else {
      ns.pods++;
      this.size++;
    }
    pods.set(uid, s);
    ns.bytes += s.bytes;
    this.bytes += s.bytes;
    while (this.bytes > this.budget && this.size > 0) this.evictOne();
  }

  /** The kept pods of a Job that the API no longer lists, as pods reconcile reads; each was checked against the signed sidecar when kept. */
  gone(jobUid: string | undefined, listed: readonly V1Pod[]): V1Pod[] {
    if (!jobUid) return [];
    const there = new Set(listed.map((p) => p.metadata?.uid));
    const out: V1Pod[] = [];
    for (const [namespace, ns] of this.namespaces) {
      const pods = ns.jobs.get(jobUid);
      if (!pods) continue;
      for (const s of pods.values()) if (!there.has(s.uid)) out.push(asPod(namespace, jobUid, this.o.container, s));
    }
    return out;
  }

  /** The Job's record is written, or it is gone: nothing more to keep for it. */
  forget(jobUid: string | undefined): void {
    if (!jobUid) return;
    for (const [namespace, ns] of this.namespaces) {
      const pods = ns.jobs.get(jobUid);
      if (!pods) continue;
      for (const s of pods.values()) ns.bytes -= s.bytes;
      for (const s of pods.values()) this.bytes -= s.bytes;
      ns.pods -= pods.size;
      this.size -= pods.size;
      ns.jobs.delete(jobUid);
      if (ns.pods === 0) this.namespaces.delete(namespace);
    }
  }

  /** Pods kept. */
  get count(): number {
    return this.size;
  }

  /** Their estimated heap, at most the budget. */
  get usedBytes(): number {
    return this.bytes;
  }

  /** Pods let go to stay within the budget, since the start. */
  get evicted(): number {
    return this.dropped;
  }

  /** Pods kept in one namespace. */
  countIn(namespace: string): number {
    return this.namespaces.get(namespace)?.pods ?? 0;
  }

  /** The namespace holding the most gives up its oldest pod. */
  private evictOne(): void {
    let name: string | undefined;
    let most: Namespace | undefined;
    for (const [n, ns] of this.namespaces) {
      if (!most || ns.bytes > most.bytes) {
        most = ns;
        name = n;
      }
    }
    if (!most || name === undefined) return;
    const first = most.jobs.entries().next();
    if (first.done) return;
    const [job, pods] = first.value;
    const oldest = pods.entries().next();
    if (!oldest.done) {
      const [uid, s] = oldest.value;
      pods.delete(uid);
      most.bytes -= s.bytes;
      this.bytes -= s.bytes;
      most.pods--;
      this.size--;
      this.dropped++;
    }
    if (pods.size === 0) most.jobs.delete(job);
    if (most.pods === 0) this.namespaces.delete(name);
  }
}

function summarize(pod: V1Pod, t: { exitCode: number; reason?: string; message?: string }): PodSummary {
  const name = capBytes(pod.metadata?.name ?? '', MAX_NAME)!;
  const uid = capBytes(pod.metadata?.uid ?? '', MAX_UID)!;
  const phase = capBytes(pod.status?.phase, MAX_SHORT);
  const reason = capBytes(t.reason, MAX_SHORT);
  const message = capBytes(t.message, TERMINATION_MESSAGE_MAX_BYTES);
  const bytes = SUMMARY_OVERHEAD_BYTES + heapOf(name) + heapOf(uid) + heapOf(phase) + heapOf(reason) + heapOf(message);
  // Copies, so no slice of the pod's larger strings stays reachable through them.
  return { name: flat(name), uid: flat(uid), phase: flat(phase), deleting: pod.metadata?.deletionTimestamp !== undefined, nodeLost: nodeLost(pod), exitCode: Number(t.exitCode) | 0, reason: flat(reason), message: flat(message), bytes };
}

/** A string of its own: V8 may keep a sliced or parsed string as a view into a larger one. */
function flat<T extends string | undefined>(s: T): T {
  return (s === undefined ? s : (Buffer.from(s, 'utf8').toString('utf8') as T));
}

/** The summary as the pod reconcile reads: its sidecar ended with this state, its controller the Job. */
function asPod(namespace: string, jobUid: string, container: string, s: PodSummary): V1Pod {
  return {
    metadata: {
      name: s.name,
      namespace,
      uid: s.uid,
      ownerReferences: [{ apiVersion: 'batch/v1', kind: 'Job', name: '', uid: jobUid, controller: true }],
      ...(s.deleting ? { deletionTimestamp: new Date(0) } : {}),
    },
    spec: { containers: [] },
    status: {
      ...(s.phase !== undefined ? { phase: s.phase } : {}),
      ...(s.nodeLost ? { reason: 'NodeLost' } : {}),
      initContainerStatuses: [
        {
          name: container,
          image: '',
          imageID: '',
          ready: false,
          restartCount: 0,
          state: { terminated: { exitCode: s.exitCode, ...(s.reason !== undefined ? { reason: s.reason } : {}), ...(s.message !== undefined ? { message: s.message } : {}) } },
        },
      ],
    },
  };
}
