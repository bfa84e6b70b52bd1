/**
 * The sidecar's requests and limits, chosen so the pod keeps what the node and
 * the scheduler read from it: its QoS class (a Guaranteed pod keeps pinned CPUs
 * under the static CPU manager and its NUMA placement under the memory
 * manager) and, with pod-level resources, a budget its containers still fit.
 * The rules follow the API server's (pkg/apis/core/v1/helper/qos and
 * validatePodResourceConsistency in Kubernetes 1.34+).
 */
import { isObject, type Container, type LimitRangeItem, type Obj, type PodSpec } from './kube.ts';
import { effectiveRequests, parseQuantity, podRequest } from '../contract/quantity.ts';

export type QosClass = 'Guaranteed' | 'Burstable' | 'BestEffort';
/** How the sidecar was sized, as the status annotation records it. */
export type SidecarSizing = 'default' | 'guaranteed' | 'best-effort' | 'pod-level';

type ResourceList = Record<string, unknown>;
export interface Resources {
  requests?: ResourceList;
  limits?: ResourceList;
}

const QOS_RESOURCES = ['cpu', 'memory'] as const;
/** ResourceQuota keys that make the quota admission plugin refuse a container that leaves the resource out. */
const QUOTA_KEYS: Record<string, { field: 'requests' | 'limits'; resource: string }> = {
  cpu: { field: 'requests', resource: 'cpu' },
  'requests.cpu': { field: 'requests', resource: 'cpu' },
  memory: { field: 'requests', resource: 'memory' },
  'requests.memory': { field: 'requests', resource: 'memory' },
  'limits.cpu': { field: 'limits', resource: 'cpu' },
  'limits.memory': { field: 'limits', resource: 'memory' },
};

function list(v: unknown): ResourceList {
  return isObject(v) ? v : {};
}


/** The QoS class of one set of requirements; undefined when a quantity does not parse. */
function requirementsQos(requests: ResourceList, limits: ResourceList): QosClass | undefined {
  if (Object.keys(requests).length === 0 && Object.keys(limits).length === 0) return 'BestEffort';
  let qos: QosClass | undefined;
  for (const name of QOS_RESOURCES) {
    const req = requests[name] === undefined ? 0n : parseQuantity(requests[name]);
    const lim = limits[name] === undefined ? 0n : parseQuantity(limits[name]);
    if (req === undefined || lim === undefined) return undefined;
    const one: QosClass = req !== lim ? 'Burstable' : req === 0n ? 'BestEffort' : 'Guaranteed';
    if (one === 'Burstable') return one;
    if (qos === undefined) qos = one;
    else if (qos !== one) return 'Burstable';
  }
  return qos;
}

function containers(pod: PodSpec): Container[] {
  return [...(pod.initContainers ?? []), ...(pod.containers ?? [])].filter(isObject) as Container[];
}

/** Whether the pod sets pod-level cpu or memory: then its QoS class and budget come from spec.resources. */
export function hasPodLevelResources(pod: PodSpec): boolean {
  const r = list(pod.resources);
  return QOS_RESOURCES.some((n) => list(r.requests)[n] !== undefined || list(r.limits)[n] !== undefined);
}

/** The QoS class the API server will give the template's pods, from their containers (pods without pod-level resources). */
export function containerQos(pod: PodSpec): QosClass | undefined {
  let qos: QosClass | undefined;
  for (const c of containers(pod)) {
    const one = requirementsQos(effectiveRequests(c), list(list(c.resources).limits));
    if (one === undefined || one === 'Burstable') return one;
    if (qos === undefined) qos = one;
    else if (qos !== one) return 'Burstable';
  }
  return qos ?? 'BestEffort';
}

export interface SizingInput {
  pod: PodSpec;
  /** The sidecar's requests and limits for a Burstable pod (sidecar.resources). */
  standard: Resources;
  /** Requests and limits alike where every container must have both (sidecar.boundedResources). */
  bounded: ResourceList;
  /** The hard keys of the namespace's ResourceQuotas, when known. */
  quotaKeys?: readonly string[] | undefined;
}

export interface Sizing {
  resources: Resources;
  sizing: SidecarSizing;
  qos: QosClass | undefined;
  warnings: string[];
}

