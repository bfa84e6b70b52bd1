/**
 * A tenant's start pattern on the real control plane with the test kubelet,
 * the webhook and the harvester as its own process: with the log server
 * down past the drain budget, two Jobs of 100 lines of 256 KiB each are left
 * to the harvester, one annotated with the report's pattern (refused at
 * admission: the sidecar never gets it), one with the worst pattern accepted
 * (the harvester applies it). The harvester ships both while it keeps its
 * Lease: the same holder throughout, no "stopped leading", no renewal gap
 * near the renew deadline (2 s at a 3 s Lease).
 */
import { CoordinationV1Api, type V1Job, type V1Pod } from '@kubernetes/client-node';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HOLD_ANNOTATION } from '../../harvester/hold.ts';
import { DELIVERY_ANNOTATION, type DeliveryRecord } from '../../harvester/report.ts';
import { ENV } from '../../src/contract/env.ts';
import { kubeConfigFor, useCluster, waitFor } from '../harness/cluster/client.ts';
import { shellJob, Stack } from '../harness/kubelet/stack.ts';
import { costlyLines, HOSTILE, worstAccepted } from '../support/start-pattern-lines.ts';

const cluster = useCluster();
let stack: Stack;
let dir: string;
const LINES = 100;
const LEASE_SECONDS = 3;
const RENEW_DEADLINE_MS = Math.floor((LEASE_SECONDS * 1000 * 2) / 3);

beforeAll(async () => {
  // pods/log serves only a run's live file: no rotation within the 25 MiB a Job writes here, or the harvester could not see the lines.
  stack = await Stack.start({ info: cluster.info, name: 'hp', kubelet: { restartBackoffMs: 300, logMaxSizeBytes: 64 * 1024 * 1024 }, harvesterArgs: ['--lease-seconds', String(LEASE_SECONDS)] });
  dir = mkdtempSync(join(tmpdir(), 'jh-pattern-'));
}, 240_000);

afterAll(async () => {
  await stack?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
}, 120_000);

async function held(ns: string, name: string): Promise<V1Job> {
  return waitFor(`${ns}/${name} held`, async () => {
    const job = await stack.batch.readNamespacedJob({ name, namespace: ns });
    return job.metadata?.annotations?.[HOLD_ANNOTATION] ? job : undefined;
  }, { timeoutMs: 120_000, intervalMs: 200 });
}

async function delivered(ns: string, name: string, timeoutMs: number): Promise<DeliveryRecord> {
  return waitFor(`the delivery record of ${ns}/${name}`, async () => {
    const raw = (await stack.batch.readNamespacedJob({ name, namespace: ns })).metadata?.annotations?.[DELIVERY_ANNOTATION];
    if (!raw) return undefined;
    const { sig, ...d } = JSON.parse(raw) as DeliveryRecord & { sig?: string };
    expect(sig).toMatch(/^v2\.[A-Za-z0-9_-]{8}\./);
    return d;
  }, { timeoutMs, intervalMs: 250 });
}

async function sidecarEnv(ns: string, job: string): Promise<Record<string, string>> {
  const pods = await stack.core.listNamespacedPod({ namespace: ns, labelSelector: `batch.kubernetes.io/job-name=${job}` });
  const pod: V1Pod = pods.items[0]!;
  const c = [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])].find((x) => x.name === 'jobharvest')!;
  return Object.fromEntries((c.env ?? []).filter((e) => e.value !== undefined).map((e) => [e.name, e.value!]));
}

describe('a tenant\'s start pattern and the harvester\'s Lease', () => {
  it('P1. two Jobs of 100 lines of 256 KiB, the report\'s pattern and the worst accepted: both shipped by the harvester, which keeps its Lease throughout', async () => {
    const worst = worstAccepted();
    const file = join(dir, 'lines');
    writeFileSync(file, costlyLines(LINES).join('\n') + '\n');
    const ns = await stack.namespace('pat', { drainSeconds: 2 });
    await stack.vl.stop();
    try {
      for (const [name, pattern] of [['hostile', HOSTILE], ['worst', worst]] as const) {
        const job = shellJob(name, { script: 'cat "$LINES"', env: [{ name: 'LINES', value: file }], terminationGracePeriodSeconds: 10 });
        job.metadata!.annotations = { 'jobharvest.io/multiline-start': pattern };
        await stack.batch.createNamespacedJob({ namespace: ns, body: job });
      }
      // Admission refused the report's pattern (a warning, the level below wins: none); the worst accepted one is in the signed sidecar.
      expect((await sidecarEnv(ns, 'hostile'))[ENV.MULTILINE_START.name]).toBeUndefined();
      expect((await sidecarEnv(ns, 'worst'))[ENV.MULTILINE_START.name]).toBe(worst);
      await held(ns, 'hostile');
      await held(ns, 'worst');

      const leases = kubeConfigFor(cluster.info).makeApiClient(CoordinationV1Api);
      const leaseName = 'jobharvest-hp-harvester';
      const before = await leases.readNamespacedLease({ name: leaseName, namespace: 'jobharvest' });
      const holder = before.spec?.holderIdentity;
      expect(holder).toBeTruthy();
      const logBefore = readFileSync(stack.harvester!.logPath, 'utf8').length;
      // Every 200 ms: who holds the Lease, and when it was last renewed.
      const seen: Array<{ holder: string | undefined; renew: number }> = [];
      let polling = true;
      const poll = (async () => {
        while (polling) {
          const l = await leases.readNamespacedLease({ name: leaseName, namespace: 'jobharvest' });
          seen.push({ holder: l.spec?.holderIdentity, renew: new Date(l.spec?.renewTime as unknown as string).getTime() });
          await new Promise((r) => setTimeout(r, 200));
        }
      })();
      await stack.vl.start();
      const started = Date.now();
      const hostile = await delivered(ns, 'hostile', 300_000);
      const worstDelivery = await delivered(ns, 'worst', 300_000);
      const tookMs = Date.now() - started;
      polling = false;
      await poll;

      expect(hostile).toMatchObject({ pods: 1, shipped: LINES, lost: 0, unaccounted: 0, harvested: LINES });
      expect(worstDelivery).toMatchObject({ pods: 1, shipped: LINES, lost: 0, unaccounted: 0, harvested: LINES });
      expect(new Set(seen.map((s) => s.holder))).toEqual(new Set([holder]));
      const renewals = [...new Set(seen.map((s) => s.renew))].sort((a, b) => a - b);
      const gaps = renewals.slice(1).map((r, i) => r - renewals[i]!);
      const longest = Math.max(0, ...gaps);
      const log = readFileSync(stack.harvester!.logPath, 'utf8').slice(logBefore);
      console.log(`P1: both Jobs harvested in ${tookMs} ms; ${seen.length} Lease reads, ${renewals.length} renewals, longest gap between renewals ${longest} ms (renew deadline ${RENEW_DEADLINE_MS} ms)`);
      expect(log).not.toContain('"msg":"stopped leading"');
      expect(log).not.toContain('"msg":"started leading"');
      expect(renewals.length).toBeGreaterThan(1);
      // Renewed every retry period (the harvester's default at a 3 s Lease), never near the deadline.
      expect(longest).toBeLessThan(RENEW_DEADLINE_MS);
    } finally {
      if (!stack.vl.running) await stack.vl.start();
    }
  }, 600_000);
});
