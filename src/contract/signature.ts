// Proof that jobharvest wrote something a tenant could also have written.
//
// A tenant controls everything in a Job: a hand-written `jobharvest.io/status`,
// a container named `jobharvest`, `jobharvest.io/hold` or `.../delivery` set
// in advance or patched in later. The harvester acts with jobharvest's own
// identity and credentials, so it acts only on what carries an HMAC made with
// a key that only the webhook and the harvester hold (a Secret in
// jobharvest's namespace). The webhook signs what it injected; the harvester
// signs the hold and the delivery record it writes. Both sides import this file.
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { ENV_NAMES, NAMES } from './env.ts';

export const SIGNATURE_ANNOTATION = 'jobharvest.io/signature';
// v2.<key id>.<mac>; v1.<mac> (no key id) is still verified.
const PREFIX = 'v2.';
const LEGACY_PREFIX = 'v1.';
/** Below this a key is guessable; the chart generates 32 random bytes. */
export const MIN_KEY_BYTES = 16;

export type SigningKey = Buffer;

export function checkKey(key: Buffer): SigningKey {
  if (key.length < MIN_KEY_BYTES) throw new Error(`the signing key must be at least ${MIN_KEY_BYTES} bytes, got ${key.length}`);
  return key;
}

/** Keys may be stored as text in a Secret: surrounding whitespace is not part of them. */
export function keyFromText(text: string | Buffer): SigningKey {
  return checkKey(Buffer.from(String(text).trim(), 'utf8'));
}

function mac(key: SigningKey, purpose: string, parts: readonly string[]): string {
  const h = createHmac('sha256', key);
  // Length-prefixed, so no two different part lists hash the same bytes.
  for (const p of [purpose, ...parts]) h.update(`${Buffer.byteLength(p)}:${p};`);
  return h.digest('base64url');
}

/**
 * A short public name of a key, carried in each signature: a signature made
 * with another key then reads "key changed" (a key rotated or re-created
 * since), not "forged". One-way, and 48 bits of a hash say nothing usable
 * about a key of 128 bits or more. Not a proof: a tenant can write any key id,
 * and a signature is acted on only if its MAC verifies with this key.
 */
export function keyId(key: SigningKey): string {
  return createHash('sha256').update('jobharvest signing key id\0').update(key).digest('base64url').slice(0, 8);
}

export function sign(key: SigningKey, purpose: string, parts: readonly string[]): string {
  return `${PREFIX}${keyId(key)}.${mac(key, purpose, parts)}`;
}

/** What a signature says: valid; made with another key (its id given); or not a signature of this (forged, altered, malformed). */
export type SignatureCheck = { readonly ok: true } | { readonly ok: false; readonly keyChanged: string | undefined };

export function checkSignature(key: SigningKey, purpose: string, parts: readonly string[], signature: unknown): SignatureCheck {
  if (typeof signature !== 'string') return { ok: false, keyChanged: undefined };
  let id: string | undefined;
  let got: string;
  if (signature.startsWith(PREFIX)) {
    const rest = signature.slice(PREFIX.length);
    const dot = rest.indexOf('.');
    if (dot < 0) return { ok: false, keyChanged: undefined };
    id = rest.slice(0, dot);
    got = rest.slice(dot + 1);
  } else if (signature.startsWith(LEGACY_PREFIX)) {
    got = signature.slice(LEGACY_PREFIX.length);
  } else {
    return { ok: false, keyChanged: undefined };
  }
  const want = Buffer.from(mac(key, purpose, parts));
  const have = Buffer.from(got);
  // The MAC alone decides: the key id only names the key in a refusal.
  if (want.length === have.length && timingSafeEqual(want, have)) return { ok: true };
  return { ok: false, keyChanged: id !== undefined && id !== keyId(key) ? id : undefined };
}

export function verify(key: SigningKey, purpose: string, parts: readonly string[], signature: unknown): boolean {
  return checkSignature(key, purpose, parts, signature).ok;
}

type Obj = Record<string, unknown>;

const OUR_ENV = new Set(ENV_NAMES);

/**
 * The parts of the sidecar container that decide what it does and where it
 * sends, and that nothing between the webhook and the running pod changes:
 * its name, command, restart policy, the variables of the env contract and
 * the volumes the webhook mounts. Left out on purpose: fields the API server
 * defaults (`terminationMessagePath`, `imagePullPolicy`), the service-account
 * token mount the ServiceAccount admission adds to every container of a pod,
 * variables other mutating webhooks add to every container (proxies, APM
 * agents), and the image, which policy engines rewrite to a digest.
 */
export function sidecarDigest(container: Obj | undefined): string {
  if (!container) return '';
  const env = ((container.env as Obj[] | undefined) ?? []).filter((e) => OUR_ENV.has(String(e.name))).map((e) => {
    const from = e.valueFrom as Obj | undefined;
    const ref = (from?.secretKeyRef ?? from?.configMapKeyRef) as Obj | undefined;
    const field = from?.fieldRef as Obj | undefined;
    return [e.name, e.value ?? null, ref ? [from?.secretKeyRef ? 's' : 'c', ref.name, ref.key] : null, field ? field.fieldPath : null];
  });
  const mounts = ((container.volumeMounts as Obj[] | undefined) ?? [])
    .filter((m) => String(m.name).startsWith(NAMES.container))
    .map((m) => [m.name, m.mountPath, m.subPath ?? null, m.subPathExpr ?? null, m.readOnly === true]);
  const shape = [container.name, container.command ?? null, container.args ?? null, container.restartPolicy ?? null, env, mounts];
  return createHash('sha256').update(JSON.stringify(shape)).digest('base64url');
}

/** What the webhook signs at admission: the namespace, the status it recorded, and the sidecar it rendered. */
export function injectionParts(namespace: string, status: string, sidecar: Obj | undefined): string[] {
  return [namespace, status, sidecarDigest(sidecar)];
}

export const PURPOSE = {
  injection: 'injection',
  hold: 'hold',
  delivery: 'delivery',
} as const;
