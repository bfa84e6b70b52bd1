import { describe, expect, it } from 'vitest';
import { median, repeatsFrom, summarize, type Sample } from '../../bench/sidecar/repeats.ts';

const sample = (perCpuMiB: number, over: Partial<Sample> = {}): Sample => ({
  name: 'row',
  seconds: 10,
  MiBps: perCpuMiB / 2,
  linesPerSec: 1000,
  cpuSeconds: 5,
  peakRssMiB: 50,
  startupMs: 100,
  ...over,
});
const perCpu = (s: Sample) => (s.MiBps * s.seconds) / s.cpuSeconds;

describe('bench:sidecar repeats', () => {
  it('takes the middle value, or the mean of the middle two', () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(median([7])).toBe(7);
    expect(() => median([])).toThrow(/no values/);
  });

  it('summarizes a row by its medians, its range and its largest RSS', () => {
    const s = summarize([sample(100, { peakRssMiB: 40 }), sample(130, { peakRssMiB: 70, startupMs: 300 }), sample(110, { startupMs: 50 })], perCpu);
    expect(s.repeats).toBe(3);
    expect(s.perCpu).toBe(110);
    expect(s.perCpuMin).toBe(100);
    expect(s.perCpuMax).toBe(130);
    expect(s.peakRssMiB).toBe(70);
    expect(s.startupMs).toBe(100);
  });

  it('reads BENCH_SIDECAR_REPEATS as a positive whole number, 3 when unset', () => {
    expect(repeatsFrom(undefined)).toBe(3);
    expect(repeatsFrom('')).toBe(3);
    expect(repeatsFrom('5')).toBe(5);
    for (const bad of ['0', '-1', '2.5', 'three']) expect(() => repeatsFrom(bad)).toThrow(/BENCH_SIDECAR_REPEATS/);
  });
});
