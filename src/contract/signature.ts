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
import { NAMES } from './env.ts';
import { STATUS_ANNOTATION } from './harvest.ts';

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

/**
 * The key that signs, and keys that signed before a rotation and are kept
 * only to verify (the chart's `signing.previousKeys`): Jobs admitted, held or
 * recorded under the old key stay jobharvest's until the operator drops it.
 * Nothing signs with a previous key: every signing path takes `signingKeyOf`.
 */
export interface KeyRing {
  readonly current: SigningKey;
  readonly previous: readonly SigningKey[];
}

/** One key (the webhook's) or a ring (the harvester's): what verification takes. */
export type VerifyingKeys = SigningKey | KeyRing;

/** A ring of the current key and the previous ones, without a previous key equal to the current one or to another. */
export function keyRing(current: SigningKey, previous: readonly SigningKey[] = []): KeyRing {
  const kept: SigningKey[] = [];
  for (const k of previous) if (!k.equals(current) && !kept.some((x) => x.equals(k))) kept.push(k);
  return { current, previous: kept };
}

function ringOf(keys: VerifyingKeys): KeyRing {
  return Buffer.isBuffer(keys) ? { current: keys, previous: [] } : keys;
}

/** The only key anything signs with: the current one. */
export function signingKeyOf(keys: VerifyingKeys): SigningKey {
  return ringOf(keys).current;
}

/** Every key a signature may verify with, the current one first. */
export function verifyingKeys(keys: VerifyingKeys): SigningKey[] {
  const r = ringOf(keys);
  return [r.current, ...r.previous];
}

/** How a ring names its keys in a message: "abcd1234" or "abcd1234; previous keys efgh5678, …". */
export function describeKeys(keys: VerifyingKeys): string {
  const r = ringOf(keys);
  const prev = r.previous.map(keyId);
  return prev.length === 0 ? keyId(r.current) : `${keyId(r.current)}; previous keys ${prev.join(', ')}`;
}

/**
 * What a signature says: valid (and with which key); made with a key this
 * side does not hold (its id given); or not a signature of this (forged,
 * altered, malformed).
 */
export type SignatureCheck = { readonly ok: true; readonly keyId: string } | { readonly ok: false; readonly keyChanged: string | undefined };

export function checkSignature(keys: VerifyingKeys, purpose: string, parts: readonly string[], signature: unknown): SignatureCheck {
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
  const have = Buffer.from(got);
  const all = verifyingKeys(keys);
  const ids = all.map(keyId);
  // The key id selects the key to try first; the MAC alone decides, so the
  // others are tried too (a v1 signature names none, and an id is not a proof).
  const order = all.map((_k, i) => i).sort((a, b) => Number(ids[b] === id) - Number(ids[a] === id));
  for (const i of order) {
    const want = Buffer.from(mac(all[i]!, purpose, parts));
    if (want.length === have.length && timingSafeEqual(want, have)) return { ok: true, keyId: ids[i]! };
  }
  return { ok: false, keyChanged: id !== undefined && !ids.includes(id) ? id : undefined };
}

export function verify(keys: VerifyingKeys, purpose: string, parts: readonly string[], signature: unknown): boolean {
  return checkSignature(keys, purpose, parts, signature).ok;
}

type Obj = Record<string, unknown>;

const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const list = (v: unknown): Obj[] => (Array.isArray(v) ? v.filter(isObj) : []);

/** The prefix of every volume the webhook adds; a volume under it is jobharvest's to mount. */
export const VOLUME_PREFIX = `${NAMES.container}-`;

/**
 * Where a container other than the sidecar mounts one of jobharvest's volumes
 * (`jobharvest-*`): the node's pod logs, the sidecar's token or its
 * checkpoints. The webhook skips such a template as a name conflict, and an
 * injection whose pod does it does not verify: that container could write
 * what the sidecar reads, or read what only the sidecar may.
 */
