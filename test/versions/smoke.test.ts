/**
 * The version matrix's smoke test (`npm run test:versions` runs it once per
 * Kubernetes minor, selecting the release with JOBHARVEST_KUBERNETES_BIN; see
 * test/harness/versions/README.md). One Job on the real node, through the
 * real webhook and harvester: injected, every line shipped, the harvester's
 * signed record, and the TTL deleting Job and pod only after all of it.
 * Pod-level resources are part of the Job on the releases that have them on
 * by default.
 */
import { CoordinationV1Api, VersionApi, type V1Pod } from '@kubernetes/client-node';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { NAMES } from '../../src/contract/env.ts';
import { DELIVERY_ANNOTATION, STATUS_ANNOTATION } from '../../src/contract/harvest.ts';
import { locateBinaries } from '../harness/cluster/binaries.ts';
import { kubeConfigFor, numberedLines, WEBHOOK_NAMESPACE } from '../harness/kubelet/stack.ts';
import { BUSYBOX_IMAGE } from '../harness/node/images.ts';
import { exact, type VictoriaLogs } from '../harness/servers/victorialogs.ts';
import { podLevelResourcesByDefault, POD_LEVEL_RESOURCES_SINCE } from '../harness/versions/features.ts';
import { createNamespace, startProductOnNode, unavailable, type NodeEnv, type ProductOnNode } from '../support/node-env.ts';
import { get } from '../support/webhook-process.ts';
import { waitFor } from '../support/wait.ts';
import { describeRealNode } from '../support/real-node.ts';

const N = 300;
// Long enough for the harvester's record to land on the Job before the TTL
// takes it; short enough to watch the deletion.
const TTL = 20;
const IMAGE = BUSYBOX_IMAGE.replace('docker.io/library/', '');

/** The release this run tests (the matrix's selection, or the default pins). */
const release = unavailable === undefined ? locateBinaries().versions : undefined;
const minor = Number(/^v1\.(\d+)\./.exec(release?.kubernetes ?? '')?.[1] ?? Number.NaN);
const podLevel = podLevelResourcesByDefault(minor);
const POD_RESOURCES = { requests: { cpu: '250m', memory: '128Mi' }, limits: { cpu: '500m', memory: '256Mi' } };

