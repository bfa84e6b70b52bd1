/**
 * Helpers of the real-node scenarios that watch a Job from outside: its pod,
 * its end, the sidecar's closing summary, and the sidecar's processes and
 * open files on the node.
 */
import type { V1JobCondition } from '@kubernetes/client-node';
import { existsSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { NAMES } from '../../src/contract/env.ts';
import type { RealNode } from '../harness/node/node.ts';
import { summaryIn } from '../support/summary.ts';
import { waitFor } from '../support/wait.ts';
import type { NodeEnv } from '../support/node-env.ts';

export async function jobPod(env: NodeEnv, namespace: string, job: string): Promise<{ name: string; uid: string }> {
  const pod = await waitFor(
    `the pod of ${namespace}/${job}`,
    async () => (await env.core.listNamespacedPod({ namespace, labelSelector: `batch.kubernetes.io/job-name=${job}` })).items[0],
    { timeoutMs: 60_000 },
  );
  return { name: pod.metadata!.name!, uid: pod.metadata!.uid! };
}

export async function jobFinished(env: NodeEnv, namespace: string, job: string, timeoutMs = 150_000): Promise<V1JobCondition> {
  return waitFor(
    `${namespace}/${job} to finish`,
    async () => {
      const j = await env.batch.readNamespacedJob({ name: job, namespace });
      return j.status?.conditions?.find((c) => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True');
    },
    { timeoutMs, intervalMs: 250 },
  );
}

/** The sidecar's closing summary line (JSON), from its container log; undefined when there is none. */
export async function sidecarSummary(env: NodeEnv, namespace: string, pod: string): Promise<Record<string, unknown> | undefined> {
  const log = await env.core.readNamespacedPodLog({ name: pod, namespace, container: NAMES.container });
  return summaryIn(log);
}

/** The host PIDs in a container's cgroup on the node (cgroup v1, cgroupfs driver, as node.ts sets up). */
export function containerPids(node: RealNode, containerId: string): number[] {
  const root = join('/sys/fs/cgroup/pids', readFileSync(join(node.dir, 'cgroup-root'), 'utf8').trim());
  const find = (dir: string): string | undefined => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      if (!e.isDirectory()) continue;
      if (e.name === containerId) return join(dir, e.name);
      const hit = find(join(dir, e.name));
      if (hit !== undefined) return hit;
    }
    return undefined;
  };
  const cg = find(root);
  if (cg === undefined) return [];
  return readFileSync(join(cg, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number);
}

/** The files a process holds open, as the kernel names them (a deleted one ends in ` (deleted)`). */
export function openFiles(pid: number): string[] {
  const out: string[] = [];
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return out;
  }
  for (const fd of fds) {
    try {
      out.push(readlinkSync(`/proc/${pid}/fd/${fd}`));
    } catch {
      // closed meanwhile
    }
  }
  return out;
}

/** The container ID (without the runtime prefix) of a pod's container or init container, once it has one. */
export async function containerIdOf(env: NodeEnv, namespace: string, pod: string, container: string): Promise<string> {
  return waitFor(
    `the container ID of ${container} in ${namespace}/${pod}`,
    async () => {
      const p = await env.core.readNamespacedPod({ name: pod, namespace });
      const all = [...(p.status?.initContainerStatuses ?? []), ...(p.status?.containerStatuses ?? [])];
      return all.find((s) => s.name === container && s.state?.running !== undefined)?.containerID?.replace(/^\w+:\/\//, '');
    },
    { timeoutMs: 60_000, intervalMs: 250 },
  );
}

/**
 * Copies of a pod's container log files (`<container>/0.log`) on the node,
 * refreshed every 50 ms until stop(): the kubelet removes them with the pod,
 * and a test reads what was written after it is gone.
 */
export function copyPodLogs(podDir: string, containers: readonly string[]): { latest(container: string): string; stop(): Promise<void> } {
  const copies = new Map<string, string>(containers.map((c) => [c, '']));
  let copying = true;
  const copier = (async () => {
    while (copying) {
      try {
        if (existsSync(podDir)) for (const c of containers) copies.set(c, readFileSync(join(podDir, c, '0.log'), 'utf8'));
      } catch {
        // removed between the check and the read
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  return {
    latest: (c) => copies.get(c) ?? '',
    stop: async () => {
      copying = false;
      await copier;
    },
  };
}
