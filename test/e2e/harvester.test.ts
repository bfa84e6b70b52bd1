/**
 * Where a Job's logs went, on the real control plane with the test kubelet,
 * the webhook and VictoriaLogs: the sidecar's termination message in the pod
 * status, the `jobharvest.io/delivery` annotation and the one Event on the
 * Job. Counts are checked at VictoriaLogs.
 */
import type { CoreV1Event, V1Job, V1Pod } from '@kubernetes/client-node';
import { rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeTermination } from '../../src/contract/termination.ts';
import { DELIVERY_ANNOTATION, type Delivery } from '../../src/harvester/report.ts';
import { useCluster, waitFor } from '../harness/cluster/client.ts';
import { numberedLines, shellJob, Stack } from '../harness/kubelet/stack.ts';

const cluster = useCluster();
let stack: Stack;

interface Row {
  scenario: string;
  written: number;
  received: number;
  duplicated: number;
  annotation: string;
  event: string;
}
const tally: Row[] = [];

beforeAll(async () => {
  stack = await Stack.start({ info: cluster.info, name: 'hv', kubelet: { restartBackoffMs: 300 } });
}, 240_000);

afterAll(async () => {
  console.log('harvester: written / received / duplicated / delivery annotation / Event');
  for (const r of tally) console.log(`  ${r.scenario}: ${r.written} / ${r.received} / ${r.duplicated} / ${r.annotation} / ${r.event}`);
  await stack?.stop();
}, 120_000);

function gate(name: string): { path: string; open(): void; dispose(): void } {
  const path = join(tmpdir(), `jh-gate-${name}-${process.pid}-${Date.now()}`);
  return { path, open: () => writeFileSync(path, ''), dispose: () => rmSync(path, { force: true }) };
}

async function delivered(ns: string, name: string): Promise<{ job: V1Job; delivery: Delivery }> {
  return waitFor(
    `the delivery annotation on ${ns}/${name}`,
    async () => {
      const job = await stack.batch.readNamespacedJob({ name, namespace: ns });
      const raw = job.metadata?.annotations?.[DELIVERY_ANNOTATION];
      return raw ? { job, delivery: JSON.parse(raw) as Delivery } : undefined;
    },
    { timeoutMs: 60_000 },
  );
}

async function eventsOf(ns: string, job: V1Job): Promise<CoreV1Event[]> {
  const list = await stack.core.listNamespacedEvent({ namespace: ns, fieldSelector: `involvedObject.uid=${job.metadata!.uid}` });
  return list.items.filter((e) => e.source?.component === 'jobharvest');
}

async function sidecarMessage(ns: string, job: string): Promise<{ pod: V1Pod; text: string | undefined }> {
  const pods = await stack.core.listNamespacedPod({ namespace: ns, labelSelector: `batch.kubernetes.io/job-name=${job}` });
  const pod = pods.items[0]!;
  const st = pod.status?.initContainerStatuses?.find((s) => s.name === 'jobharvest');
  return { pod, text: st?.state?.terminated?.message };
}

describe('delivery report', () => {
  it('D1. every line shipped: the sidecar reports complete, the Job says where its logs went, one Normal LogsShipped Event', async () => {
    const N = 2000;
    const ns = await stack.namespace('d1', { ttlSeconds: 60 });
    await stack.batch.createNamespacedJob({ namespace: ns, body: shellJob('d1', { script: `sleep 1; ${numberedLines('d1', N)}` }) });
    const { job, delivery } = await delivered(ns, 'd1');
    expect(delivery).toEqual({ sink: 'loki', pods: 1, shipped: N, lost: 0, unaccounted: 0 });
    const { text } = await sidecarMessage(ns, 'd1');
    expect(decodeTermination(text)).toMatchObject({ state: 'complete', shipped: N, unsent: 0, runs: [], done: ['main/0'] });
    const events = await waitFor('the Event', async () => {
      const e = await eventsOf(ns, job);
      return e.length > 0 ? e : undefined;
    });
    expect(events.map((e) => [e.type, e.reason, e.message])).toEqual([['Normal', 'LogsShipped', `${N} lines from 1 pod shipped to loki`]]);
    const got = await stack.vl.countWithDistinct(stack.filter(ns), '_msg');
    tally.push({ scenario: 'D1. all shipped', written: N, received: got.total, duplicated: got.total - got.distinct, annotation: JSON.stringify(delivery), event: `${events[0]!.reason}: ${events[0]!.message}` });
    expect(got).toEqual({ total: N, distinct: N });
  });

  it('D2. server down past the drain budget: the termination message names the exact resume position, the Job the exact count lost, a Warning Event', async () => {
    const N1 = 300;
    const N2 = 200;
    const DRAIN = 3;
    const g = gate('d2');
    try {
      const ns = await stack.namespace('d2', { drainSeconds: DRAIN, ttlSeconds: 60 });
      await stack.batch.createNamespacedJob({
        namespace: ns,
        body: shellJob('d2', { terminationGracePeriodSeconds: DRAIN + 5, script: `${numberedLines('d2', N1)}; while [ ! -e "$GATE" ]; do sleep 0.05; done; ${numberedLines('d2', N2, N1 + 1)}`, env: [{ name: 'GATE', value: g.path }] }),
      });
      const filter = stack.filter(ns);
      await waitFor(`${N1} lines at the server`, async () => ((await stack.vl.count(filter)) >= N1 ? true : undefined), { timeoutMs: 60_000 });
      await stack.vl.stop();
      g.open();
      const { job, delivery } = await delivered(ns, 'd2');
      await stack.vl.start();
      expect(delivery).toEqual({ sink: 'loki', pods: 1, shipped: N1, lost: N2, unaccounted: 0 });
      const { pod, text } = await sidecarMessage(ns, 'd2');
      const m = decodeTermination(text)!;
      expect(m).toMatchObject({ state: 'incomplete', mode: 'node', shipped: N1, unsent: N2, done: [] });
      expect(m.runs).toHaveLength(1);
      const [container, restart, ts, n] = m.runs[0]!;
      expect([container, restart, n]).toEqual(['main', 0, 1]);
      // Resume through pods/log as a reader would: skip the lines before ts and
      // n at ts; the first line left is the first unsent one.
      const log = await stack.core.readNamespacedPodLog({ name: pod.metadata!.name!, namespace: ns, container: 'main', timestamps: true });
      const lines = String(log).split('\n').filter(Boolean);
      const at = lines.findIndex((l) => l.startsWith(`${ts} `));
      expect(at, 'the position is a line pods/log serves').toBeGreaterThanOrEqual(0);
      expect(lines[at]!.endsWith(`d2 line ${N1}`)).toBe(true);
      expect(lines[at + n]!.endsWith(`d2 line ${N1 + 1}`)).toBe(true);
      expect(lines.length - at - n).toBe(N2);
      const events = await waitFor('the Event', async () => {
        const e = await eventsOf(ns, job);
        return e.length > 0 ? e : undefined;
      });
      expect(events.map((e) => [e.type, e.reason, e.message])).toEqual([['Warning', 'LogsLost', `${N1} lines from 1 pod shipped to loki; ${N2} lines lost`]]);
      const got = await stack.vl.countWithDistinct(filter, '_msg');
      tally.push({ scenario: 'D2. server down past the drain budget', written: N1 + N2, received: got.total, duplicated: got.total - got.distinct, annotation: JSON.stringify(delivery), event: `${events[0]!.reason}: ${events[0]!.message}` });
      expect(got).toEqual({ total: N1, distinct: N1 });
    } finally {
      g.dispose();
      if (!stack.vl.running) await stack.vl.start();
    }
  });
});
