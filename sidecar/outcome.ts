// Whether the sidecar delivered everything it saw, as one word in the summary
// line and as its exit code. `incomplete` means some lines are not at the log
// server: unsent, dead-lettered, left unread, in files it could not open, or
// (api mode) in a rotated file a resumed stream could no longer reach.

/**
 * Exit code of a drain that ended incomplete (0 when complete). Not 1 (start-up
 * or drain crash) and not 2 (bad configuration), so the three stay apart.
 * JOBHARVEST_FAILURE_EXIT_CODE overrides it, e.g. to keep clear of a Job's
 * podFailurePolicy onExitCodes rule.
 */
export const INCOMPLETE_EXIT_CODE = 3;

export type DrainOutcome = 'complete' | 'incomplete';

/** What a drain may leave undelivered, as the summary line counts it. */
export interface DrainLosses {
  readonly lines_unsent: number;
  readonly lines_dead_lettered: number;
  readonly unread_bytes: number;
  readonly unreadable_files: number;
  readonly deadline_hit: boolean;
  /** api mode: streams resumed past a rotation; the lines in the rotated files are lost, their number unknown. */
  readonly resume_gaps: number;
}

export function drainOutcomeOf(s: DrainLosses): DrainOutcome {
  const lost = s.lines_unsent > 0 || s.lines_dead_lettered > 0 || s.unread_bytes > 0 || s.unreadable_files > 0 || s.deadline_hit || s.resume_gaps > 0;
  return lost ? 'incomplete' : 'complete';
}

export function exitCodeOf(outcome: DrainOutcome, failureExitCode: number): number {
  return outcome === 'complete' ? 0 : failureExitCode;
}

/**
 * The exit code the webhook chose to keep clear of the Job's podFailurePolicy
 * rules, read straight from the environment so that it also covers failures
 * before the configuration is loaded (or when it is invalid). Undefined when
 * unset or unusable: then the sidecar's own codes (1, 2, 3) apply.
 */
export function forcedExitCode(env: NodeJS.ProcessEnv, name: string): number | undefined {
  const v = env[name]?.trim();
  if (!v || !/^\d{1,3}$/.test(v)) return undefined;
  const n = Number(v);
  return n <= 255 ? n : undefined;
}
