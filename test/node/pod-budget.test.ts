/**
 * What a real node and the real Job controller read from an injected pod,
 * each Job beside the same Job in a namespace without jobharvest:
 *
 * - podFailurePolicy: a user's onExitCodes rule without containerName is also
 *   matched against the sidecar's exit code (pkg/controller/job/
 *   pod_failure_policy.go). With rules `NotIn [0]` (FailJob) and
 *   `In [137, 143]` (Ignore), a failing main container, and the sidecar
 *   draining normally, running out of its drain budget (the log server
 *   unreachable) or cut short by the pod's deletion, the Job must end the same
 *   way with and without jobharvest, and the sidecar never ends with 137 or 143.
 * - ephemeral storage: a pod whose containers set an ephemeral-storage limit
 *   must not be evicted because of what the sidecar stores. At the defaults
 *   (the stdout sink) the sidecar's own log holds a copy of every line, so a
 *   main container writing 30 MiB of log under a 48Mi limit would have the pod
 *   pass it twice over without the sidecar's own share.
 */
import type { V1Job, V1Pod, V1PodFailurePolicyRule } from '@kubernetes/client-node';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { NAMES } from '../../src/contract/env.ts';
import { BUSYBOX_IMAGE } from '../harness/node/images.ts';
import { waitFor } from '../support/wait.ts';
import { createNamespace, startProductOnNode, type ProductOnNode } from '../support/node-env.ts';
import { describeRealNode } from './support.ts';

const IMAGE = BUSYBOX_IMAGE.replace('docker.io/library/', '');

