import fjp from 'fast-json-patch';
import type { Operation } from 'fast-json-patch';
import type { Job } from './kube.ts';

/**
 * The JSONPatch from the object the API server sent to the one we want. It is
 * computed, never hand-built, so escaping of keys like
 * `kubectl.kubernetes.io/default-container` (`~1`) is always right.
 * managedFields belong to the API server: they are dropped from both sides so
 * no operation ever touches them.
 */
export function createPatch(original: Job, mutated: Job): Operation[] {
  return fjp.compare(withoutManagedFields(original), withoutManagedFields(mutated));
}

export function applyPatch<T>(doc: T, ops: Operation[]): T {
  return fjp.applyPatch(structuredClone(doc), ops, true, false).newDocument as T;
}

function withoutManagedFields(job: Job): Job {
  if (!job.metadata || !('managedFields' in job.metadata)) return job;
  const { managedFields: _ignored, ...metadata } = job.metadata;
  return { ...job, metadata };
}
