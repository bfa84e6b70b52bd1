/**
 * The harvester's scenario 7 on the real node: the node is lost mid-Job.
 * The kubelet, containerd, the shims and the containers are SIGKILLed at once,
 * as a power cut would; then the Node is deleted, as a cloud provider's node
 * controller (or an operator) does once the machine is gone for good, and the
 * pod GC takes the pod.
 *
 * The node's container log file survives on disk: it is what was written.
 * Every line the server holds must be whole and there once; the lines lost
 * are counted with the time they span (with the default 1 s batch wait, about
 * a second). Once the pod is gone, the Job's delivery record names it
 * `unaccounted: node lost`. Everything runs at the chart's defaults (batch
 * wait, maximum hold); only the control plane's node timings are shortened,
 * so that the test waits 20 s rather than 50 s for the node to be declared lost.
 */
import { gunzipSync } from 'node:zlib';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { NAMES } from '../../src/contract/env.ts';
import { DELIVERY_ANNOTATION } from '../../src/contract/harvest.ts';
import { BUSYBOX_IMAGE } from '../harness/node/images.ts';
import { exact, type VictoriaLogs } from '../harness/servers/victorialogs.ts';
import { waitFor } from '../support/wait.ts';
import { jobPod } from './scenario-support.ts';
import { createNamespace, startProductOnNode, waitForPodPhase, type NodeEnv, type ProductOnNode } from '../support/node-env.ts';
import { describeRealNode } from './support.ts';

const IMAGE = BUSYBOX_IMAGE.replace('docker.io/library/', '');
const PREFIX = 'node-loss line ';
// 100 numbered lines every 0.1 s, until the node dies under it.
const script = `i=0; while true; do j=0; while [ $j -lt 100 ]; do i=$((i+1)); echo "${PREFIX}$i"; j=$((j+1)); done; sleep 0.1; done`;

interface Written {
  readonly message: string;
  readonly ts: string;
}

/** The complete lines of every file of a container's log folder (rotated and compressed ones too), in the order written. */
function writtenLines(dir: string): Written[] {
  const files = readdirSync(dir)
    .map((name) => ({ name, text: name.endsWith('.gz') ? gunzipSync(readFileSync(join(dir, name))).toString('utf8') : readFileSync(join(dir, name), 'utf8') }))
    // The live file is 0.log; rotated ones carry their time in the name, so they sort first.
    .sort((a, b) => (a.name === '0.log' ? 1 : b.name === '0.log' ? -1 : a.name.localeCompare(b.name)));
  const out: Written[] = [];
  for (const f of files) {
    for (const line of f.text.split('\n')) {
      if (line === '') continue;
      const [ts, , tag, ...rest] = line.split(' ');
      // A partial (P) line cut by the kill is not a whole line the container wrote.
      if (tag !== 'F') continue;
      out.push({ message: rest.join(' '), ts: ts! });
    }
  }
  return out;
}