/**
 * The sidecar's resources for this pod:
 * - a Guaranteed pod gets a sidecar with requests equal to limits, so it stays Guaranteed;
 * - a BestEffort pod gets a sidecar without any, so it stays BestEffort (the
 *   sidecar's heap is bounded by its own V8 flags, and a LimitRange's defaults
 *   reach it as they reach the other containers);
 * - with pod-level resources, the sidecar requests only what fits in what the
 *   pod set explicitly, and otherwise shares the pod's budget;
 * - otherwise the standard sizes, plus any limit a ResourceQuota of the
 *   namespace requires of every container.
 */
export function sizeSidecar({ pod, standard, bounded, quotaKeys }: SizingInput): Sizing {
  if (hasPodLevelResources(pod)) return podLevel(pod, standard);
  const qos = containerQos(pod);
  if (qos === 'Guaranteed') {
    return { resources: { requests: { ...bounded }, limits: { ...bounded } }, sizing: 'guaranteed', qos, warnings: [] };
  }
  if (qos === 'BestEffort') return { resources: {}, sizing: 'best-effort', qos, warnings: [] };
  const resources: Resources = {};
  if (standard.requests) resources.requests = { ...standard.requests };
  if (standard.limits) resources.limits = { ...standard.limits };
  // The quota plugin refuses a pod with a container that leaves out a resource
  // the quota tracks; the user's containers set it (or the pod would be refused
  // without jobharvest too), so the sidecar sets it as well.
  for (const key of quotaKeys ?? []) {
    const k = QUOTA_KEYS[key];
    if (!k || bounded[k.resource] === undefined) continue;
    const field = (resources[k.field] ??= {});
    if (field[k.resource] !== undefined) continue;
    field[k.resource] = bounded[k.resource];
  }
  return { resources, sizing: 'default', qos, warnings: [] };
}

function podLevel(pod: PodSpec, standard: Resources): Sizing {
  const budget = list(pod.resources);
  const podReq = list(budget.requests);
  const podLim = list(budget.limits);
  const requests: ResourceList = {};
  const limits: ResourceList = {};
  const left: string[] = [];
  const names = new Set([...Object.keys(list(standard.requests)), ...Object.keys(list(standard.limits))]);
  for (const name of names) {
    const want = list(standard.requests)[name];
    const cap = list(standard.limits)[name];
    const why = podLevelFit(pod, name, want, cap, podReq[name], podLim[name]);
    if (why !== undefined) {
      left.push(`${name} (${why})`);
      continue;
    }
    if (want !== undefined) requests[name] = want;
    if (cap !== undefined) limits[name] = cap;
  }
  const resources: Resources = {};
  if (Object.keys(requests).length) resources.requests = requests;
  if (Object.keys(limits).length) resources.limits = limits;
  const warnings = left.length
    ? [`the pod sets pod-level resources, so the sidecar shares the pod's budget with no request or limit of its own for ${left.join(', ')}; no container of yours was changed`]
    : [];
  return { resources, sizing: 'pod-level', qos: undefined, warnings };
}

/** Why the sidecar may not request (and limit) this resource inside the pod's budget; undefined when it may. */
function podLevelFit(pod: PodSpec, name: string, want: unknown, cap: unknown, podReq: unknown, podLim: unknown): string | undefined {
  // Left unset, the pod's request defaults from its containers' (or its limit):
  // a request of ours would change what the pod asked for, and its QoS class.
  if (podReq === undefined) return 'the pod-level request is left to default';
  const total = parseQuantity(podReq);
  const used = podRequest(pod, name);
  const need = want === undefined ? (cap === undefined ? 0n : parseQuantity(cap)) : parseQuantity(want);
  if (total === undefined || used === undefined || need === undefined) return 'a quantity does not parse';
  if (used + need > total) return `the containers already request ${total === used ? 'all' : 'nearly all'} of the pod's ${String(podReq)}`;
  if (cap !== undefined && podLim !== undefined) {
    const c = parseQuantity(cap);
    const l = parseQuantity(podLim);
    if (c === undefined || l === undefined) return 'a quantity does not parse';
    if (c > l) return `its limit would exceed the pod's limit of ${String(podLim)}`;
  }
  return undefined;
}

