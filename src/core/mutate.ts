import { decide, type DecideContext, type Decision } from './decide.ts';
import { inject } from './inject.ts';
import type { Job } from './kube.ts';

export interface MutateResult {
  decision: Decision;
  /** The Job to store: the input itself when skipped. */
  job: Job;
  warnings: string[];
}

/** decide → inject, the one path the webhook, the CLI and the tests share. */
export function mutateJob(job: Job, ctx: DecideContext): MutateResult {
  const decision = decide(job, ctx);
  if (decision.action === 'skip') return { decision, job, warnings: decision.warnings };
  const out = inject({ job, settings: decision.settings, mode: decision.mode, config: ctx.config });
  return { decision, job: out.job, warnings: [...decision.warnings, ...out.warnings] };
}
