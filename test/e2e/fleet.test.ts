/**
 * A small fleet on simulated nodes: KWOK's fake nodes (test/harness/kwok) on
 * the real control plane, with kube-scheduler binding the pods, the webhook
 * and the harvester as processes, and VictoriaLogs. 50 Jobs in an opted-in
 * namespace are injected and run on the fake nodes; their pods end as the
 * stages make them: most sidecars drained (exit 0 and a complete termination
 * message, as a real sidecar writes it), a few killed (137, no message), whose
 * lines the harvester must then ship from pods/log, which KWOK serves from one
 * CRI log file. Every Job gets its signed delivery record, the killed ones'
 * lines arrive once each, and every Job is deleted by its TTL.
 *
 * This keeps the harness of `npm run bench:fleet` working; the bench runs the
 * same parts at thousands of Jobs.
 */
import type { V1Job } from '@kubernetes/client-node';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DELIVERY_ANNOTATION, type DeliveryRecord } from '../../harvester/report.ts';
import { INJECTED_LABEL } from '../../src/contract/harvest.ts';
import { NAMES } from '../../src/contract/env.ts';
import { encodeTermination } from '../../src/contract/termination.ts';
import { useCluster, waitFor } from '../harness/cluster/client.ts';
import { Fleet } from '../harness/kwok/kwok.ts';
import { FLEET_ANNOTATIONS } from '../harness/kwok/stages.ts';
import { Stack } from '../harness/kubelet/stack.ts';
import { exact } from '../harness/servers/victorialogs.ts';

const cluster = useCluster();
const JOBS = 50;
/** Jobs whose sidecar a SIGKILL ends (every tenth). */
const killed = (i: number) => i % 10 === 3;
const LINES = 40;
const dir = mkdtempSync(join(tmpdir(), 'jh-fleet-'));
const logsFile = join(dir, 'main.log');
/** The CRI lines every fleet container serves as pods/log. */
const stamps = Array.from({ length: LINES }, (_, i) => `2026-12-04T10:00:${String(i).padStart(2, '0')}.000000001Z`);
writeFileSync(logsFile, stamps.map((ts, i) => `${ts} stdout F fleet line ${i + 1}\n`).join(''));

let stack: Stack;
let fleet: Fleet;

beforeAll(async () => {
  // No test kubelet for the fleet's namespace: its name is outside this stack's prefix.
  stack = await Stack.start({ info: cluster.info, name: 'kw' });
  fleet = await Fleet.start(cluster.info, { nodes: 5, podsPerNode: 110, logsFile });
}, 240_000);

afterAll(async () => {
  await fleet?.stop();
  await stack?.stop();
  rmSync(dir, { recursive: true, force: true });
}, 120_000);

function fleetJob(name: string, i: number): V1Job {
  // The drained sidecar's own message, as sidecar/termination.ts writes it: complete, its one run of main done, nothing to resume.
  const message = encodeTermination({ state: 'complete', mode: 'api', sink: 'loki', shipped: LINES, unsent: 0, dead_lettered: 0 }, [], ['main/0']);
  const annotations: Record<string, string> = killed(i)
    ? { [FLEET_ANNOTATIONS.exitCode]: '137', [FLEET_ANNOTATIONS.runFor]: '1s' }
    : { [FLEET_ANNOTATIONS.message]: message, [FLEET_ANNOTATIONS.runFor]: '1s' };
  return {
    metadata: { name },
    spec: {
      backoffLimit: 0,
      template: {
        metadata: { annotations },
        spec: { ...Fleet.podSpec(), restartPolicy: 'Never', containers: [{ name: 'main', image: 'registry.example/app:1', command: ['run'] }] },
      },
    },
  };
}

function unsigned(raw: string): DeliveryRecord {
  const { sig, ...d } = JSON.parse(raw) as DeliveryRecord & { sig?: string };
  expect(sig).toMatch(/^v2\.[A-Za-z0-9_-]{8}\./);
  return d;
}

