/**
 * Job lifecycles on the real node: the real webhook, the real image, containerd
 * and the real kubelet, VictoriaLogs receiving through the loki sink. Every
 * scenario counts what was written, what arrived, what arrived twice and what
 * the sidecar's summary reports as unsent.
 */
import { type V1Job, type V1JobCondition } from '@kubernetes/client-node';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { NAMES } from '../../src/contract/env.ts';
import { numberedLines } from '../harness/kubelet/stack.ts';
import { BUSYBOX_IMAGE } from '../harness/node/images.ts';
import { exact, VictoriaLogs } from '../harness/servers/victorialogs.ts';
import { summaryIn } from '../support/summary.ts';
import { waitFor } from '../support/wait.ts';
import { containerPids } from './scenario-support.ts';
import { createNamespace, startProductOnNode, type NodeEnv, type ProductOnNode } from '../support/node-env.ts';
import { describeRealNode } from './support.ts';

const IMAGE = BUSYBOX_IMAGE.replace('docker.io/library/', '');

interface Row {
  scenario: string;
  written: number;
  received: number;
  duplicated: number;
  unsent: number | string;
}

describeRealNode('Job lifecycles on the real node', () => {
  let env: NodeEnv;
  let vl: VictoriaLogs;
  let product: ProductOnNode | undefined;
  let sinkHost: string;
  let failed = false;
  const tally: Row[] = [];

  beforeAll(async () => {
    // The sidecar's own guarantee, without the harvester holding Jobs behind it:
    // with it, a lost line could be made good later and the TTL moved.
    product = await startProductOnNode('jobharvest-node-lifecycle');
    ({ env, vl } = product);
    sinkHost = await env.node.expose(vl.port);
  });
  afterAll(async () => {
    console.log('lifecycle (real node, node mode): written / received / duplicated / unsent');
    for (const r of tally) console.log(`  ${r.scenario}: ${r.written} / ${r.received} / ${r.duplicated} / ${r.unsent}`);
    await product?.stop(failed);
  });

  /** Marks the node folder to be kept when a scenario fails. */
  function scenario(title: string, body: () => Promise<void>): void {
    it(title, async () => {
      try {
        await body();
      } catch (err) {
        failed = true;
        throw err;
      }
    });
  }

  async function namespaceFor(tag: string, ttlSeconds: number): Promise<string> {
    return createNamespace(env.core, tag, {
      'jobharvest.io/inject': 'enabled',
      'jobharvest.io/mode': 'node',
      'jobharvest.io/sink': 'loki',
      'jobharvest.io/endpoint': `http://${sinkHost}/insert/loki/api/v1/push`,
      'jobharvest.io/ttl-seconds-after-finished': String(ttlSeconds),
      'jobharvest.io/drain-seconds': '10',
    });
  }

  async function create(namespace: string, job: V1Job): Promise<void> {
    const stored = await env.batch.createNamespacedJob({ namespace, body: job });
    expect(stored.spec?.template.spec?.initContainers?.[0]?.name, 'the webhook injected the sidecar').toBe(NAMES.container);
  }

  async function jobPod(namespace: string, job: string): Promise<{ name: string; uid: string }> {
    const pod = await waitFor(
      `the pod of ${namespace}/${job}`,
      async () => (await env.core.listNamespacedPod({ namespace, labelSelector: `batch.kubernetes.io/job-name=${job}` })).items[0],
      { timeoutMs: 60_000 },
    );
    return { name: pod.metadata!.name!, uid: pod.metadata!.uid! };
  }

  async function finished(namespace: string, job: string, timeoutMs = 150_000): Promise<V1JobCondition> {
    return waitFor(
      `${namespace}/${job} to finish`,
      async () => {
        const j = await env.batch.readNamespacedJob({ name: job, namespace });
        return j.status?.conditions?.find((c) => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True');
      },
      { timeoutMs, intervalMs: 250 },
    );
  }

  /** The sidecar's closing summary line, from its container log on the node. */
  async function unsentOf(namespace: string, pod: string): Promise<number | string> {
    const log = await env.core.readNamespacedPodLog({ name: pod, namespace, container: NAMES.container });
    const e = summaryIn(log);
    if (e === undefined) return 'no summary';
    return typeof e.lines_unsent === 'number' ? e.lines_unsent : 'no count';
  }

  async function received(filter: string): Promise<{ total: number; distinct: number }> {
    return vl.countWithDistinct(filter, '_msg');
  }

  scenario('4. a Job done within milliseconds: every line arrives, with its metadata', async () => {
    const N = 100;
    const ns = await namespaceFor('fast', 600);
    // One echo per line from a single shell builtin loop: the container is done
    // long before the sidecar's first read of the file.
    await create(ns, {
      metadata: { name: 'fast' },
      spec: { backoffLimit: 0, template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: IMAGE, command: ['sh', '-c', numberedLines('fast', N)] }] } } },
    });
    const pod = await jobPod(ns, 'fast');
    const cond = await finished(ns, 'fast');
    const filter = `${exact('namespace', ns)} ${exact('container', 'main')}`;
    const got = await received(filter);
    tally.push({ scenario: '4. done within milliseconds', written: N, received: got.total, duplicated: got.total - got.distinct, unsent: await unsentOf(ns, pod.name) });
    expect(cond.type).toBe('Complete');
    expect(got).toEqual({ total: N, distinct: N });
    const rows = await vl.query(`${filter} | stats by (namespace, job, pod, pod_uid, container, restart_count, node) count() as n`);
    expect(rows).toEqual([{ namespace: ns, job: 'fast', pod: pod.name, pod_uid: pod.uid, container: 'main', restart_count: '0', node: env.node.name, n: String(N) }]);
  });

  scenario('5. OnFailure: the main container fails twice, then succeeds; the lines of all three runs arrive, each with its restart count', async () => {
    const M = 50;
    const ns = await namespaceFor('retry', 600);
    // The run number survives restarts in an emptyDir; runs 0 and 1 exit 1.
    const script = `n=$(cat /state/n 2>/dev/null || echo 0); echo $((n+1)) > /state/n; i=1; while [ $i -le ${M} ]; do echo "attempt $n line $i"; i=$((i+1)); done; [ $n -ge 2 ] || exit 1`;
    await create(ns, {
      metadata: { name: 'retry' },
      spec: {
        backoffLimit: 6,
        template: {
          spec: {
            restartPolicy: 'OnFailure',
            volumes: [{ name: 'state', emptyDir: {} }],
            containers: [{ name: 'main', image: IMAGE, command: ['sh', '-c', script], volumeMounts: [{ name: 'state', mountPath: '/state' }] }],
          },
        },
      },
    });
    const pod = await jobPod(ns, 'retry');
    // The kubelet's crash-loop back-off is 10 s, then 20 s.
    const cond = await finished(ns, 'retry', 170_000);
    const after = await env.core.readNamespacedPod({ name: pod.name, namespace: ns });
    const main = after.status?.containerStatuses?.find((s) => s.name === 'main');
    const filter = `${exact('namespace', ns)} ${exact('container', 'main')}`;
    const got = await received(filter);
    tally.push({ scenario: '5. OnFailure, two failures then success', written: 3 * M, received: got.total, duplicated: got.total - got.distinct, unsent: await unsentOf(ns, pod.name) });
    expect({ condition: cond.type, restarts: main?.restartCount, exit: main?.state?.terminated?.exitCode }).toEqual({ condition: 'Complete', restarts: 2, exit: 0 });
    expect(got).toEqual({ total: 3 * M, distinct: 3 * M });
    const rows = await vl.query(`${filter} | stats by (namespace, job, pod, pod_uid, container, restart_count, node) count() as n | sort by (restart_count)`);
    expect(rows).toEqual(
      [0, 1, 2].map((k) => ({ namespace: ns, job: 'retry', pod: pod.name, pod_uid: pod.uid, container: 'main', restart_count: String(k), node: env.node.name, n: String(M) })),
    );
    for (const k of [0, 1, 2]) {
      expect(await vl.count(`${filter} ${exact('restart_count', String(k))} "attempt ${k} line"`), `run ${k}'s lines carry restart_count ${k}`).toBe(M);
    }
  });


  scenario('6. the sidecar process killed mid-stream: the kubelet restarts it, it resumes from its checkpoint; nothing lost, duplicates bounded', async () => {
    const N = 4000;
    const ns = await namespaceFor('kill', 600);
    // About 20 s of writing, so the kill lands while lines are still coming.
    const script = `i=1; while [ $i -le ${N} ]; do echo "kill line $i"; [ $((i % 100)) -eq 0 ] && sleep 0.5; i=$((i+1)); done`;
    await create(ns, {
      metadata: { name: 'kill' },
      spec: { backoffLimit: 0, template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: IMAGE, command: ['sh', '-c', script] }] } } },
    });
    const pod = await jobPod(ns, 'kill');
    const filter = `${exact('namespace', ns)} ${exact('container', 'main')}`;
    // Mid-stream: some lines have arrived, and the main container still runs.
    await waitFor('the first lines at the log server', async () => ((await vl.count(filter)) >= 500 ? true : undefined), { timeoutMs: 60_000, intervalMs: 250 });
    const running = await env.core.readNamespacedPod({ name: pod.name, namespace: ns });
    const sidecarId = running.status?.initContainerStatuses?.find((s) => s.name === NAMES.container)?.containerID?.replace(/^containerd:\/\//, '');
    expect(running.status?.containerStatuses?.find((s) => s.name === 'main')?.state?.running, 'the main container still writes').toBeDefined();
    expect(sidecarId, 'the sidecar runs').toBeDefined();
    const pids = containerPids(env.node, sidecarId!);
    expect(pids.length, 'the sidecar container has a process').toBeGreaterThan(0);
    const receivedAtKill = await vl.count(filter);
    for (const pid of pids) process.kill(pid, 'SIGKILL');
    // Everything the sidecar could have read before it died: the bound on what it may send twice.
    const writtenAtKill = (await env.core.readNamespacedPodLog({ name: pod.name, namespace: ns, container: 'main' })).split('\n').filter(Boolean).length;
    const cond = await finished(ns, 'kill');
    const after = await env.core.readNamespacedPod({ name: pod.name, namespace: ns });
    const sidecar = after.status?.initContainerStatuses?.find((s) => s.name === NAMES.container);
    const got = await received(filter);
    console.log(`6. killed the sidecar (pids ${pids.join(',')}) with ${receivedAtKill} lines received and ${writtenAtKill} written; sidecar restarts ${sidecar?.restartCount}`);
    tally.push({ scenario: '6. sidecar killed mid-stream', written: N, received: got.total, duplicated: got.total - got.distinct, unsent: await unsentOf(ns, pod.name) });
    expect({ condition: cond.type, sidecarRestarts: sidecar?.restartCount, sidecarExit: sidecar?.state?.terminated?.exitCode }).toEqual({
      condition: 'Complete',
      sidecarRestarts: 1,
      sidecarExit: 0,
    });
    expect(got.distinct, 'nothing lost').toBe(N);
    // A restart from offset 0 would send every line received before the kill again.
    expect(got.total - got.distinct, 'resumed from its checkpoint, not from the start of the file').toBeLessThan(receivedAtKill);
    expect(got.total - got.distinct, 'only lines read before the kill may arrive twice').toBeLessThanOrEqual(writtenAtKill);
    const rows = await vl.query(`${filter} | stats by (namespace, job, pod, pod_uid, container, restart_count, node) count_uniq(_msg) as n`);
    expect(rows).toEqual([{ namespace: ns, job: 'kill', pod: pod.name, pod_uid: pod.uid, container: 'main', restart_count: '0', node: env.node.name, n: String(N) }]);
  });

  scenario('8. ordering: the Job is Complete only after the sidecar exited, and the TTL deletes Job and pod only after every line is at the log server', async () => {
    const N = 500;
    const TTL = 5;
    const ns = await namespaceFor('order', TTL);
    await create(ns, {
      metadata: { name: 'order' },
      spec: { backoffLimit: 0, template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: IMAGE, command: ['sh', '-c', numberedLines('order', N)] }] } } },
    });
    const pod = await jobPod(ns, 'order');
    const cond = await finished(ns, 'order');
    const seenCompleteAt = Date.now();
    // Read before the TTL can take the pod and its logs.
    const after = await env.core.readNamespacedPod({ name: pod.name, namespace: ns });
    const unsent = await unsentOf(ns, pod.name);
    const filter = `${exact('namespace', ns)} ${exact('container', 'main')}`;
    // Queried right after Complete was seen, before any deletion: what the
    // server holds then is what a TTL deletion could leave behind.
    const atComplete = await received(filter);
    const jobTtl = (await env.batch.readNamespacedJob({ name: 'order', namespace: ns })).spec?.ttlSecondsAfterFinished;

    // Poll until both are gone, checking they were present until close to the TTL.
    let jobGoneAt: number | undefined;
    let podGoneAt: number | undefined;
    await waitFor(
      'the TTL to delete the Job and its pod',
      async () => {
        const now = Date.now();
        if (jobGoneAt === undefined) {
          try {
            await env.batch.readNamespacedJob({ name: 'order', namespace: ns });
          } catch (err) {
            if ((err as { code?: number }).code !== 404) throw err;
            jobGoneAt = now;
          }
        }
        if (podGoneAt === undefined) {
          const pods = await env.core.listNamespacedPod({ namespace: ns, labelSelector: 'batch.kubernetes.io/job-name=order' });
          if (pods.items.length === 0) podGoneAt = now;
        }
        return jobGoneAt !== undefined && podGoneAt !== undefined ? true : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    const final = await received(filter);
    tally.push({ scenario: '8. ordering, TTL 5 s', written: N, received: final.total, duplicated: final.total - final.distinct, unsent });

    expect(cond.type).toBe('Complete');
    expect(jobTtl, 'the webhook set the TTL').toBe(TTL);
    const sidecar = after.status?.initContainerStatuses?.find((s) => s.name === NAMES.container);
    expect(sidecar?.state?.terminated?.exitCode, 'the sidecar exited 0').toBe(0);
    // Both are RFC 3339 with whole seconds, so equal seconds are in order too.
    const sidecarFinished = new Date(sidecar!.state!.terminated!.finishedAt!).getTime();
    const completeAt = new Date(cond.lastTransitionTime!).getTime();
    console.log(
      `8. sidecar finishedAt ${new Date(sidecarFinished).toISOString()}, Complete ${new Date(completeAt).toISOString()}; ` +
        `Job gone ${jobGoneAt! - completeAt} ms and pod gone ${podGoneAt! - completeAt} ms after Complete (TTL ${TTL} s)`,
    );
    expect(sidecarFinished, `sidecar finished ${sidecar?.state?.terminated?.finishedAt}, Job Complete ${String(cond.lastTransitionTime)}`).toBeLessThanOrEqual(completeAt);
    expect(atComplete, 'every line was at the log server when the Job was Complete').toEqual({ total: N, distinct: N });
    // The TTL clock starts at lastTransitionTime (truncated to the second), so
    // nothing may be gone before completeAt + TTL.
    expect(jobGoneAt! - completeAt, 'Job deleted only after the TTL').toBeGreaterThanOrEqual(TTL * 1000);
    expect(podGoneAt! - completeAt, 'pod deleted only after the TTL').toBeGreaterThanOrEqual(TTL * 1000);
    expect(seenCompleteAt, 'the Job was seen Complete before its deletion').toBeLessThan(jobGoneAt!);
    expect(final).toEqual({ total: N, distinct: N });
    const rows = await vl.query(`${filter} | stats by (namespace, job, pod, pod_uid, container, restart_count, node) count() as n`);
    expect(rows).toEqual([{ namespace: ns, job: 'order', pod: pod.name, pod_uid: pod.uid, container: 'main', restart_count: '0', node: env.node.name, n: String(N) }]);
  });
});
