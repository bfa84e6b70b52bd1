import fjp from 'fast-json-patch';
import type { Operation } from 'fast-json-patch';
import type { Job } from './kube.ts';

const { escapePathComponent } = fjp;

/**
 * The JSONPatch from the object the API server sent to the one we want.
 * managedFields belong to the API server: they are dropped from both sides so
 * no operation ever touches them. Keys are escaped by fast-json-patch, so a key
 * like `kubectl.kubernetes.io/default-container` becomes `~1` in a path.
 *
 * inject() copies on write: every subtree it leaves alone is the very object
 * the request carried. So the diff descends only where references differ,
 * adds the keys that are new, and turns an array that only gained elements
 * (the sidecar first in initContainers, the volumes at the end) into one add
 * per element. Anything else (an array reordered or changed in place) is left
 * to fast-json-patch's compare on that subtree alone. The result, applied to
 * the original, gives a value equal to `mutated`; it is not the same list of
 * operations as a compare of the whole objects, which rewrites an existing
 * init container field by field to make room for the sidecar.
 *
 * Values in the operations are not copies: they share structure with
 * `mutated`, so serialize the patch before changing either.
 */
export function createPatch(original: Job, mutated: Job): Operation[] {
  const ops: Operation[] = [];
  diff(withoutManagedFields(original), withoutManagedFields(mutated), '', ops);
  return ops;
}

// The JSON of values built once and shared by many patches (the sidecar
// container), computed the first time one is serialized.
const sharedJson = new WeakMap<object, string>();

/**
 * Freezes `v` all the way down and marks it as shared: a value many Jobs carry
 * unchanged, whose JSON serializePatch computes once. Frozen, because a
 * change by any one holder would reach every later patch.
 */
export function sharedValue<T extends object>(v: T): T {
  deepFreeze(v);
  sharedJson.set(v, '');
  return v;
}

function deepFreeze(v: unknown): void {
  if (typeof v !== 'object' || v === null || Object.isFrozen(v)) return;
  for (const x of Object.values(v)) deepFreeze(x);
  Object.freeze(v);
}

/** JSON.stringify(ops), with each shared value's JSON computed only once. */
export function serializePatch(ops: Operation[]): string {
  let out = '';
  for (const op of ops) {
    const value = (op as { value?: unknown }).value;
    let json = typeof value === 'object' && value !== null ? sharedJson.get(value) : undefined;
    if (json === undefined) {
      out += (out ? ',' : '') + JSON.stringify(op);
      continue;
    }
    if (json === '') sharedJson.set(value as object, (json = JSON.stringify(value)));
    // The same keys, in the same order, as JSON.stringify(op) would give.
    const { value: _value, ...rest } = op as Operation & { value: unknown };
    const head = JSON.stringify(rest);
    out += `${out ? ',' : ''}${head.slice(0, -1)}${head.length > 2 ? ',' : ''}"value":${json}}`;
  }
  return `[${out}]`;
}

export function applyPatch<T>(doc: T, ops: Operation[]): T {
  return fjp.applyPatch(structuredClone(doc), ops, true, false).newDocument as T;
}

type Plain = Record<string, unknown>;

function isPlain(v: unknown): v is Plain {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** JSON has no undefined: a key holding it is absent. */
function present(o: Plain, k: string): boolean {
  return Object.hasOwn(o, k) && o[k] !== undefined;
}

function diff(a: unknown, b: unknown, path: string, ops: Operation[]): void {
  if (a === b) return;
  if (isPlain(a) && isPlain(b)) {
    for (const k of Object.keys(a)) {
      if (present(a, k) && !present(b, k)) ops.push({ op: 'remove', path: `${path}/${escapePathComponent(k)}` });
    }
    for (const k of Object.keys(b)) {
      const v = b[k];
      // Shared with the original: nothing below changed.
      if (v === a[k] && Object.hasOwn(a, k)) continue;
      if (v === undefined) continue;
      const p = `${path}/${escapePathComponent(k)}`;
      if (present(a, k)) diff(a[k], v, p, ops);
      else ops.push({ op: 'add', path: p, value: v });
    }
    return;
  }
  if (Array.isArray(a) && Array.isArray(b)) {
    const added = insertions(a, b);
    if (added) {
      // In ascending order of their final index: each lands after the ones before it.
      for (const i of added) ops.push({ op: 'add', path: `${path}/${i}`, value: b[i] });
      return;
    }
  }
  if (path === '' || typeof a === 'object' || typeof b === 'object') {
    for (const op of fjp.compare(wrap(a), wrap(b))) ops.push({ ...op, path: path + op.path.slice('/v'.length) });
    return;
  }
  ops.push({ op: 'replace', path, value: b });
}

/** Lets compare() diff any two values, the root or a value whose type changed included. */
function wrap(v: unknown): Plain {
  return { v };
}

/**
 * The indices in `b` of the elements inserted into `a` to make it, when `b` is
 * `a` with elements inserted and nothing else (elements matched by identity);
 * undefined otherwise.
 */
export function insertions(a: readonly unknown[], b: readonly unknown[]): number[] | undefined {
  if (b.length <= a.length) return undefined;
  const added: number[] = [];
  let i = 0;
  for (let j = 0; j < b.length; j++) {
    if (i < a.length && b[j] === a[i]) i++;
    else added.push(j);
  }
  return i === a.length ? added : undefined;
}

function withoutManagedFields(job: Job): Job {
  if (!job.metadata || !('managedFields' in job.metadata)) return job;
  const { managedFields: _ignored, ...metadata } = job.metadata;
  return { ...job, metadata };
}
