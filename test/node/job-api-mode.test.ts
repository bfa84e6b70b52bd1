import { RbacAuthorizationV1Api } from '@kubernetes/client-node';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { NAMES } from '../../src/contract/env.ts';
import { kubeConfigFor, numberedLines } from '../harness/kubelet/stack.ts';
import { BUSYBOX_IMAGE } from '../harness/node/images.ts';
import { exact, VictoriaLogs } from '../harness/servers/victorialogs.ts';
import { waitFor } from '../support/wait.ts';
import { createNamespace, startProductOnNode, type NodeEnv, type ProductOnNode } from '../support/node-env.ts';
import { describeRealNode } from './support.ts';

const N = 200;
const FAST = 30_000;

describeRealNode('an api-mode Job under Pod Security `restricted`, through the real webhook and image, on the real node', () => {
  let env: NodeEnv;
  let vl: VictoriaLogs;
  let product: ProductOnNode | undefined;
  let failed = false;
  let rbac: RbacAuthorizationV1Api;

  beforeAll(async () => {
    product = await startProductOnNode('jobharvest-real-node-api');
    ({ env, vl } = product);
    rbac = kubeConfigFor(env.cluster).makeApiClient(RbacAuthorizationV1Api);
  });
  afterAll(async () => {
    await product?.stop(failed);
  });

  it('api mode in a `restricted` namespace: the pod is admitted, runs, and every line reaches VictoriaLogs through pods/log', async () => {
    try {
      const sinkHost = await env.node.expose(vl.port);
      const namespace = await createNamespace(
        env.core,
        'api-mode',
        {
          'jobharvest.io/inject': 'enabled',
          'jobharvest.io/mode': 'api',
          'jobharvest.io/sink': 'loki',
          'jobharvest.io/endpoint': `http://${sinkHost}/insert/loki/api/v1/push`,
          'jobharvest.io/ttl-seconds-after-finished': '600',
          'jobharvest.io/drain-seconds': '10',
        },
        { 'pod-security.kubernetes.io/enforce': 'restricted' },
      );
      // Pod Security is enforced, not merely labelled: a pod without the
      // restricted securityContext is refused.
      const refused = await env.core
        .createNamespacedPod({ namespace, body: { metadata: { name: 'unrestricted' }, spec: { containers: [{ name: 'c', image: 'busybox:jobharvest-test' }] } } })
        .then(() => 'admitted', (err: { code?: number; body?: string }) => `${err.code}: ${err.body ?? ''}`);
      expect(refused).toMatch(/^403: .*violates PodSecurity \\"restricted:latest\\"/);
      // The webhook binds the log reader when it sees an api-mode namespace.
      await waitFor('the log-reader RoleBinding', () => rbac.readNamespacedRoleBinding({ name: 'jobharvest-log-reader', namespace }), { timeoutMs: 30_000 });
      await env.batch.createNamespacedJob({
        namespace,
        body: {
          metadata: { name: 'lines' },
          spec: {
            backoffLimit: 0,
            template: {
              spec: {
                restartPolicy: 'Never',
                containers: [
                  {
                    name: 'main',
                    image: BUSYBOX_IMAGE.replace('docker.io/library/', ''),
                    command: ['sh', '-c', numberedLines('api-mode', N)],
                    securityContext: {
                      runAsNonRoot: true,
                      runAsUser: 1000,
                      allowPrivilegeEscalation: false,
                      capabilities: { drop: ['ALL'] },
                      seccompProfile: { type: 'RuntimeDefault' },
                    },
                  },
                ],
              },
            },
          },
        },
      });
      const pod = await waitFor(
        'the Job pod (admitted by Pod Security)',
        async () => {
          const job = await env.batch.readNamespacedJob({ name: 'lines', namespace });
          const refused = job.status?.conditions?.find((c) => c.type === 'Failed' && c.status === 'True');
          if (refused) throw new Error(`the Job failed: ${refused.message}`);
          return (await env.core.listNamespacedPod({ namespace, labelSelector: 'batch.kubernetes.io/job-name=lines' })).items[0];
        },
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
      const sidecarLog = await env.core.readNamespacedPodLog({ name: podName, namespace, container: NAMES.container });
      const filter = `${exact('namespace', namespace)} ${exact('container', 'main')}`;
      await vl.flush();
      const received = await vl.count(filter);
      console.log(`received ${received} of ${N} lines; sidecar log:\n${sidecarLog}`);
      expect({ condition: finished.type, received }).toEqual({ condition: 'Complete', received: N });
      const rows = await vl.query(`${filter} | stats by (namespace, job, pod, container, node) count() as n`);
      expect(rows).toEqual([{ namespace, job: 'lines', pod: podName, container: 'main', node: env.node.name, n: String(N) }]);
    } catch (err) {
      failed = true;
      throw err;
    }
  });
  it('api mode across the kubelet\'s real rotation: a writer of 3 MB over 20 s, the stream uncut', async () => {
    try {
      const sinkHost = await env.node.expose(vl.port);
      const namespace = await createNamespace(env.core, 'api-rotation', {
        'jobharvest.io/inject': 'enabled',
        'jobharvest.io/mode': 'api',
        'jobharvest.io/sink': 'loki',
        'jobharvest.io/endpoint': `http://${sinkHost}/insert/loki/api/v1/push`,
        'jobharvest.io/ttl-seconds-after-finished': '600',
        'jobharvest.io/drain-seconds': '20',
      });
      await waitFor('the log-reader RoleBinding', () => rbac.readNamespacedRoleBinding({ name: 'jobharvest-log-reader', namespace }), { timeoutMs: 30_000 });
      // 128-byte lines at the sink, in 40 bursts of 750 with half a second
      // between them: about 3 MB over 20 s or more, so the kubelet's 10 s size
      // checks find more than 1Mi while the writer and the stream are running.
      const script = `b=1; i=1; while [ $b -le 40 ]; do j=1; while [ $j -le 750 ]; do printf 'fast line %08d %s\\n' $i xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; i=$((i+1)); j=$((j+1)); done; sleep 0.5; b=$((b+1)); done`;
      await env.batch.createNamespacedJob({
        namespace,
        body: {
          metadata: { name: 'fast' },
          spec: {
            backoffLimit: 0,
            template: {
              spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: BUSYBOX_IMAGE.replace('docker.io/library/', ''), command: ['sh', '-c', script] }] },
            },
          },
        },
      });
      const finished = await waitFor(
        'the Job to finish',
        async () => {
          const job = await env.batch.readNamespacedJob({ name: 'fast', namespace });
          return job.status?.conditions?.find((c) => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True');
        },
        { timeoutMs: 170_000, intervalMs: 1_000 },
      );
      const pod = (await env.core.listNamespacedPod({ namespace, labelSelector: 'batch.kubernetes.io/job-name=fast' })).items[0]!;
      const files = readdirSync(join(env.node.podLogsDir, `${namespace}_${pod.metadata!.name!}_${pod.metadata!.uid!}`, 'main')).sort();
      const sidecarLog = await env.core.readNamespacedPodLog({ name: pod.metadata!.name!, namespace, container: NAMES.container });
      const filter = `${exact('namespace', namespace)} ${exact('container', 'main')}`;
      await vl.flush();
      const got = await vl.countWithDistinct(filter, '_msg');
      const summary = sidecarLog.split('\n').find((l) => l.includes('"msg":"summary"'));
      console.log(`writer across rotation: ${got.total} received (${got.distinct} distinct) of ${FAST}; files ${JSON.stringify(files)}; ${summary}`);
      expect(files.length, 'the kubelet rotated the log').toBeGreaterThan(1);
      expect({ condition: finished.type, total: got.total, distinct: got.distinct }).toEqual({ condition: 'Complete', total: FAST, distinct: FAST });
    } catch (err) {
      failed = true;
      throw err;
    }
  });
});