export function foreignMount(spec: unknown): string | undefined {
  if (!isObj(spec)) return undefined;
  const groups: Array<[string, Obj[]]> = [
    ['init container', list(spec.initContainers)],
    ['container', list(spec.containers)],
    ['ephemeral container', list(spec.ephemeralContainers)],
  ];
  for (const [kind, containers] of groups) {
    for (const c of containers) {
      if (kind === 'init container' && c.name === NAMES.container) continue;
      const m = list(c.volumeMounts).find((v) => String(v.name).startsWith(VOLUME_PREFIX));
      if (m) return `${kind} ${JSON.stringify(String(c.name).slice(0, 64))} mounts the volume ${JSON.stringify(String(m.name).slice(0, 64))}, which is jobharvest's`;
    }
  }
  return undefined;
}

/**
 * A value with object keys sorted and empty values dropped: the webhook
 * renders keys in its own order and the API server in its struct order, and
 * the API server omits empty strings, `false` and empty lists.
 */
function canonical(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(canonical);
  if (!isObj(v)) return v;
  const out: Obj = {};
  for (const k of Object.keys(v).sort()) {
    const x = v[k];
    if (x === undefined || x === null || x === '' || x === false || (Array.isArray(x) && x.length === 0)) continue;
    out[k] = canonical(x);
  }
  return out;
}

/**
 * The image's repository, without tag or digest, with Docker's implied
 * registry and `library/` spelled out. A policy engine that pins `repo:tag`
 * to `repo:tag@sha256:…` or `repo@sha256:…` leaves it unchanged; a mirror in
 * another registry does not. Tenants cannot push to the operator's repository,
 * so any tag or digest of it runs code the operator published.
 */
export function imageRepository(image: unknown): string {
  let ref = String(image ?? '').trim();
  const at = ref.indexOf('@');
  if (at >= 0) ref = ref.slice(0, at);
  const colon = ref.lastIndexOf(':');
  if (colon > ref.lastIndexOf('/')) ref = ref.slice(0, colon);
  const parts = ref.split('/');
  const first = parts[0] ?? '';
  const hasRegistry = parts.length > 1 && (first.includes('.') || first.includes(':') || first === 'localhost');
  if (!hasRegistry) parts.unshift('docker.io');
  if (parts[0] === 'docker.io' && parts.length === 2) parts.splice(1, 0, 'library');
  return parts.join('/');
}

/** Defaults the API server fills in on a container's env var. */
function envVar(e: Obj): unknown {
  const from = isObj(e.valueFrom) ? e.valueFrom : undefined;
  const field = from && isObj(from.fieldRef) ? { ...from.fieldRef, apiVersion: from.fieldRef.apiVersion ?? 'v1' } : undefined;
  return canonical({ ...e, ...(from ? { valueFrom: { ...from, ...(field ? { fieldRef: field } : {}) } } : {}) });
}

/**
 * What a volume is, without its file modes and emptyDir size: those the API
 * server defaults or canonicalizes (`defaultMode: 420`, a quantity's
 * spelling), and neither changes what the sidecar reads from it.
 */
function volumeSource(v: Obj | undefined): unknown {
  if (!v) return null;
  const { name: _name, ...source } = v;
  const strip = (x: unknown): unknown => {
    if (Array.isArray(x)) return x.map(strip);
    if (!isObj(x)) return x;
    const out: Obj = {};
    for (const [k, y] of Object.entries(x)) if (k !== 'defaultMode' && k !== 'mode') out[k] = strip(y);
    return out;
  };
  const s = strip(source) as Obj;
  if (isObj(s.emptyDir)) s.emptyDir = {};
  if (isObj(s.projected)) {
    s.projected = {
      ...s.projected,
      sources: list(s.projected.sources).map((src) =>
        isObj(src.serviceAccountToken) ? { ...src, serviceAccountToken: { expirationSeconds: 3600, ...src.serviceAccountToken } } : src,
      ),
    };
  }
  return canonical(s);
}

