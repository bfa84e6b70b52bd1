/**
 * Watches one Job from creation to garbage collection and checks the
 * guarantee on every observation:
 * - the Job is never seen Complete while a sidecar of its pods is alive
 *   (alive is checked after the answer arrived, so a Complete answer proves
 *   the Job was Complete while the sidecar still ran);
 * - once the Job is gone, the log server must already hold every line that
 *   can arrive (the existence check comes first and the server's count only
 *   grows, so a short count proves deletion came before delivery).
 */
import type { V1Job } from '@kubernetes/client-node';
import { NAMES } from '../../../src/contract/env.ts';
import type { Stack } from './stack.ts';

export interface JobLife {
  /** Complete condition's lastTransitionTime (ms, truncated to the second by the API). */
  completeAt: number | undefined;
  /**
   * Polling brackets each deletion: last seen present (when that read began)
   * < deleted ≤ first seen gone (when that read returned).
   */
  jobLastSeen: number | undefined;
  jobGoneAt: number | undefined;
  podsLastSeen: number | undefined;
  podsGoneAt: number | undefined;
  /** Observations with a main container exited, a sidecar alive and the Job not Complete. */
  heldBySidecar: number;
  /** Server count when the Job was first seen gone. */
  countAtDeletion: number | undefined;
  violations: string[];
  final: V1Job | undefined;
}

export interface FollowOptions {
  /** Lines the server must hold before the Job may be deleted. */
  expected: number;
  filter: string;
  timeoutMs?: number;
  intervalMs?: number;
}

const JOB_NAME_LABEL = 'batch.kubernetes.io/job-name';

export async function followJob(stack: Stack, namespace: string, name: string, o: FollowOptions): Promise<JobLife> {
  const life: JobLife = { completeAt: undefined, jobLastSeen: undefined, jobGoneAt: undefined, podsLastSeen: undefined, podsGoneAt: undefined, heldBySidecar: 0, countAtDeletion: undefined, violations: [], final: undefined };
  const deadline = Date.now() + (o.timeoutMs ?? 240_000);
  while (Date.now() < deadline) {
    let job: V1Job | undefined;
    const asked = Date.now();
    try {
      job = await stack.batch.readNamespacedJob({ name, namespace });
      life.jobLastSeen = asked;
    } catch (err) {
      if ((err as { code?: number }).code !== 404) throw err;
    }
    const workers = stack.jobWorkers(namespace, name);
    const alive = workers.filter((w) => w.isRunning(NAMES.container)).map((w) => w.name);
    if (job) {
      life.final = job;
      const complete = job.status?.conditions?.find((c) => c.type === 'Complete' && c.status === 'True');
      if (complete) {
        life.completeAt ??= new Date(complete.lastTransitionTime!).getTime();
        if (alive.length > 0) life.violations.push(`Job Complete while the sidecar of ${alive.join(', ')} was running`);
      } else if (alive.length > 0 && workers.some((w) => w.records.get('main')?.state === 'terminated')) {
        life.heldBySidecar++;
      }
    } else {
      if (life.jobGoneAt === undefined) {
        life.jobGoneAt = Date.now();
        const count = await stack.vl.count(o.filter);
        life.countAtDeletion = count;
        if (count < o.expected) life.violations.push(`Job deleted while the server held ${count} of ${o.expected} lines`);
      }
    }
    const podsAsked = Date.now();
    const pods = await stack.core.listNamespacedPod({ namespace, labelSelector: `${JOB_NAME_LABEL}=${name}` });
    if (pods.items.length > 0) life.podsLastSeen = podsAsked;
    else if (!job && life.podsLastSeen !== undefined) {
      life.podsGoneAt = Date.now();
      return life;
    }
    await new Promise((r) => setTimeout(r, o.intervalMs ?? 100));
  }
  throw new Error(`Job ${namespace}/${name} was not garbage-collected in time; violations so far: ${life.violations.join('; ') || 'none'}`);
}
