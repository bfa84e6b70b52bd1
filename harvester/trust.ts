// What the harvester believes about a Job, and why. It acts with
// jobharvest's own identity and credentials, so it acts only on what it can
// verify jobharvest wrote: an injection the webhook signed, a sidecar that is
// exactly the one signed, pods the Job controls, and holds and delivery
// records it signed itself. Anything else is reported, never acted upon.
import type { V1Job, V1Pod } from '@kubernetes/client-node';
import { NAMES } from '../src/contract/env.ts';
import { DELIVERY_ANNOTATION, STATUS_ANNOTATION, type InjectionStatus } from '../src/contract/harvest.ts';
import { foreignMount, injectionProblem, keyId, PURPOSE, SIGNATURE_ANNOTATION, sidecarDigest, signatureKeyId, signedJson, verifiedJson, verifyingKeys, type VerifyingKeys } from '../src/contract/signature.ts';

export type Verified<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly why: string };

export interface VerifiedInjection {
  readonly status: InjectionStatus;
  /** The digest of the signed sidecar: every pod of the Job must carry exactly it. */
  readonly sidecarDigest: string;
  /** The sidecar's env as the webhook rendered it (plain values only): what it was told to do. */
  readonly env: Readonly<Record<string, string>>;
}

/**
 * The webhook's signature covers the namespace, the status annotation, and
 * the sidecar container in the Job's template (which the API server does not
 * let anyone change after creation): every field that decides what runs in it
 * and where its termination message comes from (src/contract/signature.ts).
 * A status written by hand, a container of the tenant's named `jobharvest`,
 * or a valid signature copied onto a different sidecar all fail here, and so
 * does a template in which another container mounts a `jobharvest-*` volume.
 */
export function verifyInjection(job: V1Job, keys: VerifyingKeys): Verified<VerifiedInjection> {
  const ann = job.metadata?.annotations ?? {};
  const podSpec = job.spec?.template?.spec;
  const problem = injectionProblem(keys, job.metadata?.namespace ?? '', ann, podSpec);
  if (problem !== undefined) return { ok: false, why: problem };
  let status: InjectionStatus;
  try {
    status = JSON.parse(ann[STATUS_ANNOTATION]!) as InjectionStatus;
  } catch {
    return { ok: false, why: 'the signed status is not JSON' };
  }
  const sidecar = (podSpec?.initContainers ?? []).find((c) => c.name === NAMES.container);
  const env: Record<string, string> = {};
  for (const e of sidecar?.env ?? []) if (e.value !== undefined) env[e.name] = e.value;
  return { ok: true, value: { status, env, sidecarDigest: sidecarDigest(podSpec) } };
}

/**
 * The Job's own pods: a controller ownerReference with the Job's uid, and
 * (when the injection is verified) exactly the sidecar that was signed, with
 * no other container (an ephemeral one added later included) mounting a
 * `jobharvest-*` volume. The `controller-uid` label used to list them is only
 * a filter: anyone can put it on a bare pod or on the template of a Job with
 * a manual selector, and the Job controller even adopts such an orphan, so
 * ownership alone does not prove the pod came from the signed template.
 */
export function ownedPods(job: V1Job, pods: readonly V1Pod[], signedSidecar?: { name: string; digest: string }): { owned: V1Pod[]; foreign: number } {
  const uid = job.metadata?.uid;
  const owned: V1Pod[] = [];
  let foreign = 0;
  for (const p of pods) {
    const ref = (p.metadata?.ownerReferences ?? []).find((r) => r.controller === true);
    const controlled = uid !== undefined && ref !== undefined && ref.uid === uid && ref.kind === 'Job' && ref.apiVersion === 'batch/v1';
    // The digest finds the sidecar by the contract's name, which the signed status names too.
    const rendered = !signedSidecar || (signedSidecar.name === NAMES.container && sidecarDigest(p.spec) === signedSidecar.digest && foreignMount(p.spec) === undefined);
    if (controlled && rendered) owned.push(p);
    else foreign++;
  }
  return { owned, foreign };
}

// Signed JSON (holds, delivery records) is the contract's: the logs command verifies records too.
export { PURPOSE, signedJson, verifiedJson };

/**
 * Whether the Job was injected and recorded under one key that the harvester
 * no longer holds (dropped from signing.previousKeys): then neither the
 * injection nor the record can be verified, and the harvester would only
 * write "not harvested" over a record it wrote itself. It leaves the Job as
 * it is. Only key ids are compared, and a tenant can write any: all a tenant
 * gains is no report on their own Job, which holds, ships and signs nothing.
 */
export function recordedUnderDroppedKey(job: V1Job, keys: VerifyingKeys): boolean {
  const ann = job.metadata?.annotations ?? {};
  const injected = signatureKeyId(ann[SIGNATURE_ANNOTATION]);
  if (injected === undefined || verifyingKeys(keys).some((k) => keyId(k) === injected)) return false;
  let record: unknown;
  try {
    record = JSON.parse(ann[DELIVERY_ANNOTATION] ?? '');
  } catch {
    return false;
  }
  return typeof record === 'object' && record !== null && signatureKeyId((record as { sig?: unknown }).sig) === injected;
}