const MI = 1024n * 1024n * 1_000_000_000n;
/** The sidecar's own diagnostics are bounded in bytes (sidecar/log.ts); this covers them with room. */
const OWN_LOG_MI = 8n;
/** The stdout sink writes every record to the sidecar's own log, which the kubelet rotates at 5 × 10 MiB by default. */
const STDOUT_LOG_MI = 64n;

/**
 * The sidecar's share of the pod's ephemeral storage, where the user's
 * containers set one: the kubelet evicts a pod whose emptyDirs, logs and
 * writable layers pass the sum of its containers' limits, and the sidecar's
 * state volume (up to its sizeLimit) and its own log would otherwise count
 * against the user's budget. Nothing is added where no container sets it, so
 * such a pod stays as it was.
 */
export function ephemeralStorage(pod: PodSpec, stateSizeLimit: string, stdoutSink: boolean): { requests?: string; limits?: string } {
  let request = false;
  let limit = false;
  for (const c of containers(pod)) {
    const r = list(c.resources);
    if (list(r.requests)['ephemeral-storage'] !== undefined) request = true;
    if (list(r.limits)['ephemeral-storage'] !== undefined) limit = true;
  }
  if (!request && !limit) return {};
  const state = parseQuantity(stateSizeLimit) ?? 64n * MI;
  const mi = (state + MI - 1n) / MI + (stdoutSink ? STDOUT_LOG_MI : OWN_LOG_MI);
  const size = `${mi}Mi`;
  // A limit without a request defaults the request to it, as for any container.
  return { ...(request ? { requests: size } : {}), ...(limit ? { limits: size } : {}) };
}

/** The resources as they go into the container: only the fields that are set. */
export function resourcesField(r: Resources): Obj {
  const out: Obj = {};
  if (r.requests && Object.keys(r.requests).length) out.requests = r.requests;
  if (r.limits && Object.keys(r.limits).length) out.limits = r.limits;
  return out;
}

/**
 * What a LimitRange of the namespace would refuse in the sidecar, as the
 * LimitRanger admission plugin checks a container: its defaults filled in
 * first, then min, max and maxLimitRequestRatio. Said at admission, so the
 * user is not left to find a FailedCreate Event; the user's own containers
 * meet the same rules with or without jobharvest.
 */
export function limitRangeWarnings(r: Resources, items: readonly LimitRangeItem[] | undefined): string[] {
  const out: string[] = [];
  for (const item of items ?? []) {
    const requests: ResourceList = { ...list(item.defaultRequest), ...list(r.limits), ...list(r.requests) };
    const limits: ResourceList = { ...list(item.default), ...list(r.limits) };
    const problem = (what: string) => out.push(`LimitRange ${item.name} would refuse the pods: ${what}; set sidecar.resources or sidecar.boundedResources to fit it`);
    for (const name of QOS_RESOURCES) {
      const req = requests[name] === undefined ? undefined : parseQuantity(requests[name]);
      const lim = limits[name] === undefined ? undefined : parseQuantity(limits[name]);
      const min = item.min?.[name] === undefined ? undefined : parseQuantity(item.min[name]);
      const max = item.max?.[name] === undefined ? undefined : parseQuantity(item.max[name]);
      const ratio = item.maxLimitRequestRatio?.[name] === undefined ? undefined : parseQuantity(item.maxLimitRequestRatio[name]);
      if (min !== undefined && (req === undefined || req < min || (lim !== undefined && lim < min))) {
        problem(`the sidecar's ${name} ${req === undefined ? 'has no request' : `request ${String(requests[name])}${lim !== undefined && lim < min ? ` or limit ${String(limits[name])}` : ''} is below`} the minimum ${item.min![name]}`);
      }
      if (max !== undefined && (lim === undefined || lim > max || (req !== undefined && req > max))) {
        problem(`the sidecar's ${name} ${lim === undefined ? 'has no limit' : `limit ${String(limits[name])} is above`} the maximum ${item.max![name]}`);
      }
      if (ratio !== undefined && (req === undefined || lim === undefined || req === 0n || lim * 1_000_000_000n > ratio * req)) {
        problem(`the sidecar's ${name} limit to request ratio is over ${item.maxLimitRequestRatio![name]}`);
      }
    }
  }
  return out;
}
