import { describe, expect, it } from 'vitest';
import { moduleOf, perRequestDelta, summarize, type CpuProfile } from '../../bench/webhook/profile-summary.ts';

// root → (idle), a (src/core/patch.ts), b (node_modules/fast-json-patch), c (node:events)
const profile: CpuProfile = {
  startTime: 0,
  endTime: 1000,
  nodes: [
    { id: 1, callFrame: { functionName: '(root)', url: '', lineNumber: -1 }, children: [2, 3, 4, 5] },
    { id: 2, callFrame: { functionName: '(idle)', url: '', lineNumber: -1 } },
    { id: 3, callFrame: { functionName: 'diff', url: 'file:///w/src/core/patch.ts', lineNumber: 46 } },
    { id: 4, callFrame: { functionName: '_deepClone', url: 'file:///w/node_modules/fast-json-patch/commonjs/helpers.js', lineNumber: 51 } },
    { id: 5, callFrame: { functionName: 'emit', url: 'node:events', lineNumber: 488 } },
  ],
  // Samples at t = 100, 200, ..., 1000 µs; each lasts until the next.
  samples: [3, 3, 4, 2, 5, 4, 4, 4, 2, 3],
  timeDeltas: [100, 100, 100, 100, 100, 100, 100, 100, 100, 100],
};

describe('profile summary', () => {
  it('names the module of a frame', () => {
    expect(moduleOf('file:///w/node_modules/@scope/pkg/x.js', 'f')).toBe('@scope/pkg');
    expect(moduleOf('file:///w/node_modules/fast-json-patch/a.js', 'f')).toBe('fast-json-patch');
    expect(moduleOf('node:internal/streams/x', 'f')).toBe('node:internal');
    expect(moduleOf('file:///w/src/core/patch.ts', 'f')).toBe('src/core/patch.ts');
    expect(moduleOf('', '(garbage collector)')).toBe('(garbage collector)');
    expect(moduleOf('', 'writeUtf8String')).toBe('(native)');
  });

  it('sums self time per function, idle apart, within a window', () => {
    const s = summarize(profile, 10);
    // Ten samples of 0.1 ms except the last, which has no successor; two of them idle.
    expect(s.totalMs).toBeCloseTo(0.9);
    expect(s.busyMs).toBeCloseTo(0.7);
    expect(s.functions[0]!.name).toBe('_deepClone fast-json-patch:52');
    expect(s.functions.map((f) => f.name)).not.toContain('(idle)');
    const first = summarize(profile, 10, { fromUs: 0, toUs: 300 });
    expect(first.functions.map((f) => [f.name, Number(f.ms.toFixed(2))])).toEqual([
      ['diff src/core/patch.ts:47', 0.2],
      ['_deepClone fast-json-patch:52', 0.1],
    ]);
  });

  it('adds up several windows', () => {
    const s = summarize(profile, 10, [
      { fromUs: 0, toUs: 100 },
      { fromUs: 250, toUs: 300 },
    ]);
    expect(s.functions.map((f) => [f.name, Number(f.ms.toFixed(2))])).toEqual([
      ['diff src/core/patch.ts:47', 0.1],
      ['_deepClone fast-json-patch:52', 0.1],
    ]);
  });

  it('maps frames through a resolver', () => {
    const s = summarize(profile, 10, undefined, (url, line) => (url.endsWith('patch.ts') ? { url: 'file:///w/src/core/other.ts', line: line + 10 } : undefined));
    expect(s.functions.map((f) => f.name)).toContain('diff src/core/other.ts:57');
  });

  it('subtracts one window from another per request', () => {
    const d = perRequestDelta(profile, { window: { fromUs: 0, toUs: 500 }, requests: 1 }, { window: { fromUs: 501, toUs: 1000 }, requests: 1 });
    const byName = new Map(d.map((x) => [x.name, x.deltaUs]));
    expect(byName.get('diff src/core/patch.ts:47')).toBeCloseTo(200);
    expect(byName.get('_deepClone fast-json-patch:52')).toBeCloseTo(-200);
  });
});
