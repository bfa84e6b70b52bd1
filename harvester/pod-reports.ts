// The sidecar reports of pods that went before their Job finished. An
// evicted, preempted or deleted pod is removed as soon as the Job controller
// has counted it, and its termination message (the sidecar's counts) goes
// with it; the Job finishes later, and only then is it reconciled. Watching
// the pods of injected Jobs, the leader keeps the last state of each pod
// whose sidecar had ended, until its Job's delivery record is written. Pure:
// harvester/kube.ts feeds it, reconcile reads it.
//
// Nothing here is trusted more than a listed pod: reconcile puts these pods
// through the same ownership and signed-sidecar checks. Memory is bounded:
// only ended sidecars, trimmed, at most MAX_PODS, the oldest Jobs' first out.
import type { V1Container, V1ContainerStatus, V1Pod } from '@kubernetes/client-node';
import { foreignMount } from '../src/contract/signature.ts';

export const MAX_PODS = 20_000;

/** The Job a pod's controller reference names, if it is a Job. */
function jobUidOf(pod: V1Pod): string | undefined {
  const ref = (pod.metadata?.ownerReferences ?? []).find((r) => r.controller === true);
  return ref?.kind === 'Job' && ref.apiVersion === 'batch/v1' ? ref.uid : undefined;
}

/** What reconcile reads of a pod: identity, ownership, the sidecar's spec and volumes (for its digest) and status, the pod's phase and disruption. */
function trimmed(pod: V1Pod, sidecar: V1Container, status: V1ContainerStatus): V1Pod {
  const m = pod.metadata!;
  return {
    metadata: { name: m.name, namespace: m.namespace, uid: m.uid, ownerReferences: m.ownerReferences, labels: m.labels, deletionTimestamp: m.deletionTimestamp },
    // The volumes the sidecar mounts are part of its signed digest.
    spec: { containers: [], initContainers: [sidecar], volumes: (pod.spec?.volumes ?? []).filter((v) => (sidecar.volumeMounts ?? []).some((m) => m.name === v.name)) },
    status: {
      phase: pod.status?.phase,
      reason: pod.status?.reason,
      conditions: (pod.status?.conditions ?? []).filter((c) => c.type === 'DisruptionTarget'),
      initContainerStatuses: [status],
    },
  };
}

export class PodReports {
  /** Job uid → pod uid → the pod as last seen with its sidecar ended; Map order is insertion order, oldest Job first. */
  private readonly jobs = new Map<string, Map<string, V1Pod>>();
  private size = 0;

  constructor(
    /** The sidecar's container name (the webhook's, which the signature checks again). */
    private readonly container: string,
    private readonly max = MAX_PODS,
  ) {}

  /** A pod from the watch (added, changed or deleted): kept once its sidecar has ended. */
  observe(pod: V1Pod): void {
    const job = jobUidOf(pod);
    const uid = pod.metadata?.uid;
    if (!job || !uid) return;
    const sidecar = (pod.spec?.initContainers ?? []).find((c) => c.name === this.container);
    const status = (pod.status?.initContainerStatuses ?? []).find((s) => s.name === this.container);
    if (!sidecar || !status?.state?.terminated) return;
    // Another container mounts jobharvest's volumes: its sidecar's report is not
    // trusted (reconcile would refuse it), so there is nothing worth keeping.
    if (foreignMount(pod.spec) !== undefined) return;
    let pods = this.jobs.get(job);
    if (!pods) {
      pods = new Map();
      this.jobs.set(job, pods);
    }
    if (!pods.has(uid)) this.size++;
    pods.set(uid, trimmed(pod, sidecar, status));
    while (this.size > this.max) this.dropOldest();
  }

  /** The kept pods of a Job that the API no longer lists. */
  gone(jobUid: string | undefined, listed: readonly V1Pod[]): V1Pod[] {
    const pods = jobUid ? this.jobs.get(jobUid) : undefined;
    if (!pods) return [];
    const there = new Set(listed.map((p) => p.metadata?.uid));
    return [...pods.values()].filter((p) => !there.has(p.metadata?.uid));
  }

  /** The Job's record is written: nothing more to keep for it. */
  forget(jobUid: string | undefined): void {
    if (!jobUid) return;
    const pods = this.jobs.get(jobUid);
    if (!pods) return;
    this.size -= pods.size;
    this.jobs.delete(jobUid);
  }

  get count(): number {
    return this.size;
  }

  private dropOldest(): void {
    const first = this.jobs.keys().next();
    if (first.done) return;
    this.forget(first.value);
  }
}
