// Container figures read straight from the node: containerd's CRI status
// (nanosecond start times; the API server's startedAt has whole seconds only)
// and the container's memory cgroup under the kubelet's cgroupRoot.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** `containerd://<id>` (a container status's containerID) → `<id>`. */
export function bareId(containerId: string | undefined): string {
  const id = containerId?.replace(/^[a-z]+:\/\//, '') ?? '';
  if (!/^[0-9a-f]{64}$/.test(id)) throw new Error(`unexpected container ID ${JSON.stringify(containerId)}`);
  return id;
}

/**
 * When containerd created, started and (once it has) saw the end of the container, in epoch milliseconds:
 * the CRI plugin's status record, `<root>/io.containerd.grpc.v1.cri/containers/<id>/status`
 * (`{"Version":"v1","CreatedAt":<unix ns>,"StartedAt":<unix ns>,"FinishedAt":<unix ns>,…}` in containerd 2.2).
 */
export function criTimesMs(containerdRoot: string, id: string): { createdAt: number; startedAt: number; finishedAt: number | undefined } {
  const path = join(containerdRoot, 'io.containerd.grpc.v1.cri', 'containers', id, 'status');
  const record = JSON.parse(readFileSync(path, 'utf8')) as { Version?: string; CreatedAt?: number; StartedAt?: number; FinishedAt?: number };
  const { CreatedAt: created, StartedAt: started, FinishedAt: finished } = record;
  if (record.Version !== 'v1' || typeof started !== 'number' || started <= 0 || typeof created !== 'number' || created <= 0) {
    throw new Error(`${path}: no CreatedAt/StartedAt in ${JSON.stringify(record).slice(0, 300)}`);
  }
  return { createdAt: created / 1e6, startedAt: started / 1e6, finishedAt: typeof finished === 'number' && finished > 0 ? finished / 1e6 : undefined };
}

/** The container's cgroup in the v1 memory hierarchy: a directory named by its ID somewhere under the node's cgroupRoot. */
export function findMemoryCgroup(cgroupRoot: string, id: string): string | undefined {
  const walk = (dir: string, depth: number): string | undefined => {
    if (depth > 6) return undefined;
    let entries;
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return undefined; // removed while we walked
    }
    for (const e of entries) {
      if (!e.isDirectory()) continue;
      if (e.name === id) return join(dir, e.name);
      const found = walk(join(dir, e.name), depth + 1);
      if (found !== undefined) return found;
    }
    return undefined;
  };
  const root = join('/sys/fs/cgroup/memory', cgroupRoot);
  if (!existsSync(root)) throw new Error(`${root} does not exist: this benchmark reads cgroup v1 memory files, as the real node uses them`);
  return walk(root, 0);
}

export interface MemorySample {
  /**
   * The working set, memory.usage_in_bytes − memory.stat total_inactive_file,
   * as the kubelet computes it (cAdvisor): what `kubectl top` shows, what
   * eviction weighs and, with the inactive page cache that the kernel
   * reclaims first, what the memory limit is enforced against.
   */
  workingSet: number;
  /** memory.stat total_rss: anonymous memory, page cache excluded. */
  rss: number;
  /** memory.stat total_cache: page cache charged to the cgroup, active or not. */
  cache: number;
  /** memory.stat total_mapped_file: the part of that cache mapped by the cgroup's processes (the node binary's text, mostly). */
  mappedFile: number;
  /** memory.usage_in_bytes − memory.stat total_cache. */
  usageNoCache: number;
  usage: number;
  /** memory.max_usage_in_bytes: the kernel's own high-water mark, page cache included. */
  maxUsage: number;
  /**
   * The sum of VmRSS of the cgroup's processes, as ps or /proc show it: file
   * pages mapped from the image (the node binary) count here but are charged
   * to the cgroup as page cache, not total_rss.
   */
  procRss: number;
}

function procRss(cgroup: string): number {
  let sum = 0;
  for (const pid of readFileSync(join(cgroup, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean)) {
    try {
      const kb = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
      sum += Number(kb ?? 0) * 1024;
    } catch {
      // The process exited between the two reads.
    }
  }
  return sum;
}

export function readMemory(cgroup: string): MemorySample | undefined {
  try {
    const stat = new Map(
      readFileSync(join(cgroup, 'memory.stat'), 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => {
          const [k, v] = l.split(' ');
          return [k!, Number(v)] as const;
        }),
    );
    const usage = Number(readFileSync(join(cgroup, 'memory.usage_in_bytes'), 'utf8'));
    const maxUsage = Number(readFileSync(join(cgroup, 'memory.max_usage_in_bytes'), 'utf8'));
    const inactiveFile = stat.get('total_inactive_file') ?? NaN;
    return {
      // As cAdvisor: never below zero.
      workingSet: Math.max(0, usage - inactiveFile),
      rss: stat.get('total_rss') ?? NaN,
      cache: stat.get('total_cache') ?? NaN,
      mappedFile: stat.get('total_mapped_file') ?? NaN,
      usageNoCache: usage - (stat.get('total_cache') ?? 0),
      usage,
      maxUsage,
      procRss: procRss(cgroup),
    };
  } catch {
    return undefined; // the container exited and its cgroup went
  }
}

export const MiB = (bytes: number) => bytes / (1024 * 1024);