describeRealNode(`Kubernetes ${release?.kubernetes ?? '(not built)'} with etcd ${release?.etcd ?? '?'}: a Job through the webhook on a real node`, () => {
  let env: NodeEnv;
  let vl: VictoriaLogs;
  let product: ProductOnNode | undefined;
  let failed = false;
  let ran: { namespace: string; pod: V1Pod; status: Record<string, unknown> } | undefined;

  beforeAll(async () => {
    if (!podLevel) console.log(`pod-level resources: skipped on ${release?.kubernetes}: the PodLevelResources gate is alpha and off by default before 1.${POD_LEVEL_RESOURCES_SINCE}`);
    product = await startProductOnNode('jobharvest-versions');
    ({ env, vl } = product);
  });
  afterAll(async () => {
    await product?.stop(failed);
  });
  const track = (body: () => Promise<void>) => async () => {
    try {
      await body();
    } catch (err) {
      failed = true;
      throw err;
    }
  };

  it(
    'the control plane and the node run the release under test, and the webhook reports it supported',
    track(async () => {
      const version = await kubeConfigFor(env.cluster).makeApiClient(VersionApi).getCode();
      const node = await env.core.readNode({ name: env.node.name });
      expect({ apiserver: version.gitVersion, kubelet: node.status?.nodeInfo?.kubeletVersion }).toEqual({ apiserver: release!.kubernetes, kubelet: release!.kubernetes });
      const metrics = (await get(product!.webhook.port, '/metrics')).body;
      expect(metrics).toContain(`jobharvest_webhook_kubernetes_supported{version="${release!.kubernetes}"} 1`);
    }),
  );

  it(
    `one Job${podLevel ? ' with pod-level resources' : ''}: injected, every line at the log server when it is Complete, the harvester's signed record, then the TTL deletes Job and pod`,
    track(async () => {
      const sinkHost = await env.node.expose(vl.port);
      const namespace = await createNamespace(env.core, 'versions', {
        'jobharvest.io/inject': 'enabled',
        'jobharvest.io/mode': 'node',
        'jobharvest.io/sink': 'loki',
        'jobharvest.io/endpoint': `http://${sinkHost}/insert/loki/api/v1/push`,
        'jobharvest.io/ttl-seconds-after-finished': String(TTL),
        'jobharvest.io/drain-seconds': '10',
      });
      const stored = await env.batch.createNamespacedJob({
        namespace,
        body: {
          metadata: { name: 'lines' },
          spec: {
            backoffLimit: 0,
            template: {
              spec: {
                restartPolicy: 'Never',
                ...(podLevel ? { resources: POD_RESOURCES } : {}),
                containers: [
                  {
                    name: 'main',
                    image: IMAGE,
                    command: ['sh', '-c', numberedLines('versions', N)],
                    ...(podLevel ? { resources: { requests: { cpu: '100m', memory: '64Mi' } } } : {}),
                  },
                ],
              },
            },
          },
        },
      });
      expect(stored.spec?.template.spec?.initContainers?.[0]?.name, 'the webhook injected the sidecar').toBe(NAMES.container);
      expect(stored.spec?.ttlSecondsAfterFinished, 'the webhook set the TTL').toBe(TTL);
      const status = JSON.parse(stored.metadata?.annotations?.[STATUS_ANNOTATION] ?? '{}') as Record<string, unknown>;

      const podName = (
        await waitFor('the Job pod', async () => (await env.core.listNamespacedPod({ namespace, labelSelector: 'batch.kubernetes.io/job-name=lines' })).items[0], {
          timeoutMs: 60_000,
        })
      ).metadata!.name!;
      const cond = await waitFor(
        'the Job to finish',
        async () => (await env.batch.readNamespacedJob({ name: 'lines', namespace })).status?.conditions?.find((c) => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True'),
        { timeoutMs: 150_000, intervalMs: 250 },
      );
      const filter = `${exact('namespace', namespace)} ${exact('container', 'main')}`;
      // Counted as soon as Complete is seen, before any deletion can happen:
      // what the server holds now is what the TTL leaves behind.
      await vl.flush();
      const atComplete = await vl.countWithDistinct(filter, '_msg');
      const pod = await env.core.readNamespacedPod({ name: podName, namespace });
      ran = { namespace, pod, status };
      const sidecar = pod.status?.initContainerStatuses?.find((s) => s.name === NAMES.container);
      expect({ condition: cond.type, sidecarExit: sidecar?.state?.terminated?.exitCode, restarts: sidecar?.restartCount }).toEqual({
        condition: 'Complete',
        sidecarExit: 0,
        restarts: 0,
      });
      expect(atComplete, 'every line was at the log server when the Job was Complete').toEqual({ total: N, distinct: N });
      const rows = await vl.query(`${filter} | stats by (namespace, job, pod, container, node) count() as n`);
      expect(rows).toEqual([{ namespace, job: 'lines', pod: podName, container: 'main', node: env.node.name, n: String(N) }]);

      const coordination = kubeConfigFor(env.cluster).makeApiClient(CoordinationV1Api);
      const lease = await coordination.readNamespacedLease({ name: product!.harvesterLease, namespace: WEBHOOK_NAMESPACE });
      expect(lease.spec?.holderIdentity, 'the harvester holds its Lease').toBeTruthy();
      const record = await waitFor(
        'the delivery record on the Job',
        async () => (await env.batch.readNamespacedJob({ name: 'lines', namespace })).metadata?.annotations?.[DELIVERY_ANNOTATION],
        { timeoutMs: TTL * 1000, intervalMs: 250 },
      );
      expect(JSON.parse(record)).toMatchObject({ sink: 'loki', pods: 1, shipped: N, lost: 0, unaccounted: 0, sig: expect.stringMatching(/^v2\.[A-Za-z0-9_-]{8}\./) });

      let jobGoneAt: number | undefined;
      let podGoneAt: number | undefined;
      await waitFor(
        'the TTL to delete the Job and its pod',
        async () => {
          const now = Date.now();
          if (jobGoneAt === undefined) {
            await env.batch.readNamespacedJob({ name: 'lines', namespace }).catch((err: { code?: number }) => {
              if (err.code !== 404) throw err;
              jobGoneAt = now;
            });
          }
          if (podGoneAt === undefined && (await env.core.listNamespacedPod({ namespace, labelSelector: 'batch.kubernetes.io/job-name=lines' })).items.length === 0) podGoneAt = now;
          return jobGoneAt !== undefined && podGoneAt !== undefined ? true : undefined;
        },
        { timeoutMs: (TTL + 60) * 1000, intervalMs: 250 },
      );
      // The TTL clock starts at the condition's lastTransitionTime (whole seconds).
      const completeAt = new Date(cond.lastTransitionTime!).getTime();
      console.log(`${release!.kubernetes}: ${N} lines shipped; Job gone ${jobGoneAt! - completeAt} ms and pod gone ${podGoneAt! - completeAt} ms after Complete (TTL ${TTL} s)`);
      expect(jobGoneAt! - completeAt, 'Job deleted only after the TTL').toBeGreaterThanOrEqual(TTL * 1000);
      expect(podGoneAt! - completeAt, 'pod deleted only after the TTL').toBeGreaterThanOrEqual(TTL * 1000);
      expect(await vl.countWithDistinct(filter, '_msg'), 'nothing arrived twice or late').toEqual({ total: N, distinct: N });
    }),
  );

  it.skipIf(!podLevel)(
    podLevel
      ? 'pod-level resources: the pod kept its budget, the sidecar was sized within it, and it ran'
      : `pod-level resources: skipped, PodLevelResources is alpha and off by default before 1.${POD_LEVEL_RESOURCES_SINCE}`,
    track(async () => {
      expect(ran, 'the Job above ran').toBeDefined();
      const { pod, status } = ran!;
      expect(pod.spec?.resources).toEqual(POD_RESOURCES);
      expect(status.resources, 'the webhook sized the sidecar from the pod-level budget').toBe('pod-level');
      expect(pod.status?.phase).toBe('Succeeded');
    }),
  );
});
