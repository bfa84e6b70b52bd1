// Reading the sidecar's --cpu-prof profiles: self time per function, and per
// stage of the pipeline. The sidecar runs from its bundle, so a frame names a
// chunk of dist/; the bundle's source maps (scripts/bundle.mjs writes them)
// give back the source file, and the file's folder gives the stage.
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { SourceMap } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

interface Profile {
  nodes: { id: number; children?: number[]; callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number } }[];
  samples: number[];
  timeDeltas: number[];
}

function readProfile(dir: string): Profile | undefined {
  const file = readdirSync(dir).find((f) => f.endsWith('.cpuprofile'));
  return file ? (JSON.parse(readFileSync(join(dir, file), 'utf8')) as Profile) : undefined;
}

type ProfileNode = Profile['nodes'][number];

/** Sums the sampled time (ms) of each node under the key `keyOf` gives it. */
function sum(p: Profile, keyOf: (node: ProfileNode) => string): Map<string, number> {
  const key = new Map(p.nodes.map((n) => [n.id, keyOf(n)]));
  const out = new Map<string, number>();
  p.samples.forEach((id, i) => {
    const k = key.get(id)!;
    out.set(k, (out.get(k) ?? 0) + (p.timeDeltas[i] ?? 0) / 1000);
  });
  return out;
}

/** Self time per function (ms) in the profile of `dir`. */
export function selfTimes(dir: string): Map<string, number> {
  const p = readProfile(dir);
  if (!p) return new Map();
  return sum(p, (n) => `${n.callFrame.functionName || '(anonymous)'} ${n.callFrame.url.split('/').pop() ?? ''}:${n.callFrame.lineNumber + 1}`);
}

/**
 * Where a source file's time goes. The codec is node:zlib's frames and
 * sidecar/encode/compress.ts (zstd and gzip run synchronously on the event
 * loop, so their native time is the self time of those frames).
 */
export function stageOf(source: string): string {
  if (source === '(garbage collector)') return 'GC (main thread)';
  if (source === '(program)' || source === '(root)') return 'native, unattributed';
  if (source === 'node:zlib' || source.endsWith('sidecar/encode/compress.ts')) return 'codec (zlib, zstd)';
  const m = /sidecar\/(sources|shape|encode|records|delivery|sinks)\//.exec(source);
  if (m) {
    const stage: Record<string, string> = {
      sources: 'discover + tail (sources/)',
      shape: 'shape (shape/)',
      encode: 'encode (encode/)',
      records: 'records (records/)',
      delivery: 'batch + deliver + checkpoint (delivery/)',
      sinks: 'sink clients (sinks/)',
    };
    return stage[m[1]!]!;
  }
  if (source.includes('/sidecar/')) return 'sidecar, other';
  if (source.startsWith('node:')) return `Node.js ${/^node:(?:internal\/)?([a-z_]+)/.exec(source)?.[1] ?? 'internals'}`;
  return 'other';
}

/**
 * Blocking file calls of the event loop. A profile samples wall time, so
 * their self time is mostly the thread waiting on the disk, not CPU: they are
 * shown apart from the stages.
 */
const BLOCKING = new Set(['read', 'open', 'openFileHandle', 'fsync', 'fdatasync', 'close', 'writeFileUtf8', 'writeString', 'writeBuffer', 'rename', 'stat', 'lstat', 'fstat', 'readdir']);

/**
 * Self time per stage (ms), the idle time left out. A frame with no script
 * (a native binding: zstd's compress, a read) is charged to the stage of the
 * script that called it.
 */
export function stageTimes(dir: string): Map<string, number> {
  const p = readProfile(dir);
  if (!p) return new Map();
  const maps = new Map<string, SourceMap | undefined>();
  const mapOf = (url: string): SourceMap | undefined => {
    if (!maps.has(url)) {
      const file = url.startsWith('file:') ? fileURLToPath(url) : url;
      maps.set(url, existsSync(`${file}.map`) ? new SourceMap(JSON.parse(readFileSync(`${file}.map`, 'utf8'))) : undefined);
    }
    return maps.get(url);
  };
  const parent = new Map<number, ProfileNode>();
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n);
  const stage = new Map<number, string>();
  const stageOfNode = (n: ProfileNode): string => {
    const known = stage.get(n.id);
    if (known) return known;
    const f = n.callFrame;
    let s: string;
    if (f.url) {
      const entry = mapOf(f.url)?.findEntry(f.lineNumber, f.columnNumber);
      s = stageOf(entry && 'originalSource' in entry ? entry.originalSource : f.url);
    } else if (f.functionName.startsWith('(') || !parent.has(n.id)) {
      s = f.functionName === '(idle)' ? '(idle)' : stageOf(f.functionName || '(program)');
    } else {
      s = stageOfNode(parent.get(n.id)!);
    }
    stage.set(n.id, s);
    return s;
  };
  const times = sum(p, (n) => {
    const f = n.callFrame;
    if (!f.url && BLOCKING.has(f.functionName)) return 'blocking file calls (wall time, mostly waiting)';
    return stageOfNode(byId.get(n.id)!);
  });
  times.delete('(idle)');
  return times;
}
