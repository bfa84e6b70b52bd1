// Summaries of a row's repeats for bench:sidecar: one sample is not a figure
// on a shared machine, so every row is reported by its median, and its
// MiB per CPU-second also by its range.

/** The median of a non-empty list (the mean of the middle two for an even count). */
export function median(values: readonly number[]): number {
  if (values.length === 0) throw new Error('median of no values');
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

export interface Sample {
  key?: string;
  name: string;
  seconds: number;
  MiBps: number;
  linesPerSec: number;
  cpuSeconds: number;
  peakRssMiB: number;
  startupMs: number;
}

export interface Summary extends Sample {
  repeats: number;
  perCpu: number;
  perCpuMin: number;
  perCpuMax: number;
}

/**
 * Each figure is the median of its own samples (so seconds and cpu_s need not
 * come from the same repeat); peak RSS is the largest seen, as a limit must
 * hold for every run.
 */
export function summarize<S extends Sample>(samples: readonly S[], perCpu: (s: S) => number): Summary & Pick<S, 'key'> {
  if (samples.length === 0) throw new Error('no samples');
  const of = (f: (s: S) => number) => median(samples.map(f));
  const cpu = samples.map(perCpu);
  return {
    key: samples[0]!.key,
    name: samples[0]!.name,
    repeats: samples.length,
    seconds: of((s) => s.seconds),
    MiBps: of((s) => s.MiBps),
    linesPerSec: of((s) => s.linesPerSec),
    cpuSeconds: of((s) => s.cpuSeconds),
    startupMs: of((s) => s.startupMs),
    peakRssMiB: Math.max(...samples.map((s) => s.peakRssMiB)),
    perCpu: median(cpu),
    perCpuMin: Math.min(...cpu),
    perCpuMax: Math.max(...cpu),
  };
}

/** BENCH_SIDECAR_REPEATS: a positive whole number, 3 when unset. */
export function repeatsFrom(value: string | undefined): number {
  if (value === undefined || value === '') return 3;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new Error(`BENCH_SIDECAR_REPEATS: expected a whole number of at least 1, got ${JSON.stringify(value)}`);
  return n;
}
