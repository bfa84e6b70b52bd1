/**
 * Does a native sidecar's exit code take part in a Job's podFailurePolicy?
 *
 * The real Job controller (kube-controller-manager) judges pods that the test
 * kubelet ran as local processes and reported through pods/status. The
 * sidecar here is a shell loop standing in for jobharvest's: what matters is
 * only the exit code the pod status gives it. The main container fails with 1
 * in every case; backoffLimit is 0, so a pod failure that is counted fails the
 * Job with BackoffLimitExceeded, one that matched a FailJob rule fails it with
 * PodFailurePolicy, and one that matched an Ignore rule does not count at all.
 *
 * Findings (pkg/controller/job/pod_failure_policy.go, v1.37.2): an onExitCodes
 * requirement without containerName is checked against containerStatuses and
 * then initContainerStatuses (matchOnExitCodes, lines 80-85), restartable init
 * containers included; a container's exit code 0 never matches, for In or
 * NotIn (getMatchingContainerFromList, line 107).
 */
import type { V1Job, V1PodFailurePolicyRule } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestNamespace, useCluster, waitFor } from '../harness/cluster/client.ts';
import { TestKubelet } from '../harness/kubelet/kubelet.ts';

const cluster = useCluster();
let ns = '';
let kubelet: TestKubelet;

beforeAll(async () => {
  ns = await createTestNamespace(cluster.core, 'pfp');
  kubelet = await TestKubelet.start({ cluster: cluster.info, namespaces: [ns], restartBackoffMs: 200 });
}, 60_000);

afterAll(async () => {
  await kubelet?.stop();
  await cluster.core.deleteNamespace({ name: ns }).catch(() => undefined);
});

const SIDECAR = 'jobharvest';
const sh = (script: string) => ({ command: ['sh', '-c', script] });

/** A sidecar that exits `code` on SIGTERM, or ignores SIGTERM (and is SIGKILLed) when `code` is 'ignore-term'. */
function sidecarScript(code: number | 'ignore-term'): string {
  const trap = code === 'ignore-term' ? 'trap "" TERM' : `trap "exit ${code}" TERM`;
  return `${trap}; while true; do sleep 0.05; done`;
}

function job(name: string, rules: V1PodFailurePolicyRule[], sidecar: number | 'ignore-term'): V1Job {
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: { name },
    spec: {
      backoffLimit: 0,
      podFailurePolicy: { rules },
      template: {
        spec: {
          restartPolicy: 'Never',
          terminationGracePeriodSeconds: 1,
          initContainers: [{ name: SIDECAR, image: 'busybox', restartPolicy: 'Always', ...sh(sidecarScript(sidecar)) }],
          containers: [{ name: 'main', image: 'busybox', ...sh('sleep 0.3; exit 1') }],
        },
      },
    },
  };
}

async function failedCondition(name: string) {
  return waitFor(
    `Job ${name} Failed`,
    async () => {
      const j = await cluster.batch.readNamespacedJob({ name, namespace: ns });
      return j.status?.conditions?.find((c) => c.type === 'Failed' && c.status === 'True');
    },
    { timeoutMs: 60_000 },
  );
}

/** The exit codes the pods of a Job ended with, per container, as the Job controller saw them. */
async function exitCodes(name: string): Promise<Array<Record<string, number | undefined>>> {
  const pods = await cluster.core.listNamespacedPod({ namespace: ns, labelSelector: `batch.kubernetes.io/job-name=${name}` });
  return pods.items.map((p) =>
    Object.fromEntries([...(p.status?.initContainerStatuses ?? []), ...(p.status?.containerStatuses ?? [])].map((s) => [s.name, s.state?.terminated?.exitCode])),
  );
}

