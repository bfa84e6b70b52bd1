// What the harvester believes about a Job, and why. It acts with
// jobharvest's own identity and credentials, so it acts only on what it can
// verify jobharvest wrote: an injection the webhook signed, a sidecar that is
// exactly the one signed, pods the Job controls, and holds and delivery
// records it signed itself. Anything else is reported, never acted upon.
import type { V1Job, V1Pod } from '@kubernetes/client-node';
import { NAMES } from '../src/contract/env.ts';
import { STATUS_ANNOTATION, type InjectionStatus } from '../src/contract/harvest.ts';
import { checkSignature, injectionParts, keyId, PURPOSE, sidecarDigest, sign, SIGNATURE_ANNOTATION, verify, type SigningKey } from '../src/contract/signature.ts';

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
 * let anyone change after creation). A status written by hand, a container of
 * the tenant's named `jobharvest`, or a valid signature copied onto a
 * different sidecar all fail here.
 */
export function verifyInjection(job: V1Job, key: SigningKey): Verified<VerifiedInjection> {
  const ann = job.metadata?.annotations ?? {};
  const statusText = ann[STATUS_ANNOTATION];
  if (statusText === undefined) return { ok: false, why: 'no injection status' };
  const signature = ann[SIGNATURE_ANNOTATION];
  if (signature === undefined) return { ok: false, why: 'the injection is not signed (injected offline, by an older webhook, or by hand)' };
  const sidecar = (job.spec?.template?.spec?.initContainers ?? []).find((c) => c.name === NAMES.container);
  const parts = injectionParts(job.metadata?.namespace ?? '', statusText, sidecar as Record<string, unknown> | undefined);
  const checked = checkSignature(key, PURPOSE.injection, parts, signature);
  if (!checked.ok) {
    if (checked.keyChanged !== undefined) {
      return { ok: false, why: `the injection was signed with another signing key (key id ${checked.keyChanged}, this one's is ${keyId(key)}): the key changed since the Job was created, or the webhook and the harvester hold different keys` };
    }
    return { ok: false, why: 'the injection signature does not match this Job and its sidecar (forged or altered)' };
  }
  let status: InjectionStatus;
  try {
    status = JSON.parse(statusText) as InjectionStatus;
  } catch {
    return { ok: false, why: 'the signed status is not JSON' };
  }
  const env: Record<string, string> = {};
  for (const e of sidecar?.env ?? []) if (e.value !== undefined) env[e.name] = e.value;
  return { ok: true, value: { status, env, sidecarDigest: sidecarDigest(sidecar as Record<string, unknown> | undefined) } };
}

/**
 * The Job's own pods: a controller ownerReference with the Job's uid, and
 * (when the injection is verified) exactly the sidecar that was signed. The
 * `controller-uid` label used to list them is only a filter: anyone can put
 * it on a bare pod or on the template of a Job with a manual selector, and
 * the Job controller even adopts such an orphan, so ownership alone does not
 * prove the pod came from the signed template.
 */
export function ownedPods(job: V1Job, pods: readonly V1Pod[], signedSidecar?: { name: string; digest: string }): { owned: V1Pod[]; foreign: number } {
  const uid = job.metadata?.uid;
  const owned: V1Pod[] = [];
  let foreign = 0;
  for (const p of pods) {
    const ref = (p.metadata?.ownerReferences ?? []).find((r) => r.controller === true);
    const controlled = uid !== undefined && ref !== undefined && ref.uid === uid && ref.kind === 'Job' && ref.apiVersion === 'batch/v1';
    const sidecar = signedSidecar ? (p.spec?.initContainers ?? []).find((c) => c.name === signedSidecar.name) : undefined;
    const rendered = !signedSidecar || sidecarDigest(sidecar as Record<string, unknown> | undefined) === signedSidecar.digest;
    if (controlled && rendered) owned.push(p);
    else foreign++;
  }
  return { owned, foreign };
}

/** JSON of `value` plus a `sig` bound to the Job's uid and the purpose, so it cannot be moved to another Job or field. */
export function signedJson<T extends object>(key: SigningKey, purpose: string, jobUid: string, value: T): string {
  const body = JSON.stringify(value);
  return JSON.stringify({ ...value, sig: sign(key, purpose, [jobUid, body]) });
}

/** The value without its `sig`, when jobharvest signed it for this Job; undefined otherwise. */
export function verifiedJson<T extends object>(key: SigningKey, purpose: string, jobUid: string | undefined, text: string | undefined): T | undefined {
  if (!text || !jobUid) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) return undefined;
  const { sig, ...value } = parsed as Record<string, unknown>;
  return verify(key, purpose, [jobUid, JSON.stringify(value)], sig) ? (value as T) : undefined;
}

export { PURPOSE };
