// Where a finished Job's logs went, from its pods' container statuses: the
// sidecar's termination message (src/contract/termination.ts) in each pod.
// Pure: the reconciler (harvester/reconcile.ts) reads the objects and writes
// the annotation and the Event this computes.
import type { V1ContainerStatus, V1Job, V1Pod } from '@kubernetes/client-node';
import { DELIVERY_ANNOTATION, INJECTION_MISSED_REASON, STATUS_ANNOTATION, type DeliveryRecord, type DeliveryUsage, type InjectionStatus } from '../src/contract/harvest.ts';
import { decodeTermination, type TerminationMessage } from '../src/contract/termination.ts';

export { DELIVERY_ANNOTATION };

/** What one pod's sidecar left behind. */
export type SidecarOutcome =
  /** Still running, or the pod is: nothing to say yet. */
  | { readonly kind: 'running' }
  /** Exited with a termination message; `state: running` in it means it was killed after that checkpoint. */
  | { readonly kind: 'reported'; readonly message: TerminationMessage; readonly exitCode: number | undefined }
  /** Exited without a message of ours (killed before its first checkpoint, OOM, crash). */
  | { readonly kind: 'silent'; readonly exitCode: number | undefined; readonly reason: string | undefined }
  /** Never started (the pod failed before it, or was deleted). */
  | { readonly kind: 'never-ran' }
  /**
   * Its node was lost while the sidecar ran: the status still says running
   * because no kubelet is left to say otherwise, and no kubelet can serve the
   * logs either. Nothing to wait for and nothing to harvest.
   */
  | { readonly kind: 'node-lost' };

export interface PodOutcome {
  readonly pod: string;
  readonly uid: string;
  readonly sidecar: SidecarOutcome;
}

/** The annotation's value: defined in the contract, which the logs command reads too. */
export type { DeliveryRecord, DeliveryUsage };

export interface JobEvent {
  readonly type: 'Normal' | 'Warning';
  readonly reason: string;
  readonly message: string;
}

export function injectionStatus(job: V1Job): InjectionStatus | undefined {
  const raw = job.metadata?.annotations?.[STATUS_ANNOTATION];
  if (!raw) return undefined;
  try {
    const s = JSON.parse(raw) as Partial<InjectionStatus>;
    return typeof s.container === 'string' && typeof s.sink === 'string' ? (s as InjectionStatus) : undefined;
  } catch {
    return undefined;
  }
}

/** Complete or Failed: no pod will be started any more. */
export function jobFinished(job: V1Job): boolean {
  return (job.status?.conditions ?? []).some((c) => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True');
}

/** When the Job finished: the TTL clock starts here. */
export function finishedAt(job: V1Job): Date | undefined {
  const c = (job.status?.conditions ?? []).find((x) => (x.type === 'Complete' || x.type === 'Failed') && x.status === 'True');
  const t = c?.lastTransitionTime ?? job.status?.completionTime;
  return t ? new Date(t) : undefined;
}

export function podDone(pod: V1Pod): boolean {
  return pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed';
}

function containerStatusOf(pod: V1Pod, container: string): V1ContainerStatus | undefined {
  const all = [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])];
  return all.find((s) => s.name === container);
}

/**
 * The control plane's own marks of a pod whose node stopped answering: the
 * taint manager's or the pod GC's disruption condition, or the old NodeLost
 * reason. Written through the status subresource, which tenants do not hold.
 */
export function nodeLost(pod: V1Pod): boolean {
  const disruption = (pod.status?.conditions ?? []).find((c) => c.type === 'DisruptionTarget' && c.status === 'True');
  return pod.status?.reason === 'NodeLost' || disruption?.reason === 'DeletionByTaintManager' || disruption?.reason === 'DeletionByPodGC';
}

export function sidecarOutcome(pod: V1Pod, container: string): SidecarOutcome {
  const st = containerStatusOf(pod, container);
  const terminated = st?.state?.terminated;
  if (terminated) {
    const message = decodeTermination(terminated.message);
    if (message) return { kind: 'reported', message, exitCode: terminated.exitCode };
    return { kind: 'silent', exitCode: terminated.exitCode, reason: terminated.reason };
  }
  if (nodeLost(pod)) return { kind: 'node-lost' };
  if (!podDone(pod)) return { kind: 'running' };
  // A done pod whose sidecar has no terminated state never ran it (or the
  // kubelet lost the state): either way nothing it read is known.
  return st?.lastState?.terminated ? { kind: 'silent', exitCode: st.lastState.terminated.exitCode, reason: st.lastState.terminated.reason } : { kind: 'never-ran' };
}

