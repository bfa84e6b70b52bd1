/**
 * Issue 25 on the real node: a Job that chose a 1 s grace period keeps it
 * (the webhook no longer raises it to the drain budget), and its main
 * container ignores SIGTERM while writing lines steadily. Evicted mid-run
 * through the Eviction API, its pod is gone within about 2 s, as without
 * jobharvest.
 *
 * The kubelet's order: SIGTERM to the main container, which ignores it; at
 * 1 s, the grace period spent waiting for it, SIGTERM to the sidecar, with
 * the kubelet's minimum window of 2 s; at 2 s (the same minimum) SIGKILL to
 * the main container, which wrote on until then. The sidecar's drain follows
 * the files until they go quiet, so every line arrives, in order and once.
 *
 * The evicted pod is deleted as soon as the Job controller has counted it,
 * before the Job finishes, and its termination message with it; the
 * harvester's pod watch keeps the sidecar's report from the pod's last state,
 * so the Job's delivery record counts every line, as shipped by the sidecar
 * (harvested 0). See docs/configuration.md#a-short-grace-period.
 *
 * What was written is read from the kubelet's own log file on the node: the
 * test keeps the last copy it read until the kubelet removes it.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { NAMES } from '../../src/contract/env.ts';
import { DELIVERY_ANNOTATION } from '../../src/contract/harvest.ts';
import { BUSYBOX_IMAGE } from '../harness/node/images.ts';
import { exact, type VictoriaLogs } from '../harness/servers/victorialogs.ts';
import { summaryIn } from '../support/summary.ts';
import { waitFor } from '../support/wait.ts';
import { copyPodLogs, jobFinished, jobPod } from './scenario-support.ts';
import { createNamespace, startProductOnNode, waitForPodPhase, type NodeEnv, type ProductOnNode } from '../support/node-env.ts';
import { describeRealNode } from './support.ts';

const IMAGE = BUSYBOX_IMAGE.replace('docker.io/library/', '');
// SIGTERM ignored; 50 lines every 0.05 s until the kubelet's SIGKILL.
const script = `trap '' TERM; i=0; while true; do j=0; while [ $j -lt 50 ]; do i=$((i+1)); echo "evicted line $i"; j=$((j+1)); done; sleep 0.05; done`;

/** The messages of a CRI log file's complete (full, `F`) lines. */
function criMessages(text: string): string[] {
  return text
    .split('\n')
    .map((l) => l.split(' '))
    .filter((f) => f.length >= 4 && f[2] === 'F')
    .map((f) => f.slice(3).join(' '));
}

async function evictAndTime(env: NodeEnv, namespace: string, pod: string): Promise<number> {
  const at = Date.now();
  await env.core.createNamespacedPodEviction({ name: pod, namespace, body: { apiVersion: 'policy/v1', kind: 'Eviction', metadata: { name: pod, namespace } } });
  await waitFor(
    `${namespace}/${pod} to be gone`,
    async () => {
      try {
        await env.core.readNamespacedPod({ name: pod, namespace });
        return undefined;
      } catch (err) {
        if ((err as { code?: number }).code === 404) return true;
        throw err;
      }
    },
    { timeoutMs: 60_000, intervalMs: 50 },
  );
  return Date.now() - at;
}

