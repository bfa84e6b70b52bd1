/**
 * The small slice of the Kubernetes object model the core touches. Objects are
 * kept loose (unknown fields pass through untouched) because the webhook must
 * never drop a field the API server sent, even one newer than this code.
 */
export type Obj = Record<string, unknown>;

export interface ObjectMeta {
  name?: string;
  generateName?: string;
  namespace?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  managedFields?: unknown[];
  [k: string]: unknown;
}

export interface Container {
  name: string;
  image?: string;
  restartPolicy?: string;
  [k: string]: unknown;
}

export interface Volume {
  name: string;
  [k: string]: unknown;
}

export interface PodSpec {
  containers?: Container[];
  initContainers?: Container[];
  volumes?: Volume[];
  terminationGracePeriodSeconds?: number;
  automountServiceAccountToken?: boolean;
  [k: string]: unknown;
}

export interface PodTemplate {
  metadata?: ObjectMeta;
  spec?: PodSpec;
  [k: string]: unknown;
}

export interface JobSpec {
  template?: PodTemplate;
  ttlSecondsAfterFinished?: number;
  managedBy?: string;
  [k: string]: unknown;
}

export interface Job {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
  spec?: JobSpec;
  [k: string]: unknown;
}

/** What the core needs to know of a namespace: its name, labels and annotations. */
export interface NamespaceMeta {
  name: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  /** Being deleted: the API server refuses anything new in it. */
  terminating?: boolean;
  /** The resource names its ResourceQuotas limit (spec.hard keys), when known. */
  quotaKeys?: readonly string[];
  /** Its LimitRanges' Container items (cpu and memory only), when known. */
  limitRanges?: readonly LimitRangeItem[];
}

/** One Container item of a LimitRange, as the LimitRanger admission plugin applies it. */
export interface LimitRangeItem {
  /** The LimitRange's name, for warnings. */
  name: string;
  min?: Record<string, string>;
  max?: Record<string, string>;
  maxLimitRequestRatio?: Record<string, string>;
  default?: Record<string, string>;
  defaultRequest?: Record<string, string>;
}

export function isJob(o: unknown): o is Job {
  if (!isObject(o)) return false;
  const av = o.apiVersion;
  return o.kind === 'Job' && (av === undefined || av === 'batch/v1');
}

export function isObject(o: unknown): o is Obj {
  return typeof o === 'object' && o !== null && !Array.isArray(o);
}