export function podOutcome(pod: V1Pod, container: string): PodOutcome {
  return { pod: pod.metadata?.name ?? '', uid: pod.metadata?.uid ?? '', sidecar: sidecarOutcome(pod, container) };
}

/** Whether the harvester has to read this pod's logs itself. */
export function needsHarvest(o: SidecarOutcome): boolean {
  if (o.kind === 'running' || o.kind === 'node-lost') return false;
  if (o.kind !== 'reported') return true;
  // Dead-lettered lines were refused for good by the server (4xx): sending them
  // again would be refused again, so they count as lost, not as work.
  return o.message.state === 'running' || o.message.unsent > 0 || o.message.runs.length > 0;
}

/**
 * The Job's delivery from the sidecars' own reports, before any harvest.
 * A sidecar killed after a checkpoint counts what it had shipped; the lines it
 * had not are unknown, so its pod is unaccounted.
 */
export function deliveryOf(sink: string, pods: readonly PodOutcome[]): DeliveryRecord {
  let shipped = 0;
  let lost = 0;
  let unaccounted = 0;
  for (const p of pods) {
    const o = p.sidecar;
    if (o.kind === 'reported') {
      shipped += o.message.shipped;
      lost += o.message.dead_lettered;
      if (o.message.state === 'running') unaccounted++;
      else lost += o.message.unsent;
    } else if (o.kind !== 'running') unaccounted++;
  }
  return withResumeGaps({ sink, pods: pods.length, shipped, lost, unaccounted }, pods);
}

/** Adds the sidecars' resume gaps to a delivery; the field stays out when there are none. */
export function withResumeGaps(d: DeliveryRecord, pods: readonly PodOutcome[]): DeliveryRecord {
  let gaps = 0;
  for (const p of pods) if (p.sidecar.kind === 'reported') gaps += p.sidecar.message.resume_gaps ?? 0;
  return gaps > 0 ? { ...d, resume_gaps: gaps } : d;
}

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/** The one Event `kubectl describe job` shows. */
export function deliveryEvent(d: DeliveryRecord): JobEvent {
  const head = `${plural(d.shipped, 'line')} from ${plural(d.pods, 'pod')} shipped to ${d.sink}`;
  const harvested = d.harvested ? ` (${d.harvested} by the harvester)` : '';
  const gaps = d.resume_gaps ?? 0;
  if (d.lost === 0 && d.unaccounted === 0 && gaps === 0) return { type: 'Normal', reason: 'LogsShipped', message: `${head}${harvested}` };
  const parts: string[] = [];
  if (d.lost > 0) parts.push(`${plural(d.lost, 'line')} lost`);
  if (d.unaccounted > 0) parts.push(`${plural(d.unaccounted, 'pod')} without a delivery report (lines may be lost)`);
  if (gaps > 0) parts.push(`${plural(gaps, 'resume gap')} (lines may have been lost to a log rotation while the log stream was cut)`);
  const notes = d.notes && d.notes.length > 0 ? ` (${d.notes.join('; ')})` : '';
  return { type: 'Warning', reason: 'LogsLost', message: `${head}${harvested}; ${parts.join(', ')}${notes}` };
}

/**
 * The one Event on a Job that missed injection, in place of LogsShipped or
 * LogsLost: a Warning, since the Job ran without what the namespace asked for,
 * and the counts the record carries.
 */
export function missedEvent(d: DeliveryRecord): JobEvent {
  const head = `created without the log sidecar (the webhook was unreachable or not yet installed); ${plural(d.shipped, 'line')} from ${plural(d.pods, 'pod')} shipped to ${d.sink} by the harvester`;
  const parts: string[] = [];
  if (d.lost > 0) parts.push(`${plural(d.lost, 'line')} lost`);
  if (d.unaccounted > 0) parts.push(`${plural(d.unaccounted, 'pod')} not read (lines may be lost)`);
  const notes = d.notes && d.notes.length > 0 ? ` (${d.notes.join('; ')})` : '';
  return { type: 'Warning', reason: INJECTION_MISSED_REASON, message: `${head}${parts.length > 0 ? `; ${parts.join(', ')}` : ''}${notes}` };
}

export function encodeDelivery(d: DeliveryRecord): string {
  return JSON.stringify(d);
}
