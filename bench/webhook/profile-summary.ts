// Reads a V8 .cpuprofile (node --cpu-prof) and sums self time per function
// and per module: the text form of a flame graph's widest leaves.
import { existsSync, readFileSync } from 'node:fs';
import { SourceMap } from 'node:module';
import { fileURLToPath } from 'node:url';

export interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number; columnNumber?: number };
  hitCount?: number;
  children?: number[];
}

export interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples?: number[];
  timeDeltas?: number[];
}

export interface SelfTime {
  name: string;
  ms: number;
  share: number;
}

/** Where a frame's code lives: a package, a project file, Node's internals, or V8's own buckets. */
export function moduleOf(url: string, functionName: string): string {
  if (url === '') return functionName.startsWith('(') ? functionName : '(native)';
  if (url.startsWith('node:')) return 'node:' + url.slice(5).split('/')[0];
  const nm = url.lastIndexOf('node_modules/');
  if (nm >= 0) {
    const rest = url.slice(nm + 'node_modules/'.length).split('/');
    return rest[0]!.startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]!;
  }
  const src = /\/((?:src|bench|sidecar)\/.*)$/.exec(url);
  return src ? src[1]! : url.slice(url.lastIndexOf('/') + 1);
}

/** A window of the profile's clock (µs, CLOCK_MONOTONIC like process.hrtime). */
export interface Window {
  fromUs: number;
  toUs: number;
}

/** Self time (ms) by node, from the samples' timings, falling back to hit counts. */
function selfTimes(p: CpuProfile, window?: Window | Window[]): Map<number, number> {
  const windows = window === undefined ? undefined : Array.isArray(window) ? window : [window];
  const byNode = new Map<number, number>();
  if (p.samples && p.timeDeltas && p.samples.length === p.timeDeltas.length) {
    // A sample's timestamp is the start time plus the deltas up to it; its
    // time is the delta to the next sample.
    let t = p.startTime;
    for (let i = 0; i < p.samples.length; i++) {
      t += p.timeDeltas[i]!;
      if (windows && !windows.some((w) => t >= w.fromUs && t <= w.toUs)) continue;
      const dt = (p.timeDeltas[i + 1] ?? 0) / 1000;
      byNode.set(p.samples[i]!, (byNode.get(p.samples[i]!) ?? 0) + dt);
    }
  } else {
    const total = (p.endTime - p.startTime) / 1000;
    const hits = p.nodes.reduce((s, n) => s + (n.hitCount ?? 0), 0) || 1;
    for (const n of p.nodes) byNode.set(n.id, ((n.hitCount ?? 0) * total) / hits);
  }
  return byNode;
}

/** Maps a bundled frame back to its source (0-based line and column in, 0-based line out). */
export type Resolve = (url: string, line: number, column: number) => { url: string; line: number } | undefined;

export function summarize(p: CpuProfile, top = 20, window?: Window | Window[], resolve?: Resolve): { totalMs: number; busyMs: number; functions: SelfTime[]; modules: SelfTime[] } {
  const self = selfTimes(p, window);
  const fn = new Map<string, number>();
  const mod = new Map<string, number>();
  let total = 0;
  let idle = 0;
  for (const n of p.nodes) {
    const ms = self.get(n.id) ?? 0;
    if (ms === 0) continue;
    total += ms;
    const raw = n.callFrame;
    if (raw.functionName === '(idle)') idle += ms;
    const at = raw.url === '' ? undefined : resolve?.(raw.url, raw.lineNumber, raw.columnNumber ?? 0);
    const f = at ? { ...raw, url: at.url, lineNumber: at.line } : raw;
    const m = moduleOf(f.url, f.functionName);
    const name = f.url === '' ? f.functionName : `${f.functionName || '(anonymous)'} ${m}:${f.lineNumber + 1}`;
    fn.set(name, (fn.get(name) ?? 0) + ms);
    mod.set(m, (mod.get(m) ?? 0) + ms);
  }
  const busy = total - idle;
  const rank = (m: Map<string, number>) =>
    [...m]
      .filter(([k]) => k !== '(idle)')
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([name, ms]) => ({ name, ms, share: busy > 0 ? ms / busy : 0 }));
  return { totalMs: total, busyMs: busy, functions: rank(fn), modules: rank(mod) };
}

/**
 * Where one window costs more per request than another, function by function
 * (µs per request): what /mutate adds to the baseline route.
 */
export function perRequestDelta(p: CpuProfile, a: { window: Window; requests: number }, b: { window: Window; requests: number }, top = 20, resolve?: Resolve): Array<{ name: string; aUs: number; bUs: number; deltaUs: number }> {
  const all = 100_000;
  const fa = new Map(summarize(p, all, a.window, resolve).functions.map((f) => [f.name, (f.ms * 1000) / a.requests]));
  const fb = new Map(summarize(p, all, b.window, resolve).functions.map((f) => [f.name, (f.ms * 1000) / b.requests]));
  return [...new Set([...fa.keys(), ...fb.keys()])]
    .map((name) => ({ name, aUs: fa.get(name) ?? 0, bUs: fb.get(name) ?? 0, deltaUs: (fa.get(name) ?? 0) - (fb.get(name) ?? 0) }))
    .sort((x, y) => y.deltaUs - x.deltaUs)
    .slice(0, top);
}

export function formatSummary(s: ReturnType<typeof summarize>, perRequestOf?: number): string {
  const lines: string[] = [];
  const per = (ms: number) => (perRequestOf ? `  ${((ms * 1000) / perRequestOf).toFixed(1).padStart(7)} µs/req` : '');
  lines.push(`busy ${s.busyMs.toFixed(0)} ms of ${s.totalMs.toFixed(0)} ms sampled${perRequestOf ? `, ${perRequestOf} requests, ${((s.busyMs * 1000) / perRequestOf).toFixed(1)} µs busy per request` : ''}`);
  lines.push('top self time by function:');
  for (const f of s.functions) lines.push(`  ${(f.share * 100).toFixed(1).padStart(5)}%${per(f.ms)}  ${f.name}`);
  lines.push('self time by module:');
  for (const m of s.modules) lines.push(`  ${(m.share * 100).toFixed(1).padStart(5)}%${per(m.ms)}  ${m.name}`);
  return lines.join('\n');
}

/** Resolves frames of bundled files through the source map next to each (`<file>.map`), loaded once per file. */
export function sourceMapResolver(): Resolve {
  const maps = new Map<string, SourceMap | undefined>();
  return (url, line, column) => {
    if (!maps.has(url)) {
      let map: SourceMap | undefined;
      try {
        const path = url.startsWith('file://') ? fileURLToPath(url) : url;
        if (path.endsWith('.mjs') && existsSync(`${path}.map`)) map = new SourceMap(JSON.parse(readFileSync(`${path}.map`, 'utf8')));
      } catch {
        map = undefined;
      }
      maps.set(url, map);
    }
    const e = maps.get(url)?.findEntry(line, column) as { originalSource?: string; originalLine?: number } | undefined;
    return e?.originalSource ? { url: e.originalSource, line: e.originalLine ?? 0 } : undefined;
  };
}
