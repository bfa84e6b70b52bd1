/**
 * Kubernetes resource quantities as exact integers of nano-units, so that sums
 * and comparisons match the API server's (resource.Quantity) to the last digit.
 * Mutating admission runs before validation: a tenant's template may hold any
 * string, so anything that is not a quantity, or is longer than one can be, is
 * undefined rather than a guess. The webhook sizes the sidecar with it, the
 * harvester records what a Job's pods requested (the delivery record's usage).
 */

const QUANTITY = /^([+-]?)(\d*)(?:\.(\d*))?(?:(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE]([+-]?\d{1,3}))?$/;
const BINARY: Record<string, bigint> = { Ki: 1n << 10n, Mi: 1n << 20n, Gi: 1n << 30n, Ti: 1n << 40n, Pi: 1n << 50n, Ei: 1n << 60n };
const DECIMAL: Record<string, number> = { n: -9, u: -6, m: -3, k: 3, M: 6, G: 9, T: 12, P: 15, E: 18 };
/** The API server's own bound on a quantity's text is far below this. */
const MAX_TEXT = 64;

/** The quantity in nano-units (1 = 10^-9), rounded up as the API server rounds, or undefined if it is none. */
export function parseQuantity(q: unknown): bigint | undefined {
  if (typeof q === 'number') q = Number.isFinite(q) ? String(q) : undefined;
  if (typeof q !== 'string' || q.length === 0 || q.length > MAX_TEXT) return undefined;
  const m = QUANTITY.exec(q);
  if (!m) return undefined;
  const [, sign, whole = '', frac = '', suffix, exp] = m;
  if (whole === '' && frac === '') return undefined;
  let scale = -frac.length; // the digits as one integer times 10^scale
  let mult = 1n;
  if (suffix !== undefined && BINARY[suffix] !== undefined) mult = BINARY[suffix]!;
  else if (suffix !== undefined) scale += DECIMAL[suffix]!;
  else if (exp !== undefined) scale += Number(exp);
  const digits = BigInt(whole + frac || '0') * mult;
  const shift = scale + 9;
  let nano: bigint;
  if (shift >= 0) nano = digits * 10n ** BigInt(shift);
  else {
    const d = 10n ** BigInt(-shift);
    nano = (digits + d - 1n) / d;
  }
  return sign === '-' ? -nano : nano;
}

interface RequestsContainer {
  readonly restartPolicy?: string | undefined;
  readonly resources?: unknown;
}

type ResourceList = Record<string, unknown>;
// Before validation (at admission) a template's fields may be anything.
const list = (v: unknown): ResourceList => (typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as ResourceList) : {});

/** A container's requests as the API server defaults them: a limit without a request is also the request. */
export function effectiveRequests(c: RequestsContainer): ResourceList {
  const r = list(c.resources);
  return { ...list(r.limits), ...list(r.requests) };
}

const quantityOf = (v: unknown): bigint | undefined => (v === undefined ? 0n : parseQuantity(v));

/**
 * The pod's aggregate request of one resource, as the scheduler and the
 * pod-level validation count it: the regular and restartable init containers
 * summed, or the largest init container (plus the sidecars started before it).
 * Undefined when a quantity does not parse.
 */
export function podRequest(pod: { readonly containers?: readonly RequestsContainer[] | undefined; readonly initContainers?: readonly RequestsContainer[] | undefined }, name: string): bigint | undefined {
  let sum = 0n;
  for (const c of pod.containers ?? []) {
    const q = quantityOf(effectiveRequests(c)[name]);
    if (q === undefined) return undefined;
    sum += q;
  }
  let sidecars = 0n;
  let initMax = 0n;
  for (const c of pod.initContainers ?? []) {
    const q = quantityOf(effectiveRequests(c)[name]);
    if (q === undefined) return undefined;
    if (c.restartPolicy === 'Always') {
      sum += q;
      sidecars += q;
      if (sidecars > initMax) initMax = sidecars;
    } else if (q + sidecars > initMax) initMax = q + sidecars;
  }
  return sum > initMax ? sum : initMax;
}
