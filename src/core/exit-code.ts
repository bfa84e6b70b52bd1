import type { Job } from './kube.ts';

/**
 * The Job controller matches a podFailurePolicy `onExitCodes` rule that names no
 * container against every container status of a failed pod, init containers and
 * native sidecars included, first match wins (pkg/controller/job/
 * pod_failure_policy.go, Kubernetes 1.37). A sidecar exiting with a code such a
 * rule lists could fail, ignore or count the pod in a way the Job's author never
 * meant. So when the Job has such rules, the webhook picks the sidecar's failure
 * exit code from the codes none of them matches. Exit code 0 never matches.
 */

/** The sidecar's own choice when nothing forces another (see sidecar/outcome). */
export const DEFAULT_FAILURE_EXIT_CODE = 3;
// 126 and 127 have shell meanings, 128+N are deaths by signal that users' rules
// aim at: stay within the codes a process picks for itself.
const HIGHEST_CANDIDATE = 125;
// The kubelet reports these for a sidecar it kills (SIGTERM handled late, SIGKILL
// at the end of the grace period, or a status it lost): no exit code we choose
// can keep a rule that matches them from matching the sidecar.
const KILLED_EXIT_CODES = [137, 143] as const;

interface ExitCodeRule {
  index: number;
  operator: 'In' | 'NotIn';
  // A Set: the candidates are checked against every rule, and a Job's values
  // (unbounded until validation, which runs after mutating admission) must
  // cost one pass, not one per candidate.
  values: Set<number>;
}

export interface ExitCodeChoice {
  /** The code to pass to the sidecar, or null when no rule can match it (keep its default). */
  code: number | null;
  warnings: string[];
}

export function chooseFailureExitCode(job: Job, sidecarName: string): ExitCodeChoice {
  const rules = rulesThatCanMatch(job, sidecarName);
  if (rules.length === 0) return { code: null, warnings: [] };
  const warnings: string[] = [];
  for (const killed of KILLED_EXIT_CODES) {
    const hit = rules.find((r) => matches(r, killed));
    if (hit) {
      warnings.push(
        `podFailurePolicy rule ${hit.index} names no containerName and matches exit code ${killed}, which the kubelet also reports for the ${sidecarName} sidecar when it is killed; set containerName on the rule`,
      );
    }
  }
  const candidates = [DEFAULT_FAILURE_EXIT_CODE, ...Array.from({ length: HIGHEST_CANDIDATE }, (_, i) => i + 1)];
  const safe = candidates.find((c) => rules.every((r) => !matches(r, c)));
  if (safe !== undefined) return { code: safe, warnings };
  warnings.push(
    `every exit code 1-${HIGHEST_CANDIDATE} matches a podFailurePolicy rule without containerName; the ${sidecarName} sidecar exits 0 even when its logs were not all delivered (its summary line still says so)`,
  );
  return { code: 0, warnings };
}

function rulesThatCanMatch(job: Job, sidecarName: string): ExitCodeRule[] {
  const policy = job.spec?.podFailurePolicy as { rules?: unknown } | undefined;
  if (!policy || !Array.isArray(policy.rules)) return [];
  const out: ExitCodeRule[] = [];
  policy.rules.forEach((rule: unknown, index) => {
    const on = (rule as { onExitCodes?: { containerName?: unknown; operator?: unknown; values?: unknown } } | null)?.onExitCodes;
    if (!on || typeof on !== 'object') return;
    if (on.containerName !== undefined && on.containerName !== null && on.containerName !== sidecarName) return;
    // An operator the controller does not know matches nothing.
    if (on.operator !== 'In' && on.operator !== 'NotIn') return;
    const values = new Set<number>();
    if (Array.isArray(on.values)) for (const v of on.values) if (Number.isInteger(v)) values.add(v as number);
    out.push({ index, operator: on.operator, values });
  });
  return out;
}

function matches(rule: ExitCodeRule, code: number): boolean {
  if (code === 0) return false;
  const listed = rule.values.has(code);
  return rule.operator === 'In' ? listed : !listed;
}
