/**
 * Smoke test of the test cluster itself: the pinned releases answer, and the
 * controller manager drives a Job from creation through completion to its TTL
 * deletion, with a pod whose binding and status the test sets, as the
 * webhook's e2e tests will do.
 */
import type { V1Job, V1Pod } from '@kubernetes/client-node';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestNamespace, useCluster, waitFor } from '../harness/cluster/client.ts';
import { httpCall } from '../harness/cluster/http.ts';

// Read from go.mod, not from the build's versions.json, so that a build that
// stamps the wrong version fails here.
function pinned(module: string): string {
  const goMod = readFileSync(new URL('../harness/cluster/go.mod', import.meta.url), 'utf8');
  const match = new RegExp(`^\\s*${module.replaceAll('.', '\\.')} (v\\S+)`, 'm').exec(goMod);
  if (match?.[1] === undefined) throw new Error(`${module} is not pinned in test/harness/cluster/go.mod`);
  return match[1];
}

const TTL_SECONDS = 2;
const cluster = useCluster();
let namespace = '';

beforeAll(async () => {
  namespace = await createTestNamespace(cluster.core, 'cluster-smoke');
});

afterAll(async () => {
  if (namespace !== '') await cluster.core.deleteNamespace({ name: namespace });
});

describe('test cluster', () => {
  it('runs the pinned Kubernetes release', async () => {
    const expected = pinned('k8s.io/kubernetes');
    const version = await cluster.version.getCode();
    expect(version.gitVersion).toBe(expected);
    const [, major, minor] = /^v(\d+)\.(\d+)\./.exec(expected) ?? [];
    expect(version.major).toBe(major);
    expect(version.minor).toBe(minor);
  });

  it('runs the pinned etcd release', async () => {
    const res = await httpCall(`${cluster.info.etcdUrl}/version`);
    expect(res.status).toBe(200);
    const body = JSON.parse(res.body) as { etcdserver?: string };
    expect(`v${body.etcdserver}`).toBe(pinned('go.etcd.io/etcd/server/v3'));
  });

  it('creates a namespace with its default ServiceAccount', async () => {
    const ns = await cluster.core.readNamespace({ name: namespace });
    expect(ns.status?.phase).toBe('Active');
    const sa = await waitFor('default ServiceAccount', async () => {
      const list = await cluster.core.listNamespacedServiceAccount({ namespace });
      return list.items.find((s) => s.metadata?.name === 'default');
    });
    expect(sa.metadata?.namespace).toBe(namespace);
  });

  it('completes a Job with a native sidecar, then deletes it and its pod after the TTL', async () => {
    const job: V1Job = {
      metadata: { name: 'smoke' },
      spec: {
        backoffLimit: 0,
        ttlSecondsAfterFinished: TTL_SECONDS,
        template: {
          spec: {
            restartPolicy: 'Never',
            initContainers: [
              { name: 'sidecar', image: 'registry.invalid/sidecar:1', restartPolicy: 'Always' },
            ],
            containers: [{ name: 'main', image: 'registry.invalid/main:1', command: ['true'] }],
          },
        },
      },
    };
    const created = await cluster.batch.createNamespacedJob({ namespace, body: job });
    expect(created.spec?.template.spec?.initContainers?.[0]?.restartPolicy).toBe('Always');

    const pod: V1Pod = await waitFor(
      'the Job controller to create a pod',
      async () => {
        const pods = await cluster.core.listNamespacedPod({
          namespace,
          labelSelector: 'batch.kubernetes.io/job-name=smoke',
        });
        return pods.items[0];
      },
      { timeoutMs: 60_000 },
    );
    const podName = pod.metadata?.name ?? '';
    expect(pod.metadata?.ownerReferences?.[0]).toMatchObject({ kind: 'Job', name: 'smoke', controller: true });
    expect(pod.spec?.initContainers?.[0]).toMatchObject({ name: 'sidecar', restartPolicy: 'Always' });

    // No scheduler and no kubelet: play both through the binding and status subresources.
    await cluster.core.createNamespacedPodBinding({
      name: podName,
      namespace,
      body: { metadata: { name: podName }, target: { apiVersion: 'v1', kind: 'Node', name: 'smoke-node' } },
    });
    const bound = await cluster.core.readNamespacedPod({ name: podName, namespace });
    expect(bound.spec?.nodeName).toBe('smoke-node');

    const now = new Date();
    bound.status = {
      ...bound.status,
      phase: 'Succeeded',
      startTime: now,
      conditions: [{ type: 'Ready', status: 'False', reason: 'PodCompleted', lastTransitionTime: now }],
    };
    const updated = await cluster.core.replaceNamespacedPodStatus({ name: podName, namespace, body: bound });
    expect(updated.status?.phase).toBe('Succeeded');

    const complete = await waitFor(
      'the Job to complete',
      async () => {
        const current = await cluster.batch.readNamespacedJob({ name: 'smoke', namespace });
        return current.status?.conditions?.some((c) => c.type === 'Complete' && c.status === 'True')
          ? current
          : undefined;
      },
      { timeoutMs: 60_000 },
    );
    expect(complete.status?.succeeded).toBe(1);

    // The TTL controller deletes with Foreground propagation, so the Job only
    // disappears once the garbage collector has removed its pod.
    const completedAt = complete.status?.conditions?.find((c) => c.type === 'Complete')?.lastTransitionTime;
    expect(completedAt).toBeInstanceOf(Date);
    const goneAt = await waitFor(
      'the TTL controller and the garbage collector to delete the Job',
      async () => {
        try {
          await cluster.batch.readNamespacedJob({ name: 'smoke', namespace });
          return undefined;
        } catch (err) {
          if ((err as { code?: number }).code === 404) return Date.now();
          throw err;
        }
      },
      { timeoutMs: 60_000, intervalMs: 100 },
    );
    // The controller's deadline is the (whole-second) lastTransitionTime plus the TTL.
    expect(goneAt).toBeGreaterThanOrEqual((completedAt as Date).getTime() + TTL_SECONDS * 1000);
    const pods = await cluster.core.listNamespacedPod({ namespace, labelSelector: 'batch.kubernetes.io/job-name=smoke' });
    expect(pods.items).toEqual([]);
  });
});
