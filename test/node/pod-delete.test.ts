/**
 * Scenario 7 on the real node: the pod of a running node-mode Job is deleted
 * through the API with its grace period. The kubelet sends SIGTERM to the
 * main container (which stops writing and exits, as a well-behaved one
 * does), then to the native sidecar, which drains; every line the main
 * container wrote must be at the log server before the grace period ends.
 *
 * What was written is read from the kubelet's own log file on the node, not
 * from the log server: the test keeps the last copy it read until the
 * kubelet removes the pod's folder.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { NAMES } from '../../src/contract/env.ts';
import { BUSYBOX_IMAGE } from '../harness/node/images.ts';
import { exact, type VictoriaLogs } from '../harness/servers/victorialogs.ts';
import { waitFor } from '../support/wait.ts';
import { summaryIn } from '../support/summary.ts';
import { copyPodLogs, jobPod } from './scenario-support.ts';
import { createNamespace, startProductOnNode, waitForPodPhase, type NodeEnv, type ProductOnNode } from '../support/node-env.ts';
import { describeRealNode } from './support.ts';

const IMAGE = BUSYBOX_IMAGE.replace('docker.io/library/', '');
// 100 lines every 0.1 s until SIGTERM; the trap runs between two commands,
// says how many lines there were and exits 0.
const script =
  `trap 'echo "stopped after $i lines"; exit 0' TERM; i=0; ` +
  `while true; do j=0; while [ $j -lt 100 ]; do i=$((i+1)); echo "deleted line $i"; j=$((j+1)); done; sleep 0.1; done`;

/** The messages of a CRI log file's complete lines. */
function criMessages(text: string): string[] {
  return text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => l.split(' ').slice(3).join(' '));
}

describeRealNode('scenario 7: a running pod deleted through the API, on the real node', () => {
  let env: NodeEnv;
  let vl: VictoriaLogs;
  let product: ProductOnNode | undefined;
  let failed = false;

  beforeAll(async () => {
    product = await startProductOnNode('jobharvest-node-pod-delete');
    ({ env, vl } = product);
  });
  afterAll(async () => {
    await product?.stop(failed);
  });

  it('every line written before the deletion (and until the main container exits) reaches VictoriaLogs within the grace period', async () => {
    try {
      const sinkHost = await env.node.expose(vl.port);
      const namespace = await createNamespace(env.core, 'pod-delete', {
        'jobharvest.io/inject': 'enabled',
        'jobharvest.io/mode': 'node',
        'jobharvest.io/sink': 'loki',
        'jobharvest.io/endpoint': `http://${sinkHost}/insert/loki/api/v1/push`,
        'jobharvest.io/ttl-seconds-after-finished': '600',
        'jobharvest.io/drain-seconds': '10',
      });
      const stored = await env.batch.createNamespacedJob({
        namespace,
        body: {
          metadata: { name: 'deleted' },
          spec: { backoffLimit: 0, template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: IMAGE, command: ['sh', '-c', script] }] } } },
        },
      });
      expect(stored.spec?.template.spec?.initContainers?.[0]?.name, 'the webhook injected the sidecar').toBe(NAMES.container);
      const pod = await jobPod(env, namespace, 'deleted');
      const running = await waitForPodPhase(env.core, namespace, pod.name, ['Running']);
      const grace = running.spec?.terminationGracePeriodSeconds;
      expect(grace, 'the webhook set a grace period').toBeGreaterThan(0);
      const podDir = join(env.node.podLogsDir, `${namespace}_${pod.name}_${pod.uid}`);
      const filter = `${exact('namespace', namespace)} ${exact('pod', pod.name)} ${exact('container', 'main')}`;
      await waitFor('lines at the log server', async () => ((await vl.count(filter)) >= 2000 ? true : undefined), { timeoutMs: 60_000, intervalMs: 250 });

      // Copies of the main container's and the sidecar's files, refreshed until the kubelet removes them.
      const copies = copyPodLogs(podDir, ['main', NAMES.container]);

      const writtenAtDelete = criMessages(readFileSync(join(podDir, 'main', '0.log'), 'utf8')).filter((m) => m.startsWith('deleted line ')).length;
      const deletedAt = Date.now();
      await env.core.deleteNamespacedPod({ name: pod.name, namespace });
      let copied;
      try {
        // Every line, the closing one included, at the log server: when?
        const lastStoredAt = await waitFor(
          'the main container\'s closing line at the log server',
          async () => ((await vl.count(`${filter} "stopped after"`)) > 0 ? Date.now() : undefined),
          { timeoutMs: (grace! + 10) * 1000, intervalMs: 100 },
        );
        await waitFor(
          'the pod to be gone',
          async () => {
            try {
              await env.core.readNamespacedPod({ name: pod.name, namespace });
              return undefined;
            } catch (err) {
              if ((err as { code?: number }).code === 404) return true;
              throw err;
            }
          },
          { timeoutMs: (grace! + 30) * 1000, intervalMs: 250 },
        );
        const podGoneAt = Date.now();
        copied = { lastStoredAt, podGoneAt };
      } finally {
        await copies.stop();
      }

      const messages = criMessages(copies.latest('main'));
      const closing = messages.find((m) => m.startsWith('stopped after '));
      const written = Number(/stopped after (\d+) lines/.exec(closing ?? '')?.[1]);
      const numbered = messages.filter((m) => m.startsWith('deleted line ')).length;
      const summary = summaryIn(criMessages(copies.latest(NAMES.container)).join('\n'));
      const got = await vl.countWithDistinct(filter, '_msg');
      const lastStoredMs = copied.lastStoredAt - deletedAt;
      console.log(
        `scenario 7 (pod deleted while running): ${writtenAtDelete} lines written at the deletion, ${written} by SIGTERM (+1 closing line); ` +
          `received ${got.total} (${got.distinct} distinct); counted lost ${String(summary?.lines_unsent)}; ` +
          `last line stored ${lastStoredMs} ms after the deletion (polled every 100 ms), pod gone after ${copied.podGoneAt - deletedAt} ms; grace period ${grace} s\n` +
          `summary: ${JSON.stringify(summary)}`,
      );
      expect(closing, 'the main container got SIGTERM and said how many lines it wrote').toBeDefined();
      expect(numbered, 'the node\'s file holds every numbered line').toBe(written);
      expect(written).toBeGreaterThanOrEqual(writtenAtDelete);
      expect(got, 'every line written, and the closing one, arrived once').toEqual({ total: written + 1, distinct: written + 1 });
      expect(lastStoredMs, 'within the grace period').toBeLessThan(grace! * 1000);
      expect({ outcome: summary?.outcome, lines_unsent: summary?.lines_unsent }).toEqual({ outcome: 'complete', lines_unsent: 0 });
      const rows = await vl.query(`${filter} | stats by (namespace, job, pod, pod_uid, container, restart_count, node) count() as n`);
      expect(rows).toEqual([{ namespace, job: 'deleted', pod: pod.name, pod_uid: pod.uid, container: 'main', restart_count: '0', node: env.node.name, n: String(written + 1) }]);
    } catch (err) {
      failed = true;
      throw err;
    }
  });
});
