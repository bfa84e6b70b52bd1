/**
 * What Kubernetes does with a Job whose spec.managedBy names another
 * controller (a MultiKueue manager cluster's Jobs carry
 * kueue.x-k8s.io/multikueue): the Job controller leaves it alone and creates
 * no pod, yet the TTL-after-finished controller deletes it once a status
 * written by that other controller says it finished. So on such a cluster an
 * injected sidecar would never run there, while an injected TTL would still
 * delete the Job.
 */
import type { V1Job } from '@kubernetes/client-node';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestNamespace, useCluster, waitFor } from '../harness/cluster/client.ts';

const cluster = useCluster();
let ns = '';

beforeAll(async () => {
  ns = await createTestNamespace(cluster.core, 'managed-by');
});

afterAll(async () => {
  await cluster.core.deleteNamespace({ name: ns }).catch(() => undefined);
});

function job(name: string, managedBy: string | undefined): V1Job {
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: { name },
    spec: {
      ...(managedBy ? { managedBy } : {}),
      ttlSecondsAfterFinished: 1,
      template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: 'busybox', command: ['true'] }] } },
    },
  };
}

const podsOf = async (name: string) => (await cluster.core.listNamespacedPod({ namespace: ns, labelSelector: `batch.kubernetes.io/job-name=${name}` })).items;

describe('spec.managedBy', () => {
  it('the Job controller creates pods for a Job it manages (control)', async () => {
    await cluster.batch.createNamespacedJob({ namespace: ns, body: job('ours', 'kubernetes.io/job-controller') });
    await waitFor('a pod of ours', async () => ((await podsOf('ours')).length > 0 ? true : undefined), { timeoutMs: 30_000 });
  });

  it('the Job controller creates no pod for a Job managed by another controller, and the TTL controller still deletes it once its status says Complete', async () => {
    await cluster.batch.createNamespacedJob({ namespace: ns, body: job('external', 'kueue.x-k8s.io/multikueue') });
    // The control above got its pod well within this time.
    await sleep(3000);
    expect(await podsOf('external')).toEqual([]);
    const untouched = await cluster.batch.readNamespacedJob({ name: 'external', namespace: ns });
    expect(untouched.status?.conditions ?? []).toEqual([]);
    expect(untouched.status?.active ?? 0).toBe(0);

    // What MultiKueue does on the manager cluster: copy the worker's status, here a finished one.
    const now = new Date();
    const start = new Date(now.getTime() - 5000);
    await cluster.batch.replaceNamespacedJobStatus({
      name: 'external',
      namespace: ns,
      body: {
        ...untouched,
        status: {
          startTime: start,
          completionTime: now,
          succeeded: 1,
          conditions: [
            { type: 'SuccessCriteriaMet', status: 'True', lastTransitionTime: now, lastProbeTime: now },
            { type: 'Complete', status: 'True', lastTransitionTime: now, lastProbeTime: now },
          ],
        },
      },
    });
    await waitFor(
      'the TTL controller to delete the externally managed Job',
      async () => {
        try {
          await cluster.batch.readNamespacedJob({ name: 'external', namespace: ns });
          return undefined;
        } catch (err) {
          return (err as { code?: number }).code === 404 ? true : undefined;
        }
      },
      { timeoutMs: 30_000 },
    );
    expect(await podsOf('external')).toEqual([]);
  });
});