describeRealNode('issue 25: a Job with a 1 s grace period that ignores SIGTERM, evicted on the real node', () => {
  let env: NodeEnv;
  let vl: VictoriaLogs;
  let product: ProductOnNode | undefined;
  let failed = false;
  let injectedGoneMs: number | undefined;

  beforeAll(async () => {
    product = await startProductOnNode('jobharvest-node-evicted');
    ({ env, vl } = product);
  });
  afterAll(async () => {
    await product?.stop(failed);
  });

  it('keeps the grace period, the pod is gone within about 2 s, every line written arrives from the sidecar, and the delivery record counts them', async () => {
    try {
      const namespace = await createNamespace(env.core, 'evicted', {
        'jobharvest.io/inject': 'enabled',
        'jobharvest.io/mode': 'node',
        'jobharvest.io/sink': 'loki',
        'jobharvest.io/endpoint': `http://${product!.sinkHost}/insert/loki/api/v1/push`,
        'jobharvest.io/ttl-seconds-after-finished': '600',
      });
      const stored = await env.batch.createNamespacedJob({
        namespace,
        body: {
          metadata: { name: 'evicted' },
          spec: { backoffLimit: 0, template: { spec: { restartPolicy: 'Never', terminationGracePeriodSeconds: 1, containers: [{ name: 'main', image: IMAGE, command: ['sh', '-c', script] }] } } },
        },
      });
      expect(stored.spec?.template.spec?.initContainers?.[0]?.name, 'the webhook injected the sidecar').toBe(NAMES.container);
      expect(stored.spec?.template.spec?.terminationGracePeriodSeconds, 'the Job\'s own grace period is kept').toBe(1);
      const pod = await jobPod(env, namespace, 'evicted');
      await waitForPodPhase(env.core, namespace, pod.name, ['Running']);
      const podDir = join(env.node.podLogsDir, `${namespace}_${pod.name}_${pod.uid}`);
      const filter = `${exact('namespace', namespace)} ${exact('pod', pod.name)} ${exact('container', 'main')}`;
      await waitFor('lines at the log server', async () => ((await vl.count(filter)) >= 2000 ? true : undefined), { timeoutMs: 60_000, intervalMs: 250 });

      // Copies of the main container's and the sidecar's files, refreshed until the kubelet removes them.
      const copies = copyPodLogs(podDir, ['main', NAMES.container]);

      const evictedAt = Date.now();
      await env.core.createNamespacedPodEviction({ name: pod.name, namespace, body: { apiVersion: 'policy/v1', kind: 'Eviction', metadata: { name: pod.name, namespace } } });
      let goneMs: number;
      try {
        await waitFor(
          'the evicted pod to be gone',
          async () => {
            try {
              await env.core.readNamespacedPod({ name: pod.name, namespace });
              return undefined;
            } catch (err) {
              if ((err as { code?: number }).code === 404) return true;
              throw err;
            }
          },
          { timeoutMs: 60_000, intervalMs: 50 },
        );
        goneMs = Date.now() - evictedAt;
        injectedGoneMs = goneMs;
        await new Promise((r) => setTimeout(r, 200));
      } finally {
        await copies.stop();
      }

      const written = criMessages(copies.latest('main')).filter((m) => /^evicted line \d+$/.test(m)).length;
      const last = Number(/evicted line (\d+)\s*$/.exec(criMessages(copies.latest('main')).filter((m) => m.startsWith('evicted line ')).at(-1) ?? '')?.[1]);
      const finished = await jobFinished(env, namespace, 'evicted');
      const record = await waitFor(
        'the delivery record on the Job',
        async () => (await env.batch.readNamespacedJob({ name: 'evicted', namespace })).metadata?.annotations?.[DELIVERY_ANNOTATION],
        { timeoutMs: 120_000, intervalMs: 250 },
      );
      const delivery = JSON.parse(record) as { shipped: number; harvested?: number; lost: number; unaccounted: number; pods: number; sig?: string; notes?: string[] };
      await vl.flush();
      const got = await vl.countWithDistinct(filter, '_msg');
      const summary = summaryIn(criMessages(copies.latest(NAMES.container)).join('\n'));
      console.log(
        `issue 25 (evicted, grace 1 s, SIGTERM ignored): pod gone ${goneMs} ms after the eviction; ${written} lines written (last ${last}); ` +
          `received ${got.total} (${got.distinct} distinct) from the sidecar; not received ${written - got.total}; harvested ${delivery.harvested ?? 0}; Job ${finished.type}\n` +
          `delivery record: ${record}\nsidecar summary: ${JSON.stringify(summary)}`,
      );
      expect(goneMs, 'the pod is gone within about 2 s, the grace period it chose').toBeLessThan(4000);
      expect(written, 'every line in the node\'s file, numbered from 1').toBe(last);
      expect(got.distinct, 'each line arrived once').toBe(got.total);
      // Every line, those written between the sidecar's SIGTERM and the main
      // container's SIGKILL too: the drain follows the files until they go quiet.
      expect(got.total, 'every line written arrived').toBe(written);
      expect({ outcome: summary?.outcome, lines_shipped: summary?.lines_shipped }).toEqual({ outcome: 'complete', lines_shipped: written });
      // The pod went before its Job finished; the harvester's pod watch kept its sidecar's report: every line counted, by the sidecar.
      expect(delivery).toMatchObject({ pods: 1, shipped: written, lost: 0, unaccounted: 0 });
      expect(delivery.harvested ?? 0, 'all of them from the sidecar').toBe(0);
      expect(delivery.sig).toEqual(expect.stringMatching(/^v2\.[A-Za-z0-9_-]{8}\./));
    } catch (err) {
      failed = true;
      throw err;
    }
  });

  it('without jobharvest the same Job\'s pod is gone about as fast: the sidecar adds at most a second or two', async () => {
    expect(injectedGoneMs, 'the evicted Job above ran').toBeDefined();
    try {
      const namespace = await createNamespace(env.core, 'evicted-plain');
      const stored = await env.batch.createNamespacedJob({
        namespace,
        body: {
          metadata: { name: 'evicted' },
          spec: { backoffLimit: 0, template: { spec: { restartPolicy: 'Never', terminationGracePeriodSeconds: 1, containers: [{ name: 'main', image: IMAGE, command: ['sh', '-c', script] }] } } },
        },
      });
      expect(stored.spec?.template.spec?.initContainers, 'not injected: the namespace did not opt in').toBeUndefined();
      const pod = await jobPod(env, namespace, 'evicted');
      await waitForPodPhase(env.core, namespace, pod.name, ['Running']);
      await new Promise((r) => setTimeout(r, 2000));
      const plainMs = await evictAndTime(env, namespace, pod.name);
      console.log(`issue 25: evicted pod gone after ${injectedGoneMs} ms with jobharvest, ${plainMs} ms without`);
      expect(plainMs).toBeLessThan(4000);
      expect(injectedGoneMs! - plainMs).toBeLessThan(2000);
    } catch (err) {
      failed = true;
      throw err;
    }
  });
});
