import { ERROR_CODES, JobharvestError } from '../../core/errors.ts';
import { formatTimeNs, type JobRun } from '../../query/types.ts';

/** One run of a CronJob: a Job it created, still there or only on the log server. */
export interface CronJobRun {
  job: string;
  /** The scheduled time the CronJob controller put in the Job's name, in ms. */
  scheduledMs: number | undefined;
  /** The Job still exists in the cluster. */
  exists: boolean;
  lines?: number;
  firstNs?: bigint;
}

/** The pattern a CronJob's Jobs are named by: `<cronjob>-<minutes since the epoch of the scheduled time>`. */
export function runPattern(cronJob: string): string {
  return `${cronJob.replace(/[.-]/g, (c) => `\\${c}`)}-[0-9]+`;
}

function scheduled(cronJob: string, job: string): number | undefined {
  const rest = job.startsWith(`${cronJob}-`) ? job.slice(cronJob.length + 1) : '';
  return /^[0-9]{1,12}$/.test(rest) ? Number(rest) * 60_000 : undefined;
}

/**
 * The runs the cluster and the log server know of, newest first: a Job the
 * TTL deleted is only on the log server, one whose logs never arrived only in
 * the cluster. Jobs the CronJob owns are its runs whatever their names; a name
 * on the log server counts only if it is of the CronJob's pattern.
 */
export function mergeRuns(cronJob: string, inCluster: ReadonlyArray<{ job: string; createdMs?: number }>, onServer: readonly JobRun[]): CronJobRun[] {
  const byName = new Map<string, CronJobRun>();
  for (const j of inCluster) byName.set(j.job, { job: j.job, scheduledMs: scheduled(cronJob, j.job) ?? j.createdMs, exists: true });
  for (const r of onServer) {
    const when = scheduled(cronJob, r.job);
    if (when === undefined && !byName.has(r.job)) continue;
    const run = byName.get(r.job) ?? { job: r.job, scheduledMs: when, exists: false };
    if (r.lines !== undefined) run.lines = r.lines;
    if (r.firstNs !== undefined) run.firstNs = r.firstNs;
    byName.set(r.job, run);
  }
  return [...byName.values()].sort((a, b) => (b.scheduledMs ?? 0) - (a.scheduledMs ?? 0) || (a.job < b.job ? 1 : -1));
}

/** The run --run names: its place from the newest (1), or its Job's name. */
export function chooseRun(runs: readonly CronJobRun[], run: string): CronJobRun {
  const n = /^[0-9]+$/.test(run) ? Number(run) : undefined;
  const hit = n !== undefined ? runs[n - 1] : runs.find((r) => r.job === run);
  if (!hit) throw new JobharvestError(ERROR_CODES.BAD_INPUT, `--run ${run}: ${n !== undefined ? `there are ${runs.length} runs` : 'no run of that name'}`);
  return hit;
}

/** The runs as a table, newest first, with the run number --run takes. */
export function formatRuns(cronJob: string, runs: readonly CronJobRun[], note?: string): string {
  const rows = [['RUN', 'JOB', 'SCHEDULED', 'FIRST LINE', 'LINES', 'JOB OBJECT']];
  runs.forEach((r, i) =>
    rows.push([
      String(i + 1),
      r.job,
      r.scheduledMs !== undefined ? new Date(r.scheduledMs).toISOString().replace('.000Z', 'Z') : '-',
      r.firstNs !== undefined ? formatTimeNs(r.firstNs) : '-',
      r.lines !== undefined ? String(r.lines) : '-',
      r.exists ? 'exists' : 'deleted',
    ]),
  );
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((row) => row[c]!.length)));
  const text = rows.map((row) => row.map((cell, c) => (c === row.length - 1 ? cell : cell.padEnd(widths[c]!))).join('  ')).join('\n');
  const tail = runs.length === 0 ? `no runs of cronjob/${cronJob} found\n` : `print a run with: --run N (1 is the newest)\n`;
  return `${text}\n${note ? `${note}\n` : ''}${tail}`;
}
