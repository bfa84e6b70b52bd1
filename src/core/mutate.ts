import { NAMES } from '../contract/env.ts';
import { redactUrls } from '../contract/redact.ts';
import { INJECTED_LABEL } from '../contract/harvest.ts';
import { injectionParts, PURPOSE, sign, SIGNATURE_ANNOTATION } from '../contract/signature.ts';
import { ANNOTATIONS } from './annotations.ts';
import { SKIP_REASONS, decide, type DecideContext, type Decision } from './decide.ts';
import { inject } from './inject.ts';
import type { Job, ObjectMeta } from './kube.ts';

export interface MutateResult {
  decision: Decision;
  /** The Job to store: the input itself when skipped. */
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
  if (decision.action === 'skip') return { decision, job, warnings: decision.warnings.map(redactUrls) };
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
    const skipped: Decision = {
      action: 'skip',
      reason: SKIP_REASONS.ANNOTATIONS_TOO_LARGE,
      detail,
      warnings: [...decision.warnings, `${detail}; Job admitted without the log sidecar`],
    };
    return { decision: skipped, job, warnings: skipped.warnings.map(redactUrls) };
  }
  return { decision, job: out.job, warnings: [...decision.warnings, ...out.warnings].map(redactUrls) };
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
  const sidecar = (job.spec?.template?.spec?.initContainers ?? []).find((c) => c.name === NAMES.container);
  const signature = sign(key, PURPOSE.injection, injectionParts(namespace, status, sidecar as Record<string, unknown> | undefined));
  meta.labels = { ...(meta.labels ?? {}), [INJECTED_LABEL]: 'true' };
  meta.annotations = { ...(meta.annotations ?? {}), [SIGNATURE_ANNOTATION]: signature };
}
