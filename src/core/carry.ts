import type { Job } from './kube.ts';

/**
 * The Job's labels and annotations the operator chose to carry into every
 * record (JOBHARVEST_JOB_LABELS, JOBHARVEST_JOB_ANNOTATIONS). They are
 * tenant-written text: the sinks ship them as fields, never route on them,
 * and the webhook bounds their size, since the pod spec, and with it every
 * sidecar's environment, holds them.
 */

/** Keys one list may name: each one is a field on every record. */
export const MAX_CARRIED_KEYS = 64;
/** A value longer than this is cut (labels are at most 63 characters; annotations are free text). */
export const MAX_CARRIED_VALUE_BYTES = 1024;
/** The JSON of both variables together; keys that would go past it are left out. */
export const MAX_CARRIED_TOTAL_BYTES = 8 * 1024;

const CUT_MARK = '…';

// A Kubernetes label or annotation key: an optional DNS subdomain prefix and
// a name of at most 63 characters.
const NAME = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const PREFIX = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** jobharvest's own keys configure or prove an injection: they are never copied into records. */
export function isOwnKey(key: string): boolean {
  const slash = key.indexOf('/');
  if (slash < 0) return false;
  const prefix = key.slice(0, slash).toLowerCase();
  return prefix === 'jobharvest.io' || prefix.endsWith('.jobharvest.io');
}

export function carriedKeyProblem(key: string): string | undefined {
  const slash = key.indexOf('/');
  const prefix = slash < 0 ? undefined : key.slice(0, slash);
  const name = slash < 0 ? key : key.slice(slash + 1);
  if (prefix !== undefined && (prefix.length > 253 || !PREFIX.test(prefix))) return `${JSON.stringify(key.slice(0, 80))} is not a label or annotation key (bad prefix)`;
  if (name.length > 63 || !NAME.test(name)) return `${JSON.stringify(key.slice(0, 80))} is not a label or annotation key`;
  if (isOwnKey(key)) return `${key} is jobharvest's own key, which is never carried`;
  return undefined;
}

export interface Carried {
  /** Compact JSON for JOBHARVEST_JOB_LABELS; undefined when no named label is present. */
  labels: string | undefined;
  /** Compact JSON for JOBHARVEST_JOB_ANNOTATIONS; undefined when no named annotation is present. */
  annotations: string | undefined;
  warnings: string[];
}

/**
 * Reads the named keys from the Job: a label the Job lacks is taken from its
 * pod template (where many tools put them), an annotation only from the Job.
 * Only keys present are carried, in the order the operator listed them.
 */
export function carriedMetadata(job: Job, keys: { labels: readonly string[]; annotations: readonly string[] }): Carried {
  const warnings: string[] = [];
  const jobLabels = job.metadata?.labels ?? {};
  const podLabels = job.spec?.template?.metadata?.labels ?? {};
  const jobAnnotations = job.metadata?.annotations ?? {};
  let budget = MAX_CARRIED_TOTAL_BYTES;
  // One warning for each kind of cut, however many keys: the API server bounds the warnings it passes on.
  const cutKeys: string[] = [];
  const dropped: string[] = [];

  const collect = (kind: string, names: readonly string[], lookup: (k: string) => unknown): string | undefined => {
    const out: Record<string, string> = {};
    let any = false;
    // The braces of the object.
    let size = 2;
    for (const key of names) {
      // Checked at start-up too; kept here because a wrong copy would ship the injection's own proof.
      if (isOwnKey(key) || Object.hasOwn(out, key)) continue;
      const raw = lookup(key);
      if (typeof raw !== 'string') continue;
      const value = cut(raw, MAX_CARRIED_VALUE_BYTES);
      if (value !== raw) cutKeys.push(`${kind} ${key} (${Buffer.byteLength(raw)} bytes)`);
      const entry = Buffer.byteLength(`${any ? ',' : ''}${JSON.stringify(key)}:${JSON.stringify(value)}`);
      if (size + entry > budget) {
        dropped.push(`${kind} ${key}`);
        continue;
      }
      out[key] = value;
      size += entry;
      any = true;
    }
    if (!any) return undefined;
    budget -= size;
    return JSON.stringify(out);
  };

  const labels = collect('label', keys.labels, (k) => (Object.hasOwn(jobLabels, k) ? jobLabels[k] : Object.hasOwn(podLabels, k) ? podLabels[k] : undefined));
  const annotations = collect('annotation', keys.annotations, (k) => (Object.hasOwn(jobAnnotations, k) ? jobAnnotations[k] : undefined));
  if (cutKeys.length) warnings.push(`carried values are cut to ${MAX_CARRIED_VALUE_BYTES} bytes: ${cutKeys.join(', ')}`);
  if (dropped.length) warnings.push(`carried labels and annotations are limited to ${MAX_CARRIED_TOTAL_BYTES} bytes in all; left out: ${dropped.join(', ')}`);
  return { labels, annotations, warnings };
}

/** At most `max` UTF-8 bytes, cut at a character boundary, with a mark that it was cut. */
function cut(s: string, max: number): string {
  if (Buffer.byteLength(s) <= max) return s;
  const room = max - Buffer.byteLength(CUT_MARK);
  let bytes = 0;
  let end = 0;
  for (const ch of s) {
    const n = Buffer.byteLength(ch);
    if (bytes + n > room) break;
    bytes += n;
    end += ch.length;
  }
  return s.slice(0, end) + CUT_MARK;
}