describeRealNode('harvester scenario 7: the node lost mid-Job, on the real node', () => {
  let env: NodeEnv;
  let vl: VictoriaLogs;
  let product: ProductOnNode | undefined;
  let failed = false;

  beforeAll(async () => {
    product = await startProductOnNode('jobharvest-node-loss', [], {
      controllers: ['pod-garbage-collector-controller'],
      controllerManagerFlags: ['--node-monitor-period=2s', '--node-monitor-grace-period=20s'],
    });
    ({ env, vl } = product);
  });
  afterAll(async () => {
    await product?.stop(failed);
  });

  it('what the server holds is whole and once; the loss is about a batch wait of lines; the record says node lost', async () => {
    try {
      const namespace = await createNamespace(env.core, 'node-loss', {
        'jobharvest.io/inject': 'enabled',
        'jobharvest.io/mode': 'node',
        'jobharvest.io/sink': 'loki',
        'jobharvest.io/endpoint': `http://${product!.sinkHost}/insert/loki/api/v1/push`,
      });
      const stored = await env.batch.createNamespacedJob({
        namespace,
        body: {
          metadata: { name: 'lost' },
          spec: { backoffLimit: 0, template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: IMAGE, command: ['sh', '-c', script] }] } } },
        },
      });
      expect(stored.spec?.template.spec?.initContainers?.[0]?.name, 'the webhook injected the sidecar').toBe(NAMES.container);
      const pod = await jobPod(env, namespace, 'lost');
      await waitForPodPhase(env.core, namespace, pod.name, ['Running']);
      const filter = `${exact('namespace', namespace)} ${exact('pod', pod.name)} ${exact('container', 'main')}`;
      await waitFor('lines at the log server', async () => ((await vl.count(filter)) >= 3000 ? true : undefined), { timeoutMs: 60_000, intervalMs: 250 });

      const crashedAt = Date.now();
      env.node.crash();
      const written = writtenLines(join(env.node.podLogsDir, `${namespace}_${pod.name}_${pod.uid}`, 'main'));
      // The crash follows the 3000th line at the server; the writer may not have gone past it yet.
      expect(written.length, 'the node wrote every line the server holds, and maybe more').toBeGreaterThanOrEqual(3000);
      expect(
        written.every((w, i) => w.message === `${PREFIX}${i + 1}`),
        'the node file holds the lines in order, none missing',
      ).toBe(true);

      // The node controller declares it lost; the Node object goes, as the
      // machine is gone; the pod GC then fails and deletes its pod.
      await waitFor(
        'the Node to be NotReady',
        async () => {
          const n = await env.core.readNode({ name: env.node.name });
          return n.status?.conditions?.some((c) => c.type === 'Ready' && c.status !== 'True') ? true : undefined;
        },
        { timeoutMs: 90_000, intervalMs: 500 },
      );
      await waitFor(
        "the node controller's NodeNotReady Event on the pod",
        async () => {
          const events = await env.core.listNamespacedEvent({ namespace, fieldSelector: `involvedObject.name=${pod.name},reason=NodeNotReady` });
          return events.items.length > 0 ? true : undefined;
        },
        { timeoutMs: 60_000, intervalMs: 500 },
      );
      await env.core.deleteNode({ name: env.node.name });
      const record = await waitFor(
        'the delivery record on the Job',
        async () => (await env.batch.readNamespacedJob({ name: 'lost', namespace })).metadata?.annotations?.[DELIVERY_ANNOTATION],
        { timeoutMs: 180_000, intervalMs: 500 },
      );
      const podGone = await env.core.readNamespacedPod({ name: pod.name, namespace }).then(
        () => false,
        (err: { code?: number }) => err.code === 404,
      );

      // What the server holds: whole lines the container wrote, each once.
      const rows = await vl.query(`${filter} | fields _msg`);
      const received = rows.map((r) => r._msg!);
      const counts = new Map<string, number>();
      for (const m of received) counts.set(m, (counts.get(m) ?? 0) + 1);
      const writtenSet = new Set(written.map((w) => w.message));
      const foreign = received.filter((m) => !writtenSet.has(m));
      const twice = [...counts].filter(([, n]) => n > 1);
      const lost = written.filter((w) => !counts.has(w.message));
      const spanMs = lost.length === 0 ? 0 : Date.parse(written.at(-1)!.ts) - Date.parse(lost[0]!.ts);
      const tailMs = Date.parse(written.at(-1)!.ts) - Date.parse(written[0]!.ts);
      const delivery = JSON.parse(record) as { pods: number; shipped: number; unaccounted: number; notes?: string[]; sig?: string };
      console.log(
        `harvester scenario 7 (node lost): written ${written.length} (over ${tailMs} ms), received ${received.length}, duplicated ${twice.length}, ` +
          `lost ${lost.length} spanning ${spanMs} ms before the crash; record ${(Date.now() - crashedAt) / 1000} s after the crash, pod gone: ${podGone}\n` +
          `delivery record: ${record}`,
      );
      expect(foreign, 'every line at the server is a whole line the container wrote').toEqual([]);
      expect(twice, 'no line twice').toEqual([]);
      // Lost lines are the newest only: the batches in flight or waiting when the node died.
      expect(lost.every((w) => Date.parse(w.ts) >= Date.parse(written.at(-1)!.ts) - 5_000), 'only the last seconds are lost').toBe(true);
      expect(spanMs, 'about a batch wait of lines, not more than a few seconds').toBeLessThan(5_000);
      expect(podGone, 'the pod GC took the pod').toBe(true);
      expect(delivery).toMatchObject({ pods: 1, unaccounted: 1, notes: [`${pod.name}: unaccounted: node lost`] });
      expect(delivery.sig).toMatch(/^v2\.[A-Za-z0-9_-]{8}\./);
    } catch (err) {
      failed = true;
      throw err;
    }
  });
});
