// What a finished Job's pods asked for and how long they ran, for the
// delivery record: a cost tool reads it from the Job (or from an export of
// its annotations) without the pods, which the TTL deletes. Pure, and from
// the pods reconcile lists anyway: no read of its own.
import type { V1Pod } from '@kubernetes/client-node';
import type { DeliveryUsage } from '../src/contract/harvest.ts';
import { parseQuantity, podRequest } from '../src/contract/quantity.ts';

const NANO = 1_000_000_000n;
const GIB = 2 ** 30;

export interface PodUsage {
  /** The pod's requests in nano-units, as the scheduler counts them. */
  readonly cpuNano: bigint;
  readonly memoryNano: bigint;
  readonly runMs: number;
}

/** A quantity of a resource list, 0 when absent; undefined when it does not parse. */
function listed(list: Record<string, unknown> | undefined, name: string): bigint | undefined {
  const v = list?.[name];
  return v === undefined ? 0n : parseQuantity(v);
}

/**
 * The pod's request of one resource: its pod-level request when it sets one
 * (Kubernetes 1.34+), else its containers' aggregate; plus the RuntimeClass
 * overhead the admission plugin wrote into the spec.
 */
function request(pod: V1Pod, name: string): bigint | undefined {
  const spec = pod.spec;
  if (!spec) return undefined;
  const podLevel = (spec.resources?.requests as Record<string, unknown> | undefined)?.[name] ?? (spec.resources?.limits as Record<string, unknown> | undefined)?.[name];
  const base = podLevel !== undefined ? parseQuantity(podLevel) : podRequest(spec, name);
  const overhead = listed(spec.overhead as Record<string, unknown> | undefined, name);
  return base === undefined || overhead === undefined ? undefined : base + overhead;
}

const time = (t: Date | string | undefined): number | undefined => {
  if (t === undefined) return undefined;
  const ms = new Date(t).getTime();
  return Number.isFinite(ms) ? ms : undefined;
};

/**
 * One pod's requests and run time: from its start (the kubelet's
 * `status.startTime`) to the end of its last container, sidecars and init
 * containers included. Undefined for a pod that never started or has a
 * container still running, and for one whose quantities do not parse.
 */
export function podUsage(pod: V1Pod): PodUsage | undefined {
  const start = time(pod.status?.startTime);
  if (start === undefined) return undefined;
  let end: number | undefined;
  for (const s of [...(pod.status?.initContainerStatuses ?? []), ...(pod.status?.containerStatuses ?? [])]) {
    if (s.state?.running) return undefined;
    const at = time(s.state?.terminated?.finishedAt);
    if (at !== undefined && (end === undefined || at > end)) end = at;
  }
  if (end === undefined) return undefined;
  const cpuNano = request(pod, 'cpu');
  const memoryNano = request(pod, 'memory');
  if (cpuNano === undefined || memoryNano === undefined || cpuNano < 0n || memoryNano < 0n) return undefined;
  return { cpuNano, memoryNano, runMs: Math.max(0, end - start) };
}

const thousandths = (x: number) => Math.round(x * 1000) / 1000;
/** Nano-units → whole units, rounded up as the API server rounds a quantity, kept a safe integer. */
const whole = (nano: bigint, unit: bigint) => {
  const n = (nano + unit - 1n) / unit;
  return n > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(n);
};

/** The usage of the Job's pods that can be measured; undefined when none can. */
export function usageOf(pods: readonly V1Pod[]): DeliveryUsage | undefined {
  let measured = 0;
  let cpuMax = 0n;
  let memoryMax = 0n;
  let runMs = 0;
  let coreSeconds = 0;
  let gibSeconds = 0;
  for (const p of pods) {
    const u = podUsage(p);
    if (!u) continue;
    measured++;
    if (u.cpuNano > cpuMax) cpuMax = u.cpuNano;
    if (u.memoryNano > memoryMax) memoryMax = u.memoryNano;
    runMs += u.runMs;
    const seconds = u.runMs / 1000;
    coreSeconds += (Number(u.cpuNano / 1000n) / 1e6) * seconds;
    gibSeconds += (Number(u.memoryNano / NANO) / GIB) * seconds;
  }
  if (measured === 0) return undefined;
  return {
    pods: measured,
    cpu_request_millicores: whole(cpuMax, 1_000_000n),
    memory_request_bytes: whole(memoryMax, NANO),
    run_seconds: thousandths(runMs / 1000),
    cpu_core_seconds: thousandths(coreSeconds),
    memory_gib_seconds: thousandths(gibSeconds),
  };
}
