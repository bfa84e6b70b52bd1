import { describe, expect, it } from 'vitest';
import { cpuMsFromStat, histogramQuantile, processCpuMs, quantile, stableWithin } from '../../bench/webhook/stats.ts';

describe('bench statistics', () => {
  it('quantile takes the nearest rank of a sorted array', () => {
    const l = Array.from({ length: 100 }, (_, i) => i + 1);
    expect(quantile(l, 0.5)).toBe(50);
    expect(quantile(l, 0.99)).toBe(99);
    expect(quantile(l, 1)).toBe(100);
    expect(quantile(l, 0)).toBe(1);
    expect(quantile([7], 0.99)).toBe(7);
    expect(quantile([], 0.5)).toBeNaN();
  });

  it('histogramQuantile interpolates within the bucket, as PromQL does', () => {
    const h: Array<[number, number]> = [
      [0.01, 50],
      [0.02, 90],
      [Infinity, 100],
    ];
    expect(histogramQuantile(0.5, h)).toBeCloseTo(0.01);
    expect(histogramQuantile(0.7, h)).toBeCloseTo(0.015);
    expect(histogramQuantile(0.99, h)).toBe(0.02);
    expect(histogramQuantile(0.5, [[1, 0], [Infinity, 0]])).toBeNaN();
  });

  it('stableWithin asks the last rounds to lie within the tolerance of the latest', () => {
    expect(stableWithin([5, 3.0, 2.5, 2.1], 3, 1)).toBe(true);
    expect(stableWithin([5, 3.2, 2.0], 3, 1)).toBe(false);
    expect(stableWithin([2, 2], 3, 1)).toBe(false);
    expect(stableWithin([2, NaN, 2], 3, 1)).toBe(false);
    expect(stableWithin([9, 1, 2, 1.5], 3, 1)).toBe(true);
  });

  it('reads CPU time from /proc/<pid>/stat, whatever the command name holds', () => {
    const stat = '4242 (node (x) y) S 1 4242 4242 0 -1 4194560 9876 0 0 0 1234 56 0 0 20 0 11 0 100 1000000 2000 18446744073709551615';
    expect(cpuMsFromStat(stat)).toBe((1234 + 56) * 10);
    expect(processCpuMs(undefined)).toBe(0);
    expect(processCpuMs(process.pid)).toBeGreaterThan(0);
  });
});