describe('podFailurePolicy and the native sidecar', () => {
  it('an In rule without containerName matches the sidecar exit code: the Job fails by the policy, blamed on the sidecar', async () => {
    await cluster.batch.createNamespacedJob({ namespace: ns, body: job('in-any', [{ action: 'FailJob', onExitCodes: { operator: 'In', values: [42] } }], 42) });
    const failed = await failedCondition('in-any');
    expect(await exitCodes('in-any')).toEqual([{ [SIDECAR]: 42, main: 1 }]);
    expect(failed.reason).toBe('PodFailurePolicy');
    expect(failed.message).toMatch(new RegExp(`^Container ${SIDECAR} for pod ${ns}/in-any-\\w+ failed with exit code 42 matching FailJob rule at index 0$`));
  });

  it('the same rule with containerName: main does not see the sidecar (control)', async () => {
    await cluster.batch.createNamespacedJob({
      namespace: ns,
      body: job('in-main', [{ action: 'FailJob', onExitCodes: { containerName: 'main', operator: 'In', values: [42] } }], 42),
    });
    const failed = await failedCondition('in-main');
    expect(await exitCodes('in-main')).toEqual([{ [SIDECAR]: 42, main: 1 }]);
    expect(failed.reason).toBe('BackoffLimitExceeded');
  });

  it('an Ignore rule matching 137 takes a SIGKILLed sidecar for the failure and does not count the main container failing', async () => {
    await cluster.batch.createNamespacedJob({ namespace: ns, body: job('ignore-137', [{ action: 'Ignore', onExitCodes: { operator: 'In', values: [137] } }], 'ignore-term') });
    // backoffLimit 0, yet the Job does not fail: it replaces the pod instead.
    const pods = await waitFor(
      'a second pod of ignore-137',
      async () => {
        const list = await cluster.core.listNamespacedPod({ namespace: ns, labelSelector: 'batch.kubernetes.io/job-name=ignore-137' });
        return list.items.length >= 2 ? list.items : undefined;
      },
      { timeoutMs: 60_000 },
    );
    const first = pods.find((p) => p.status?.phase === 'Failed');
    expect(first, 'a failed pod').toBeDefined();
    const side = first!.status!.initContainerStatuses!.find((s) => s.name === SIDECAR)!;
    expect(side.state?.terminated?.exitCode).toBe(137);
    expect(first!.status!.containerStatuses![0]!.state?.terminated?.exitCode).toBe(1);
    const j = await cluster.batch.readNamespacedJob({ name: 'ignore-137', namespace: ns });
    expect(j.status?.failed ?? 0).toBe(0);
    expect(j.status?.conditions?.find((c) => c.type === 'Failed')).toBeUndefined();
    await cluster.batch.deleteNamespacedJob({ name: 'ignore-137', namespace: ns, propagationPolicy: 'Background' });
  });

  it.each<[string, number, number[]]>([
    ['0 (never matched, not even by NotIn)', 0, [1]],
    ['3, one of the values of the NotIn rule', 3, [1, 3]],
  ])('a sidecar exiting %s escapes a NotIn rule without containerName', async (_what, code, values) => {
    const name = `notin-${code}`;
    await cluster.batch.createNamespacedJob({ namespace: ns, body: job(name, [{ action: 'FailJob', onExitCodes: { operator: 'NotIn', values } }], code) });
    const failed = await failedCondition(name);
    expect(await exitCodes(name)).toEqual([{ [SIDECAR]: code, main: 1 }]);
    expect(failed.reason).toBe('BackoffLimitExceeded');
  });

  it('a sidecar exiting 143 (SIGTERM not handled) is caught by a NotIn rule meant for the main container', async () => {
    // The usual "fail the Job on any unexpected code" rule; 1 is the retryable code.
    await cluster.batch.createNamespacedJob({ namespace: ns, body: job('notin-143', [{ action: 'FailJob', onExitCodes: { operator: 'NotIn', values: [1] } }], 143) });
    const failed = await failedCondition('notin-143');
    expect(failed.reason).toBe('PodFailurePolicy');
    expect(failed.message).toContain(`Container ${SIDECAR} for pod ${ns}/notin-143-`);
    expect(failed.message).toContain('failed with exit code 143 matching FailJob rule at index 0');
  });
});
