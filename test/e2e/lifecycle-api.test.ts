/**
 * Whole Job lifecycles in api mode: the sidecar reads its pod's logs through
 * the API server's pods/log, which the API server fetches from the test
 * kubelet's container-log endpoint over TLS. Same guarantee as node mode.
 */
import type { V1Job } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useCluster } from '../harness/cluster/client.ts';
import { followJob } from '../harness/kubelet/follow-job.ts';
import { numberedLines, shellJob, Stack } from '../harness/kubelet/stack.ts';
import { exact } from '../harness/servers/victorialogs.ts';

const cluster = useCluster();
let stack: Stack;
const TTL = 3;
const tally: string[] = [];

beforeAll(async () => {
  stack = await Stack.start({ info: cluster.info, name: 'lca', kubelet: { restartBackoffMs: 300 } });
}, 240_000);

afterAll(async () => {
  console.log('lifecycle (api mode): written / received / duplicated / unsent');
  for (const r of tally) console.log(`  ${r}`);
  await stack?.stop();
}, 120_000);

async function guarantee(ns: string, name: string, job: V1Job, n: number): Promise<V1Job> {
  const stored = await stack.batch.createNamespacedJob({ namespace: ns, body: job });
  expect(stored.spec?.template.spec?.initContainers?.[0]?.name).toBe('jobharvest');
  const filter = stack.filter(ns);
  const life = await followJob(stack, ns, name, { expected: n, filter });
  const [w] = stack.jobWorkers(ns, name);
  const got = await stack.vl.countWithDistinct(filter, '_msg');
  const summary = stack.sidecarSummary(w!.uid);
  tally.push(`${ns.replace(/-[0-9a-f]+$/, '')}: ${n} / ${got.total} / ${got.total - got.distinct} / ${summary?.lines_unsent ?? 'no summary'}`);
  expect(life.violations).toEqual([]);
  expect(life.completeAt).toBeDefined();
  expect(life.jobGoneAt! - life.completeAt!).toBeGreaterThanOrEqual(TTL * 1000);
  expect(life.podsGoneAt! - life.completeAt!).toBeGreaterThanOrEqual(TTL * 1000);
  expect(life.jobLastSeen! - life.completeAt!).toBeGreaterThanOrEqual((TTL - 1) * 1000);
  expect(life.podsLastSeen! - life.completeAt!).toBeGreaterThanOrEqual((TTL - 1) * 1000);
  expect(got).toEqual({ total: n, distinct: n });
  expect(summary?.lines_unsent).toBe(0);
  const rows = await stack.vl.query(`${filter} | stats by (namespace, job, pod, pod_uid, container, restart_count, node) count() as n`);
  expect(rows).toEqual([{ namespace: ns, job: name, pod: w!.name, pod_uid: w!.uid, container: 'main', restart_count: '0', node: stack.kubelet.nodeName, n: String(n) }]);
  expect(await stack.vl.count(`${filter} ${exact('_msg', `${name} line ${n}`)}`)).toBe(1);
  const ev = stack.kubelet.events.filter((e) => e.uid === w!.uid);
  const sidecarExit = ev.findIndex((e) => e.type === 'exit' && e.container === 'jobharvest');
  expect(sidecarExit).toBeGreaterThanOrEqual(0);
  expect(ev.findIndex((e) => e.type === 'phase' && e.phase === 'Succeeded')).toBeGreaterThan(sidecarExit);
  // The lines came through pods/log: the API server streamed them from the kubelet.
  const streams = stack.kubelet.logRequests.filter((r) => r.namespace === ns && r.pod === w!.name && r.container === 'main' && r.status === 200);
  expect(streams.length, 'containerLogs requests for main').toBeGreaterThan(0);
  expect(streams[0]!.query).toMatchObject({ follow: 'true', timestamps: 'true' });
  return stored;
}

describe('Job lifecycle in api mode', () => {
  it('1. the guarantee in api mode: every line arrives once through pods/log; Complete after the sidecar; deleted after the TTL', async () => {
    const N = 2000;
    const ns = await stack.namespace('api', { mode: 'api' });
    const stored = await guarantee(ns, 'happy-api', shellJob('happy-api', { script: `sleep 1; ${numberedLines('happy-api', N)}` }), N);
    expect(JSON.parse(stored.metadata!.annotations!['jobharvest.io/status']!).mode).toBe('api');
  });

  it('6. a namespace enforcing the restricted Pod Security level: mode auto picks api and the Job ships everything', async () => {
    const N = 1000;
    const ns = await stack.namespace('restricted', { psa: 'restricted' });
    const stored = await guarantee(ns, 'restricted', shellJob('restricted', { script: `sleep 1; ${numberedLines('restricted', N)}`, restricted: true }), N);
    expect(JSON.parse(stored.metadata!.annotations!['jobharvest.io/status']!).mode).toBe('api');
    // Admitted by Pod Security: no hostPath anywhere.
    expect(stored.spec?.template.spec?.volumes?.some((v) => v.hostPath)).toBe(false);
  });
});
