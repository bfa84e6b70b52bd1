// Names the webhook writes at admission and the harvester reads back. Both
// programs import this file; neither imports the other.

/** Set on every Job the webhook injected and signed: the harvester watches only these. */
export const INJECTED_LABEL = 'jobharvest.io/injected';
/** The original TTL while the harvester holds a Job (signed by the harvester). */
export const HOLD_ANNOTATION = 'jobharvest.io/hold';
/**
 * The Event reason, on a Job that ran without the sidecar in a namespace that
 * injects (created while the webhook was unreachable or not yet installed),
 * that the harvester found and recorded.
 */
export const INJECTION_MISSED_REASON = 'InjectionMissed';
/** Where a finished Job's logs went (signed by the harvester). */
export const DELIVERY_ANNOTATION = 'jobharvest.io/delivery';
/** What the webhook recorded about an injection (jobharvest.io/status). */
export const STATUS_ANNOTATION = 'jobharvest.io/status';

/** What the status annotation records, so a reader can tell what jobharvest changed. */
export interface InjectionStatus {
  version: string;
  mode: 'node' | 'api';
  sink: string;
  container: string;
  volumes: string[];
  ttlSecondsAfterFinished: number | null;
  /** The controller the TTL was left to (kind and name), when another controller owns the Job. */
  ttlLeftTo?: string;
  /** How the sidecar's requests and limits were chosen: default, guaranteed, best-effort or pod-level. */
  resources?: string;
  terminationGracePeriodSeconds: number | null;
  defaultContainer: string | null;
}
/** Where a Job's logs can be read: written at admission, rewritten by the harvester once the Job is done. */
export const LOGS_URL_ANNOTATION = 'jobharvest.io/logs-url';

/**
 * What the pods of a Job asked for and how long they ran, for a cost tool:
 * the harvester reads it from the pods it lists anyway (no other read). A
 * fixed set of numbers, so the record's size does not grow with the pods.
 */
export interface DeliveryUsage {
  /** Pods measured: listed at the record with a start time and an end (pods already gone are not). */
  readonly pods: number;
  /** One pod's cpu request, as the scheduler counts it (containers, sidecars, init containers, pod-level resources, overhead); the largest when the pods differ. */
  readonly cpu_request_millicores: number;
  /** One pod's memory request, counted the same way, in bytes. */
  readonly memory_request_bytes: number;
  /** The pods' run times summed: each from its start to its last container's end. */
  readonly run_seconds: number;
  /** Σ cpu request × run time, over the pods measured. */
  readonly cpu_core_seconds: number;
  /** Σ memory request × run time, in GiB-seconds. */
  readonly memory_gib_seconds: number;
}

/**
 * The delivery record's value (the annotation jobharvest.io/delivery, signed
 * by the harvester for the Job's uid). `lost` counts lines known lost;
 * `unaccounted` pods left no count at all. Fields are only ever added: the
 * signature covers the JSON as written, so a record written before a field
 * existed still verifies.
 */
export interface DeliveryRecord {
  readonly sink: string;
  readonly pods: number;
  readonly shipped: number;
  readonly lost: number;
  readonly unaccounted: number;
  /** Lines the harvester shipped after the sidecar (included in `shipped`). */
  readonly harvested?: number;
  /**
   * api mode: log streams the sidecars resumed past a kubelet rotation. The
   * lines in between went into rotated files that pods/log does not serve, so
   * neither the sidecar nor a harvest can ship them, and their number is unknown.
   */
  readonly resume_gaps?: number;
  /**
   * Why pods were not harvested or are unaccounted, one short line each
   * (a forged sidecar, a destination not approved, a node lost).
   */
  readonly notes?: readonly string[];
  /** What the pods requested and how long they ran; absent when no pod could be measured. */
  readonly usage?: DeliveryUsage;
  /**
   * `missed`: the Job ran without the sidecar, created while the webhook was
   * unreachable or not yet installed (harvester/missed.ts); every line in
   * `shipped` is one the harvester read through pods/log. Absent otherwise.
   */
  readonly injection?: 'missed';
}

const count = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;
const amount = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v >= 0;

/**
 * A delivery record's value as a reader may use it: every count a
 * non-negative whole number, or undefined. Whether jobharvest wrote it is the
 * signature's to say (checkSignedJson in signature.ts), not this.
 */
export function parseDelivery(v: unknown): DeliveryRecord | undefined {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return undefined;
  const d = v as Record<string, unknown>;
  if (typeof d.sink !== 'string' || !count(d.pods) || !count(d.shipped) || !count(d.lost) || !count(d.unaccounted)) return undefined;
  if (d.harvested !== undefined && !count(d.harvested)) return undefined;
  if (d.resume_gaps !== undefined && !count(d.resume_gaps)) return undefined;
  if (d.notes !== undefined && !(Array.isArray(d.notes) && d.notes.every((n) => typeof n === 'string'))) return undefined;
  if (d.injection !== undefined && d.injection !== 'missed') return undefined;
  if (d.usage !== undefined) {
    const u = d.usage as Record<string, unknown>;
    if (typeof u !== 'object' || u === null || !count(u.pods) || !count(u.cpu_request_millicores) || !count(u.memory_request_bytes) || !amount(u.run_seconds) || !amount(u.cpu_core_seconds) || !amount(u.memory_gib_seconds)) return undefined;
  }
  return d as unknown as DeliveryRecord;
}
