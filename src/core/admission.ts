import type { Operation } from 'fast-json-patch';
import { ERROR_CODES, JobharvestError, errorCodeOf, type ErrorCode } from './errors.ts';
import { isObject, type Job, type NamespaceMeta } from './kube.ts';
import type { Config } from './config.ts';
import type { ServerVersion } from './server-version.ts';
import { mutateJob } from './mutate.ts';
import { SKIP_REASONS, type Decision } from './decide.ts';
import { createPatch, serializePatch } from './patch.ts';

export const ADMISSION_API_VERSION = 'admission.k8s.io/v1';

export interface AdmissionRequest {
  uid: string;
  kind?: { group?: string; version?: string; kind?: string };
  resource?: { group?: string; version?: string; resource?: string };
  subResource?: string;
  namespace?: string;
  operation?: string;
  object?: unknown;
  dryRun?: boolean;
  [k: string]: unknown;
}

export interface AdmissionResponse {
  uid: string;
  allowed: true;
  patchType?: 'JSONPatch';
  patch?: string;
  warnings?: string[];
}

export interface AdmissionReviewOut {
  apiVersion: typeof ADMISSION_API_VERSION;
  kind: 'AdmissionReview';
  response: AdmissionResponse;
}

export interface ReviewDeps {
  config: Config;
  /** Resolves the Job's namespace; undefined when it cannot be read in time. */
  namespace: (name: string) => Promise<NamespaceMeta | undefined> | NamespaceMeta | undefined;
  serverVersion: () => ServerVersion | undefined;
  /** Standalone mode (no cluster): every non-excluded namespace counts as opted in. */
  assumeOptedIn?: boolean;
  /** Signs each injection for the harvester; unset: injections are unsigned and never harvested. */
  signingKey?: Buffer | undefined;
}

/** What the webhook did with the Job of one review: injected, skipped, or an internal error (admitted unpatched). */
export type ReviewDisposition =
  | { kind: 'injected'; decision: Decision; patch: Operation[] }
  | { kind: 'skipped'; decision: Decision | undefined; reason: string }
  | { kind: 'error'; code: ErrorCode; error: unknown };

export interface ReviewResult {
  review: AdmissionReviewOut;
  disposition: ReviewDisposition;
  uid: string;
}

/**
 * Validates the envelope. Only this can fail the HTTP request (JH_BAD_REQUEST,
 * 400): a request we cannot answer by uid is not an admission at all.
 */
export function parseReview(body: unknown): AdmissionRequest {
  if (!isObject(body)) throw bad('body is not a JSON object');
  if (body.apiVersion !== ADMISSION_API_VERSION) {
    throw bad(`apiVersion must be ${ADMISSION_API_VERSION}, got ${JSON.stringify(body.apiVersion ?? null)}`);
  }
  if (body.kind !== 'AdmissionReview') throw bad(`kind must be AdmissionReview, got ${JSON.stringify(body.kind ?? null)}`);
  const req = body.request;
  if (!isObject(req)) throw bad('request is missing');
  if (typeof req.uid !== 'string' || req.uid.length === 0) throw bad('request.uid is missing');
  return req as AdmissionRequest;
}

function bad(msg: string): JobharvestError {
  return new JobharvestError(ERROR_CODES.BAD_REQUEST, `invalid AdmissionReview: ${msg}`);
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const WARNING_PREFIX = 'jobharvest: ';
// The API server passes warnings to clients; keep each one short enough for kubectl.
const MAX_WARNING_LENGTH = 240;

function warningsOut(ws: string[]): string[] | undefined {
  if (ws.length === 0) return undefined;
  return ws.map((w) => {
    const s = WARNING_PREFIX + w;
    return s.length > MAX_WARNING_LENGTH ? `${s.slice(0, MAX_WARNING_LENGTH - 1)}…` : s;
  });
}

function isJobCreate(req: AdmissionRequest): boolean {
  const k = req.kind;
  return req.operation === 'CREATE' && !req.subResource && k?.group === 'batch' && k?.kind === 'Job';
}

/**
 * Answers one AdmissionReview. Never returns allowed: false: if anything in here
 * fails, the Job is admitted unpatched with a warning and the disposition says why,
 * so the caller can log and count it.
 */
export async function review(req: AdmissionRequest, deps: ReviewDeps): Promise<ReviewResult> {
  const uid = req.uid;
  const answer = (response: Omit<AdmissionResponse, 'uid' | 'allowed'>, disposition: ReviewDisposition): ReviewResult => ({
    uid,
    disposition,
    review: { apiVersion: ADMISSION_API_VERSION, kind: 'AdmissionReview', response: { uid, allowed: true, ...response } },
  });

  if (!isJobCreate(req)) return answer({}, { kind: 'skipped', decision: undefined, reason: SKIP_REASONS.NOT_CREATE });
  try {
    const job = req.object;
    if (!isObject(job)) throw new JobharvestError(ERROR_CODES.INTERNAL, 'request.object is not an object');
    const nsName = req.namespace ?? (job as Job).metadata?.namespace;
    if (typeof nsName !== 'string' || nsName === '') throw new JobharvestError(ERROR_CODES.INTERNAL, 'the request names no namespace');
    // The API server only sends a namespace that exists, so a DNS label; any
    // other string is a forged review and costs no API-server read.
    const namespace = deps.assumeOptedIn ? { name: nsName } : DNS_LABEL.test(nsName) ? await deps.namespace(nsName) : undefined;
    // The API server fills metadata.namespace only after admission in some paths.
    const subject: Job = { ...(job as Job), metadata: { ...((job as Job).metadata ?? {}), namespace: nsName } };
    const result = mutateJob(subject, {
      config: deps.config,
      namespace,
      serverVersion: deps.serverVersion(),
      assumeOptedIn: deps.assumeOptedIn ?? false,
      now: Date.now(),
      signingKey: deps.signingKey,
    });
    const warnings = warningsOut(result.warnings);
    // Patch against the object exactly as received (namespace possibly unset).
    const patchOf = (): ReturnType<typeof createPatch> => {
      const mutated: Job = { ...result.job, metadata: { ...result.job.metadata } };
      if ((job as Job).metadata?.namespace === undefined) delete mutated.metadata!.namespace;
      return createPatch(job as Job, mutated);
    };
    if (result.decision.action === 'skip') {
      const disposition: ReviewDisposition = { kind: 'skipped', decision: result.decision, reason: result.decision.reason };
      if (result.job === subject) return answer(warnings ? { warnings } : {}, disposition);
      // Skipped, but a signature that does not verify here is dropped (see mutateJob).
      const patch = patchOf();
      return answer({ patchType: 'JSONPatch', patch: Buffer.from(serializePatch(patch)).toString('base64'), ...(warnings ? { warnings } : {}) }, disposition);
    }
    const patch = patchOf();
    return answer(
      { patchType: 'JSONPatch', patch: Buffer.from(serializePatch(patch)).toString('base64'), ...(warnings ? { warnings } : {}) },
      { kind: 'injected', decision: result.decision, patch },
    );
  } catch (error) {
    const code = errorCodeOf(error);
    return answer({ warnings: warningsOut([`internal error ${code}; Job admitted without the log sidecar`]) }, { kind: 'error', code, error });
  }
}
