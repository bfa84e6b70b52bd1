import { CoordinationV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { NAMES } from '../../src/contract/env.ts';
import { DELIVERY_ANNOTATION } from '../../src/contract/harvest.ts';
import { kubeConfigFor, numberedLines, WEBHOOK_NAMESPACE } from '../harness/kubelet/stack.ts';
import { BUSYBOX_IMAGE } from '../harness/node/images.ts';
import { exact, VictoriaLogs } from '../harness/servers/victorialogs.ts';
import { waitFor } from '../support/wait.ts';
import { createNamespace, startProductOnNode, type NodeEnv, type ProductOnNode } from '../support/node-env.ts';
import { describeRealNode } from './support.ts';

const N = 200;

describeRealNode('a Job through the real webhook, with the real image, on the real node', () => {
  let env: NodeEnv;
  let vl: VictoriaLogs;
  let product: ProductOnNode | undefined;
  let failed = false;

  beforeAll(async () => {
    product = await startProductOnNode('jobharvest-real-node');
    ({ env, vl } = product);
  });
  afterAll(async () => {
    await product?.stop(failed);
  });

  // One Job, two verdicts: what the real node does today, and what the product promises.
  let result: { namespace: string; podName: string; received: number } | undefined;

  it('node mode: the Job runs on the real node with the real image, its sidecar exits 0 and the Job completes', async () => {
    try {
      // The pod reaches the log server at the veth's root-side address.
      const sinkHost = await env.node.expose(vl.port);
      const namespace = await createNamespace(env.core, 'node-mode', {
        'jobharvest.io/inject': 'enabled',
        'jobharvest.io/mode': 'node',
        'jobharvest.io/sink': 'loki',
        'jobharvest.io/endpoint': `http://${sinkHost}/insert/loki/api/v1/push`,
        'jobharvest.io/ttl-seconds-after-finished': '600',
        'jobharvest.io/drain-seconds': '10',
      });
      await env.batch.createNamespacedJob({
        namespace,
        body: {
          metadata: { name: 'lines' },
          spec: {
            backoffLimit: 0,
            template: {
              spec: {
                restartPolicy: 'Never',
                containers: [{ name: 'main', image: BUSYBOX_IMAGE.replace('docker.io/library/', ''), command: ['sh', '-c', numberedLines('node-mode', N)] }],
              },
            },
          },
        },
      });
      const pod = await waitFor(
        'the Job pod',
        async () => (await env.core.listNamespacedPod({ namespace, labelSelector: 'batch.kubernetes.io/job-name=lines' })).items[0],
        { timeoutMs: 60_000 },
      );
      const podName = pod.metadata!.name!;
      const finished = await waitFor(
        'the Job to finish',
        async () => {
          const job = await env.batch.readNamespacedJob({ name: 'lines', namespace });
          return job.status?.conditions?.find((c) => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True');
        },
        { timeoutMs: 150_000, intervalMs: 1_000 },
      );
      const after = await env.core.readNamespacedPod({ name: podName, namespace });
      const sidecar = after.status?.initContainerStatuses?.find((s) => s.name === NAMES.container);
      const sidecarLog = await env.core.readNamespacedPodLog({ name: podName, namespace, container: NAMES.container });
      const filter = `${exact('namespace', namespace)} ${exact('container', 'main')}`;
      await vl.flush();
      result = { namespace, podName, received: await vl.count(filter) };
      // The sidecar's own account, for the report and for whoever reads a failure.
      console.log(`received ${result.received} of ${N} lines; sidecar log:\n${sidecarLog}`);
      expect({ condition: finished.type, sidecarExit: sidecar?.state?.terminated?.exitCode, restarts: sidecar?.restartCount }).toEqual({
        condition: 'Complete',
        sidecarExit: 0,
        restarts: 0,
      });
      expect(sidecarLog).toContain('"msg":"sidecar started"');
    } catch (err) {
      failed = true;
      throw err;
    }
  });

  // containerd writes 0.log as root:root 0640. Without runAsGroup: 0 in node mode
  // (src/core/inject.ts) the sidecar, 65532:65532, got EACCES on every open:
  // it shipped 0 of 200 lines, and now reports the files as unreadable and
  // exits 3, so both tests here fail without that fix.
  it('node mode: every line of the main container reaches VictoriaLogs with its metadata', async () => {
    expect(result, 'the Job above ran').toBeDefined();
    const { namespace, podName, received } = result!;
    expect(received).toBe(N);
    const rows = await vl.query(`${exact('namespace', namespace)} ${exact('container', 'main')} | stats by (namespace, job, pod, container, node) count() as n`);
    expect(rows).toEqual([{ namespace, job: 'lines', pod: podName, container: 'main', node: env.node.name, n: String(N) }]);
  });

  // The harness runs the harvester beside the webhook, with the same signing
  // key and VictoriaLogs (as the node reaches it) approved: it elects itself
  // and writes the signed delivery record on the finished Job.
  it('the harvester holds its Lease and writes a signed delivery record on the finished Job', async () => {
    expect(result, 'the Job above ran').toBeDefined();
    const { namespace } = result!;
    const coordination = kubeConfigFor(env.cluster).makeApiClient(CoordinationV1Api);
    const lease = await waitFor(
      `the Lease ${product!.harvesterLease} held`,
      async () => {
        const l = await coordination.readNamespacedLease({ name: product!.harvesterLease, namespace: WEBHOOK_NAMESPACE }).catch(() => undefined);
        return l?.spec?.holderIdentity ? l : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 250 },
    );
    expect(lease.spec?.holderIdentity).toMatch(new RegExp(`^${product!.harvesterLease.replace(/-harvester$/, '')}-`));
    const record = await waitFor(
      'the delivery record on the Job',
      async () => (await env.batch.readNamespacedJob({ name: 'lines', namespace })).metadata?.annotations?.[DELIVERY_ANNOTATION],
      { timeoutMs: 30_000, intervalMs: 250 },
    );
    const delivery = JSON.parse(record) as Record<string, unknown>;
    console.log(`harvester Lease held by ${lease.spec?.holderIdentity}; delivery record: ${record}`);
    expect(delivery).toMatchObject({ sink: 'loki', pods: 1, shipped: N, lost: 0, unaccounted: 0 });
    expect(delivery.sig).toEqual(expect.stringMatching(/^v2\.[A-Za-z0-9_-]{8}\./));
    expect(product!.harvester?.exited(), 'the harvester is still running').toBe(false);
  });
});