const SERVICE_ACCOUNT_PATH = '/var/run/secrets/kubernetes.io/serviceaccount';
const SERVICE_ACCOUNT_VOLUME = JSON.stringify(
  volumeSource({
    name: '',
    projected: {
      sources: [
        { serviceAccountToken: { path: 'token', expirationSeconds: 3607 } },
        { configMap: { name: 'kube-root-ca.crt', items: [{ key: 'ca.crt', path: 'ca.crt' }] } },
        { downwardAPI: { items: [{ path: 'namespace', fieldRef: { apiVersion: 'v1', fieldPath: 'metadata.namespace' } }] } },
      ],
    },
  }),
);

/**
 * The token mount the ServiceAccount admission plugin adds to every container
 * of a pod whose token is automounted, exactly as it adds it: the pod's own
 * token, which the sidecar would get without it in api mode anyway.
 */
function serviceAccountMount(m: Obj, volume: Obj | undefined): boolean {
  return String(m.name).startsWith('kube-api-access-') && m.mountPath === SERVICE_ACCOUNT_PATH && m.readOnly === true && !m.subPath && !m.subPathExpr && JSON.stringify(volumeSource(volume)) === SERVICE_ACCOUNT_VOLUME;
}

/**
 * The env var the Job controller adds to every container, init containers
 * included, of an Indexed Job's pods (JobSet's children are Indexed), exactly
 * as it adds it: the pod's own completion index, from the pod's own annotation.
 */
function jobControllerIndexEnv(e: Obj): boolean {
  const from = isObj(e.valueFrom) ? e.valueFrom : undefined;
  const field = from && isObj(from.fieldRef) ? from.fieldRef : undefined;
  return (
    e.name === 'JOB_COMPLETION_INDEX' &&
    e.value === undefined &&
    field !== undefined &&
    Object.keys(from!).length === 1 &&
    // The annotation, or the label of the same name newer controllers use.
    /^metadata\.(annotations|labels)\['batch\.kubernetes\.io\/job-completion-index'\]$/.test(String(field.fieldPath)) &&
    (field.apiVersion === undefined || field.apiVersion === 'v1')
  );
}

/** The fields of the sidecar container the digest covers (docs/harvester.md, "What it trusts"). */
const COVERED = ['command', 'args', 'workingDir', 'envFrom', 'lifecycle', 'livenessProbe', 'readinessProbe', 'startupProbe', 'restartPolicy', 'volumeDevices'] as const;

/**
 * The digest of the sidecar in a pod spec (a Job's template or a pod): every
 * field that decides what runs in that container or where its termination
 * message comes from, and the volumes it mounts. The container is the init
 * container named `jobharvest`; '' when there is none.
 *
 * Covered: the name, the image's repository (not its tag or digest, which
 * policy engines pin: see imageRepository), command, args, workingDir, every
 * env var and envFrom, every volume mount and device with the definition of
 * the volume it mounts, lifecycle hooks, probes, terminationMessagePath and
 * terminationMessagePolicy (as the API server defaults them), restartPolicy.
 * Left out on purpose: resources (LimitRange defaults), securityContext
 * (policy engines' defaults; it bounds what the code may do, not which code
 * runs), imagePullPolicy (defaulted), the service-account token mount the
 * ServiceAccount admission plugin adds to every container of a pod, and the
 * completion index the Job controller adds to every container of an Indexed
 * Job's pods.
 */
export function sidecarDigest(spec: unknown): string {
  if (!isObj(spec)) return '';
  const container = list(spec.initContainers).find((c) => c.name === NAMES.container);
  if (!container) return '';
  const volumes = new Map(list(spec.volumes).map((v) => [String(v.name), v]));
  const mounts = list(container.volumeMounts)
    .filter((m) => !serviceAccountMount(m, volumes.get(String(m.name))))
    .map((m) => [canonical(m), volumeSource(volumes.get(String(m.name)))]);
  const devices = list(container.volumeDevices).map((d) => volumeSource(volumes.get(String(d.name))));
  const shape = canonical({
    ...Object.fromEntries(COVERED.map((k) => [k, container[k]])),
    name: container.name,
    image: imageRepository(container.image),
    env: list(container.env).filter((e) => !jobControllerIndexEnv(e)).map(envVar),
    mounts,
    devices,
    terminationMessagePath: container.terminationMessagePath || '/dev/termination-log',
    terminationMessagePolicy: container.terminationMessagePolicy || 'File',
  });
  return createHash('sha256').update(JSON.stringify(shape)).digest('base64url');
}

