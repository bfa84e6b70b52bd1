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