describeRealNode('what the node and the Job controller read from an injected pod', () => {
  let product: ProductOnNode;
  let failed = false;
  const ns = { injected: '', unreachable: '', defaults: '', control: '' };
  const rows: string[] = [];

  beforeAll(async () => {
    product = await startProductOnNode('jobharvest-node-pod-budget', [], { harvesterArgs: false });
    const sink = { 'jobharvest.io/inject': 'enabled', 'jobharvest.io/mode': 'node', 'jobharvest.io/sink': 'loki', 'jobharvest.io/drain-seconds': '4' };
    ns.injected = await createNamespace(product.env.core, 'pb-in', { ...sink, 'jobharvest.io/endpoint': `http://${product.sinkHost}/insert/loki/api/v1/push` });
    // Nothing listens there: every send fails until the drain budget runs out.
    ns.unreachable = await createNamespace(product.env.core, 'pb-down', { ...sink, 'jobharvest.io/endpoint': 'http://127.0.0.1:9/loki/api/v1/push' });
    ns.defaults = await createNamespace(product.env.core, 'pb-defaults', { 'jobharvest.io/inject': 'enabled', 'jobharvest.io/mode': 'node' });
    ns.control = await createNamespace(product.env.core, 'pb-control');
  });
  afterAll(async () => {
    console.log(['job: namespace, Job condition reason, main exit, sidecar exit', ...rows].join('\n  '));
    await product?.stop(failed);
  });

  function scenario(title: string, body: () => Promise<void>, timeout = 240_000): void {
    it(
      title,
      async () => {
        try {
          await body();
        } catch (err) {
          failed = true;
          throw err;
        }
      },
      timeout,
    );
  }

  const RULES: Record<string, V1PodFailurePolicyRule[]> = {
    'not-in-0': [{ action: 'FailJob', onExitCodes: { operator: 'NotIn', values: [0] } }],
    'in-137-143': [{ action: 'Ignore', onExitCodes: { operator: 'In', values: [137, 143] } }],
  };

  function job(name: string, rules: V1PodFailurePolicyRule[], script: string, grace?: number): V1Job {
    return {
      metadata: { name },
      spec: {
        backoffLimit: 0,
        podFailurePolicy: { rules },
        template: {
          spec: {
            restartPolicy: 'Never',
            ...(grace !== undefined ? { terminationGracePeriodSeconds: grace } : {}),
            containers: [{ name: 'main', image: IMAGE, command: ['sh', '-c', script] }],
          },
        },
      },
    };
  }

  async function ended(namespace: string, name: string): Promise<{ reason: string; pod: V1Pod | undefined }> {
    const cond = await waitFor(
      `${namespace}/${name} to end`,
      async () => {
        const j = await product.env.batch.readNamespacedJob({ name, namespace });
        return j.status?.conditions?.find((c) => (c.type === 'Failed' || c.type === 'Complete') && c.status === 'True');
      },
      { timeoutMs: 180_000, intervalMs: 250 },
    );
    const pods = (await product.env.core.listNamespacedPod({ namespace, labelSelector: `batch.kubernetes.io/job-name=${name}` })).items;
    return { reason: `${cond.type}/${cond.reason}`, pod: pods[0] };
  }

  const exitOf = (pod: V1Pod | undefined, container: string) =>
    [...(pod?.status?.containerStatuses ?? []), ...(pod?.status?.initContainerStatuses ?? [])].find((s) => s.name === container)?.state?.terminated?.exitCode;

  /** Runs the Job in `where` and in the control namespace, and compares how each ended. */
  async function compare(where: string, name: string, spec: V1Job, during?: (namespace: string) => Promise<void>): Promise<void> {
    const results: Record<string, { reason: string; sidecar: number | undefined }> = {};
    for (const namespace of [where, ns.control]) {
      const stored = await product.env.batch.createNamespacedJob({ namespace, body: spec });
      expect(stored.spec?.template.spec?.initContainers?.[0]?.name === NAMES.container).toBe(namespace !== ns.control);
      await during?.(namespace);
      const { reason, pod } = await ended(namespace, name);
      const sidecar = exitOf(pod, NAMES.container);
      results[namespace] = { reason, sidecar };
      rows.push(`${name}: ${namespace === ns.control ? 'control' : namespace === ns.injected ? 'injected' : 'injected, log server down'}, ${reason}, main ${exitOf(pod, 'main')}, sidecar ${sidecar ?? '-'}`);
    }
    expect(results[where]!.reason, name).toBe(results[ns.control]!.reason);
    expect([137, 143]).not.toContain(results[where]!.sidecar);
  }

  for (const [rule, rules] of Object.entries(RULES)) {
    scenario(`${rule}: a failing main container, the sidecar draining normally`, () => compare(ns.injected, `${rule}-drain`, job(`${rule}-drain`, rules, 'echo working; exit 1')));
    scenario(`${rule}: a failing main container, the log server unreachable past the drain budget`, () => compare(ns.unreachable, `${rule}-down`, job(`${rule}-down`, rules, 'echo working; exit 1')));
    scenario(`${rule}: the pod deleted mid-run with a short grace period, the log server unreachable`, () =>
      compare(ns.unreachable, `${rule}-deleted`, job(`${rule}-deleted`, rules, 'echo working; sleep 20', 3), async (namespace) => {
        const pod = await waitFor(`a running pod of ${namespace}/${rule}-deleted`, async () => {
          const pods = (await product.env.core.listNamespacedPod({ namespace, labelSelector: `batch.kubernetes.io/job-name=${rule}-deleted` })).items;
          return pods.find((p) => p.status?.containerStatuses?.some((s) => s.name === 'main' && s.state?.running));
        });
        await product.env.core.deleteNamespacedPod({ name: pod.metadata!.name!, namespace });
      }),
    );
  }

  scenario('a pod with an ephemeral-storage limit, at the default sink, is not evicted because of the sidecar', async () => {
    // 12 MiB of log lines (~17 MiB of log file with the CRI prefixes, well inside the limit), then long
    // enough for the kubelet's eviction manager (every 10 s) to look. The sidecar's copy of them as records is larger still.
    const script = `yes "$(printf '%0100d' 0)" | head -c 12582912; sleep 25`;
    const spec = (name: string): V1Job => ({
      metadata: { name },
      spec: {
        backoffLimit: 0,
        template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: IMAGE, command: ['sh', '-c', script], resources: { limits: { 'ephemeral-storage': '48Mi' } } }] } },
      },
    });
    const stored = await product.env.batch.createNamespacedJob({ namespace: ns.defaults, body: spec('storage') });
    // The stdout sink: the state volume's 64Mi and 64Mi for the copy of every line in its own log.
    expect(stored.spec!.template.spec!.initContainers![0]!.resources?.limits?.['ephemeral-storage']).toBe('128Mi');
    await product.env.batch.createNamespacedJob({ namespace: ns.control, body: spec('storage') });
    for (const namespace of [ns.control, ns.defaults]) {
      const { reason, pod } = await ended(namespace, 'storage');
      rows.push(`storage: ${namespace === ns.control ? 'control' : 'injected, stdout sink'}, ${reason}, main ${exitOf(pod, 'main')}, sidecar ${exitOf(pod, NAMES.container) ?? '-'}, pod ${pod?.status?.reason ?? pod?.status?.phase} ${pod?.status?.message ?? ''}`);
      expect(pod?.status?.reason, namespace).not.toBe('Evicted');
      expect(reason, namespace).toBe('Complete/CompletionsReached');
    }
  });
});