/** What the webhook signs at admission: the namespace, the status it recorded, and the sidecar it rendered in the pod template. */
export function injectionParts(namespace: string, status: string, podSpec: unknown): string[] {
  return [namespace, status, sidecarDigest(podSpec)];
}

/**
 * Why a signed injection does not hold for this Job's template (or a pod of
 * it); undefined when it does. Both the webhook (on a Job it skips) and the
 * harvester ask it.
 */
export function injectionProblem(keys: VerifyingKeys, namespace: string, annotations: Record<string, string> | undefined, podSpec: unknown): string | undefined {
  const ann = annotations ?? {};
  const status = ann[STATUS_ANNOTATION];
  if (status === undefined) return 'no injection status';
  const signature = ann[SIGNATURE_ANNOTATION];
  if (signature === undefined) return 'the injection is not signed (injected offline, by an older webhook, or by hand)';
  const checked = checkSignature(keys, PURPOSE.injection, injectionParts(namespace, status, podSpec), signature);
  if (!checked.ok) {
    if (checked.keyChanged !== undefined) {
      return `the injection was signed with another signing key (key id ${checked.keyChanged}, this one's is ${describeKeys(keys)}): the key changed since the Job was created and the old one is not kept in signing.previousKeys, or the webhook and the harvester hold different keys`;
    }
    return 'the injection signature does not match this Job and its sidecar (forged, copied from another Job, or altered)';
  }
  const foreign = foreignMount(podSpec);
  if (foreign) return foreign;
  return undefined;
}

/**
 * JSON of `value` plus a `sig` bound to the Job's uid and the purpose, so it
 * cannot be moved to another Job or field. Signed with the current key only.
 */
export function signedJson<T extends object>(keys: VerifyingKeys, purpose: string, jobUid: string, value: T): string {
  const body = JSON.stringify(value);
  return JSON.stringify({ ...value, sig: sign(signingKeyOf(keys), purpose, [jobUid, body]) });
}

/** What a signed JSON annotation is: not JSON of an object; or its value, with what its signature says. */
export type SignedJsonCheck = { readonly value: undefined } | { readonly value: Record<string, unknown>; readonly check: SignatureCheck };

/**
 * The value of a signed JSON annotation without its `sig`, and whether the
 * `sig` verifies for this Job with this key. The signature covers the JSON as
 * written, fields in their order, so a value with fields added since (or
 * before) a version still verifies for what it says.
 */
export function checkSignedJson(keys: VerifyingKeys, purpose: string, jobUid: string | undefined, text: string | undefined): SignedJsonCheck {
  if (!text) return { value: undefined };
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return { value: undefined };
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) return { value: undefined };
  const { sig, ...value } = parsed as Record<string, unknown>;
  if (!jobUid) return { value, check: { ok: false, keyChanged: undefined } };
  return { value, check: checkSignature(keys, purpose, [jobUid, JSON.stringify(value)], sig) };
}

/** The value without its `sig`, when jobharvest signed it for this Job (with the current key or a previous one); undefined otherwise. */
export function verifiedJson<T extends object>(keys: VerifyingKeys, purpose: string, jobUid: string | undefined, text: string | undefined): T | undefined {
  const r = checkSignedJson(keys, purpose, jobUid, text);
  return r.value !== undefined && r.check.ok ? (r.value as T) : undefined;
}

/** The key id a signature names (`v2.<key id>.<mac>`); undefined for a v1 signature or none. */
export function signatureKeyId(signature: unknown): string | undefined {
  if (typeof signature !== 'string' || !signature.startsWith(PREFIX)) return undefined;
  const rest = signature.slice(PREFIX.length);
  const dot = rest.indexOf('.');
  return dot > 0 ? rest.slice(0, dot) : undefined;
}

export const PURPOSE = {
  injection: 'injection',
  hold: 'hold',
  delivery: 'delivery',
} as const;
