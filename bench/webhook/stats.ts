// Small statistics shared by the webhook benches (unit-tested in test/unit/bench-stats.test.ts).
import { readFileSync } from 'node:fs';

/** The q-quantile of an ascending array by the nearest-rank method; NaN when empty. */
export function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.max(0, Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1))]!;
}

/** The q-quantile of a cumulative histogram, interpolated within its bucket as PromQL's histogram_quantile does. */
export function histogramQuantile(q: number, cumulative: Array<[number, number]>): number {
  const sorted = cumulative.toSorted((a, b) => a[0] - b[0]);
  const total = sorted.at(-1)?.[1] ?? 0;
  if (total === 0) return NaN;
  const rank = q * total;
  let prevBound = 0;
  let prevCount = 0;
  for (const [bound, count] of sorted) {
    if (count >= rank) {
      if (bound === Infinity) return prevBound;
      return prevBound + ((bound - prevBound) * (rank - prevCount)) / (count - prevCount);
    }
    prevBound = bound;
    prevCount = count;
  }
  return NaN;
}

/**
 * Whether a running estimate has settled: its last `rounds` values all lie
 * within ±`tolerance` of the latest one.
 */
export function stableWithin(estimates: number[], rounds: number, tolerance: number): boolean {
  if (estimates.length < rounds || rounds < 1) return false;
  const last = estimates.at(-1)!;
  return estimates.slice(-rounds).every((e) => Number.isFinite(e) && Math.abs(e - last) <= tolerance);
}

/**
 * CPU time (user + system, ms) from the text of /proc/<pid>/stat: fields 14
 * and 15 of proc(5), in clock ticks of 10 ms (USER_HZ is 100 on Linux). The
 * command name, field 2, may hold spaces and parentheses: fields are counted
 * from its closing parenthesis.
 */
export function cpuMsFromStat(stat: string): number {
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/** CPU time a process has used so far, in ms; 0 without a pid. */
export function processCpuMs(pid: number | undefined): number {
  return pid === undefined ? 0 : cpuMsFromStat(readFileSync(`/proc/${pid}/stat`, 'utf8'));
}