describe('a fleet of 50 Jobs on KWOK nodes', () => {
  it('F1. every Job injected, run on a fake node and recorded; the killed sidecars\' lines shipped once by the harvester from pods/log; every Job deleted by its TTL', async () => {
    const started = Date.now();
    const ns = `fleet-${Math.random().toString(16).slice(2, 6)}`;
    await stack.core.createNamespace({
      body: {
        metadata: {
          name: ns,
          annotations: { 'jobharvest.io/inject': 'enabled', 'jobharvest.io/sink': 'loki', 'jobharvest.io/endpoint': stack.vl.endpoints.loki, 'jobharvest.io/ttl-seconds-after-finished': '3', 'jobharvest.io/mode': 'api' },
        },
      },
    });
    await waitFor(`the default ServiceAccount in ${ns}`, () => stack.core.readNamespacedServiceAccount({ name: 'default', namespace: ns }), { timeoutMs: 20_000 });
    try {
      const names = Array.from({ length: JOBS }, (_, i) => `job-${String(i).padStart(2, '0')}`);
      for (const [i, name] of names.entries()) {
        const job = await stack.batch.createNamespacedJob({ namespace: ns, body: fleetJob(name, i) });
        expect(job.metadata?.labels?.[INJECTED_LABEL], `${name} injected`).toBeDefined();
        expect(job.spec!.template.spec!.initContainers?.map((c) => c.name)).toContain(NAMES.container);
      }

      // Every record, read as the harvester writes it, before the TTL takes the Job.
      const records = new Map<string, DeliveryRecord>();
      await waitFor(
        `${JOBS} delivery records`,
        async () => {
          const list = await stack.batch.listNamespacedJob({ namespace: ns });
          for (const j of list.items) {
            const raw = j.metadata?.annotations?.[DELIVERY_ANNOTATION];
            if (raw && !records.has(j.metadata!.name!)) records.set(j.metadata!.name!, unsigned(raw));
          }
          return records.size === JOBS ? true : undefined;
        },
        { timeoutMs: 150_000, intervalMs: 250 },
      );
      for (const [i, name] of names.entries()) {
        const { usage, ...counts } = records.get(name)!;
        expect(usage?.pods, name).toBe(1);
        if (killed(i)) expect(counts, name).toEqual({ sink: 'loki', pods: 1, shipped: LINES, lost: 0, unaccounted: 0, harvested: LINES });
        // A drained sidecar's lines are its own count: nothing to harvest, so no hold and no harvested count.
        else expect(counts, name).toEqual({ sink: 'loki', pods: 1, shipped: LINES, lost: 0, unaccounted: 0 });
      }

      // The harvested lines, once each: LINES per killed Job, none for the others (their fake sidecars sent nothing).
      const harvestedJobs = names.filter((_, i) => killed(i));
      const filter = exact('namespace', ns);
      expect(await stack.vl.countWithDistinct(filter, '_msg')).toMatchObject({ total: harvestedJobs.length * LINES });
      for (const name of harvestedJobs) expect(await stack.vl.countWithDistinct(`${filter} ${exact('job', name)}`, '_msg'), name).toEqual({ total: LINES, distinct: LINES });

      // The TTL, released by the harvester, deletes every Job.
      await waitFor('every Job deleted by its TTL', async () => ((await stack.batch.listNamespacedJob({ namespace: ns })).items.length === 0 ? true : undefined), { timeoutMs: 90_000, intervalMs: 500 });
      console.log(`F1: ${JOBS} Jobs on ${fleet.nodeNames.length} fake nodes, ${harvestedJobs.length} harvested (${harvestedJobs.length * LINES} lines), recorded and deleted in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    } catch (err) {
      console.log(`kwok log:\n${fleet.kwokLog()}`);
      throw err;
    } finally {
      await stack.core.deleteNamespace({ name: ns }).catch(() => undefined);
    }
  }, 300_000);
});
