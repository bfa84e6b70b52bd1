import { redactUrls } from '../contract/redact.ts';
import { INJECTED_LABEL } from '../contract/harvest.ts';
import { injectionParts, injectionProblem, PURPOSE, sign, SIGNATURE_ANNOTATION } from '../contract/signature.ts';
import { ANNOTATIONS } from './annotations.ts';
import { SKIP_REASONS, decide, type DecideContext, type Decision } from './decide.ts';
import { inject } from './inject.ts';
import { isObject, type Job, type ObjectMeta } from './kube.ts';

export interface MutateResult {
  decision: Decision;
  /** The Job to store: when skipped, the input itself, or a copy without a signature that does not verify. */
  job: Job;
  warnings: string[];
}

/** The API server refuses an object whose annotations (keys plus values, in bytes) exceed 256 KiB. */
export const ANNOTATIONS_LIMIT_BYTES = 256 * 1024;

export function annotationBytes(meta: ObjectMeta | undefined): number {
  let n = 0;
  for (const [k, v] of Object.entries(meta?.annotations ?? {})) n += Buffer.byteLength(k) + Buffer.byteLength(String(v));
  return n;
}

/** decide → inject, the one path the webhook, the CLI and the tests share. */
export function mutateJob(job: Job, ctx: DecideContext): MutateResult {
  const decision = decide(job, ctx);
  // Warnings quote annotation values, which may hold endpoints with credentials.
  if (decision.action === 'skip') return skipped(decision, job, ctx);
  const out = inject({
    job,
    settings: decision.settings,
    mode: decision.mode,
    ttlSecondsAfterFinished: decision.ttlSecondsAfterFinished,
    ttlLeftTo: decision.ttlLeftTo,
    quotaKeys: ctx.namespace?.quotaKeys,
    limitRanges: ctx.namespace?.limitRanges,
    config: ctx.config,
    now: ctx.now,
  });
  if (ctx.signingKey) signInjection(out.job, out.job.metadata?.namespace ?? ctx.namespace?.name ?? '', ctx.signingKey);
  const over = tooLarge(out.job);
  if (over) {
    const detail = `the added annotations would make the ${over}`;
    const skip: Decision = {
      action: 'skip',
      reason: SKIP_REASONS.ANNOTATIONS_TOO_LARGE,
      detail,
      warnings: [...decision.warnings, `${detail}; Job admitted without the log sidecar`],
    };
    return skipped(skip, job, ctx);
  }
  return { decision, job: out.job, warnings: [...decision.warnings, ...out.warnings].map(redactUrls) };
}

/**
 * A skipped Job as it is stored: as it came, except for a
 * `jobharvest.io/signature` and `jobharvest.io/injected` label that do not
 * verify for the template in hand (copied from another Job onto a sidecar of
 * the tenant's own, say), which are dropped with a warning. Dropping, not
 * injecting afresh: a Job that carries them also carries a status annotation
 * or a container named jobharvest, which make injecting a conflict. Without a
 * key (the offline CLI) nothing can be verified, so nothing is dropped; the
 * webhook judges the Job when it is created.
 */
function skipped(decision: Decision & { action: 'skip' }, job: Job, ctx: DecideContext): MutateResult {
  const warnings = [...decision.warnings];
  let out: unknown = job;
  const meta = isObject(job) ? job.metadata : undefined;
  const marked = meta?.annotations?.[SIGNATURE_ANNOTATION] !== undefined || meta?.labels?.[INJECTED_LABEL] !== undefined;
  if (ctx.signingKey && meta && marked) {
    const problem = injectionProblem(ctx.signingKey, meta.namespace ?? ctx.namespace?.name ?? '', meta.annotations, job.spec?.template?.spec);
    if (problem !== undefined) {
      const annotations = { ...(meta.annotations ?? {}) };
      const labels = { ...(meta.labels ?? {}) };
      delete annotations[SIGNATURE_ANNOTATION];
      delete labels[INJECTED_LABEL];
      out = { ...job, metadata: { ...meta, annotations, labels } };
      // First in the sentence, as the API server's warning length cuts the end.
      warnings.push(`${SIGNATURE_ANNOTATION} and label ${INJECTED_LABEL} removed, nothing reported on this Job: ${problem}`);
    }
  }
  return { decision, job: out as Job, warnings: warnings.map(redactUrls) };
}

function tooLarge(job: Job): string | undefined {
  const limit = ANNOTATIONS_LIMIT_BYTES;
  const jobBytes = annotationBytes(job.metadata);
  if (jobBytes > limit) return `Job's annotations ${jobBytes} bytes, over the API server's limit of ${limit}`;
  const podBytes = annotationBytes(job.spec?.template?.metadata);
  if (podBytes > limit) return `pod template's annotations ${podBytes} bytes, over the API server's limit of ${limit}`;
  return undefined;
}

/**
 * Marks the Job for the harvester's watch (a label anyone may copy, so only a
 * filter) and signs what was injected (which nobody without the key can copy
 * onto a sidecar of their own).
 */
function signInjection(job: Job, namespace: string, key: Buffer): void {
  const meta = job.metadata!;
  const status = meta.annotations?.[ANNOTATIONS.status] ?? '';
  const signature = sign(key, PURPOSE.injection, injectionParts(namespace, status, job.spec?.template?.spec));
  meta.labels = { ...(meta.labels ?? {}), [INJECTED_LABEL]: 'true' };
  meta.annotations = { ...(meta.annotations ?? {}), [SIGNATURE_ANNOTATION]: signature };
}
