/**
 * Whole Job lifecycles in node mode: the real API server and controllers, the
 * webhook, the test kubelet running the real sidecar bundle, and VictoriaLogs
 * receiving through the loki sink. Every scenario counts what was written,
 * what arrived, what arrived twice and what the sidecar reports as unsent.
 */
import type { V1Job } from '@kubernetes/client-node';
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useCluster, waitFor } from '../harness/cluster/client.ts';
import { followJob, type JobLife } from '../harness/kubelet/follow-job.ts';
import { numberedLines, shellJob, Stack } from '../harness/kubelet/stack.ts';
import { exact } from '../harness/servers/victorialogs.ts';

const cluster = useCluster();
let stack: Stack;

interface Row {
  scenario: string;
  written: number;
  received: number;
  duplicated: number;
  unsent: number | string;
}
const tally: Row[] = [];

beforeAll(async () => {
  stack = await Stack.start({
    info: cluster.info,
    name: 'lc',
    // 5 MiB files, 5 kept: the flood below crosses ten rotations.
    kubelet: { logMaxSizeBytes: 5 * 1024 * 1024, logMaxFiles: 5, restartBackoffMs: 300 },
    // The sidecar's own guarantee, without the harvester behind it (2b measures
    // exactly what it leaves behind); the harvester's is in harvester.test.ts.
    harvesterArgs: ['--max-hold-seconds', '0'],
  });
}, 240_000);

afterAll(async () => {
  console.log('lifecycle (node mode): written / received / duplicated / unsent');
  for (const r of tally) console.log(`  ${r.scenario}: ${r.written} / ${r.received} / ${r.duplicated} / ${r.unsent}`);
  await stack?.stop();
}, 120_000);

const TTL = 3;

async function create(namespace: string, job: V1Job): Promise<V1Job> {
  const stored = await stack.batch.createNamespacedJob({ namespace, body: job });
  expect(stored.spec?.template.spec?.initContainers?.[0]?.name, 'the webhook injected the sidecar').toBe('jobharvest');
  return stored;
}

/** What the server holds for a filter: total, distinct messages. */
async function received(filter: string): Promise<{ total: number; distinct: number }> {
  return stack.vl.countWithDistinct(filter, '_msg');
}

function unsentOf(uid: string): number | undefined {
  const v = stack.sidecarSummary(uid)?.lines_unsent;
  return typeof v === 'number' ? v : undefined;
}

/** Sidecar exit before the terminal phase, from the kubelet's own timeline. */
function expectSidecarExitedBeforeSucceeded(uid: string): void {
  const ev = stack.kubelet.events.filter((e) => e.uid === uid);
  const sidecarExit = ev.findIndex((e) => e.type === 'exit' && e.container === 'jobharvest');
  const succeeded = ev.findIndex((e) => e.type === 'phase' && e.phase === 'Succeeded');
  expect(sidecarExit, 'the sidecar exited').toBeGreaterThanOrEqual(0);
  expect(succeeded, 'the pod succeeded after the sidecar exited').toBeGreaterThan(sidecarExit);
}

function expectGuarantee(life: JobLife): void {
  expect(life.violations).toEqual([]);
  expect(life.completeAt, 'the Job completed').toBeDefined();
  // The TTL clock starts at lastTransitionTime (whole seconds, truncated): nothing may be gone before
  // completeAt + TTL, and both must have been seen present during the last second before it.
  expect(life.jobGoneAt! - life.completeAt!, 'Job deleted only after the TTL').toBeGreaterThanOrEqual(TTL * 1000);
  expect(life.podsGoneAt! - life.completeAt!, 'pods deleted only after the TTL').toBeGreaterThanOrEqual(TTL * 1000);
  expect(life.jobLastSeen! - life.completeAt!, 'Job still there a second before the TTL').toBeGreaterThanOrEqual((TTL - 1) * 1000);
  expect(life.podsLastSeen! - life.completeAt!, 'pods still there a second before the TTL').toBeGreaterThanOrEqual((TTL - 1) * 1000);
}

function gate(name: string): { path: string; open(): void; dispose(): void } {
  const path = join(tmpdir(), `jh-gate-${name}-${process.pid}-${Date.now()}`);
  return { path, open: () => writeFileSync(path, ''), dispose: () => rmSync(path, { force: true }) };
}

describe('Job lifecycle in node mode', () => {
  it('1. the guarantee: every line arrives once, with its metadata; Complete only after the sidecar exited; deleted after the TTL, not before delivery', async () => {
    const N = 2000;
    const ns = await stack.namespace('happy');
    // A second of work first, as most Jobs have; a Job faster than the sidecar's start is case 1b.
    const stored = await create(ns, shellJob('happy', { script: `sleep 1; ${numberedLines('happy', N)}` }));
    expect(JSON.parse(stored.metadata!.annotations!['jobharvest.io/status']!).mode).toBe('node');
    expect(stored.spec?.ttlSecondsAfterFinished).toBe(TTL);
    const filter = stack.filter(ns);
    const life = await followJob(stack, ns, 'happy', { expected: N, filter });
    expectGuarantee(life);

    const [w] = stack.jobWorkers(ns, 'happy');
    expect(w, 'the kubelet ran the pod').toBeDefined();
    const got = await received(filter);
    tally.push({ scenario: '1. happy path', written: N, received: got.total, duplicated: got.total - got.distinct, unsent: unsentOf(w!.uid) ?? 'no summary' });
    expect(got).toEqual({ total: N, distinct: N });
    expect(unsentOf(w!.uid)).toBe(0);
    expectSidecarExitedBeforeSucceeded(w!.uid);
    // Metadata as the loki sink sends it: labels and structured metadata.
    const rows = await stack.vl.query(`${filter} | stats by (namespace, job, pod, pod_uid, container, restart_count, node) count() as n`);
    expect(rows).toEqual([{ namespace: ns, job: 'happy', pod: w!.name, pod_uid: w!.uid, container: 'main', restart_count: '0', node: stack.kubelet.nodeName, n: String(N) }]);
    const first = await stack.vl.query(`${filter} ${exact('_msg', 'happy line 1')}`);
    expect(first).toHaveLength(1);
    // The pod's log directory went with the pod.
    await stack.kubelet.waitForEvent((e) => e.uid === w!.uid && e.type === 'removed', 20_000);
    expect(existsSync(w!.podDir)).toBe(false);
  });

  it('1b. a Job that is done within milliseconds, before the sidecar is up: its lines still arrive before deletion', async () => {
    const N = 100;
    const ns = await stack.namespace('fast');
    await create(ns, shellJob('fast', { script: numberedLines('fast', N) }));
    const filter = stack.filter(ns);
    const life = await followJob(stack, ns, 'fast', { expected: N, filter });
    const [w] = stack.jobWorkers(ns, 'fast');
    const got = await received(filter);
    tally.push({ scenario: '1b. Job done before the sidecar is up', written: N, received: got.total, duplicated: got.total - got.distinct, unsent: unsentOf(w!.uid) ?? 'no summary' });
    expectGuarantee(life);
    expect(got).toEqual({ total: N, distinct: N });
    expect(unsentOf(w!.uid)).toBe(0);
    expectSidecarExitedBeforeSucceeded(w!.uid);
  });

  it('2a. the log server is down when the main container ends and comes back within the grace period: every line arrives', async () => {
    const N1 = 500;
    const N2 = 500;
    const g = gate('2a');
    try {
      const ns = await stack.namespace('down', { drainSeconds: 20 });
      await create(ns, shellJob('down', { script: `${numberedLines('down', N1)}; while [ ! -e "$GATE" ]; do sleep 0.05; done; ${numberedLines('down', N2, N1 + 1)}`, env: [{ name: 'GATE', value: g.path }] }));
      const filter = stack.filter(ns);
      const lifeP = followJob(stack, ns, 'down', { expected: N1 + N2, filter });
      await waitFor(`${N1} lines at the server`, async () => ((await stack.vl.count(filter)) >= N1 ? true : undefined), { timeoutMs: 60_000 });
      await stack.vl.stop();
      g.open();
      const mainExit = await stack.kubelet.waitForEvent((e) => e.namespace === ns && e.type === 'exit' && e.container === 'main', 30_000);
      await new Promise((r) => setTimeout(r, 4000));
      // Still draining: the sidecar holds the pod while the server is away.
      const [w] = stack.jobWorkers(ns, 'down');
      expect(w!.isRunning('jobharvest')).toBe(true);
      await stack.vl.start();
      const life = await lifeP;
      expectGuarantee(life);
      expect(life.heldBySidecar, 'observations of the Job held open by the draining sidecar').toBeGreaterThanOrEqual(5);
      const got = await received(filter);
      const summary = stack.sidecarSummary(w!.uid);
      tally.push({ scenario: '2a. server down, back within grace', written: N1 + N2, received: got.total, duplicated: got.total - got.distinct, unsent: unsentOf(w!.uid) ?? 'no summary' });
      expect(got.distinct).toBe(N1 + N2);
      expect(got.total - got.distinct, 'duplicates: at most the batch cut by the outage').toBeLessThanOrEqual(N1);
      expect(summary?.lines_unsent).toBe(0);
      expect(Number(summary?.retries), 'the sidecar retried while the server was down').toBeGreaterThan(0);
      const sidecarExit = stack.kubelet.events.find((e) => e.uid === w!.uid && e.type === 'exit' && e.container === 'jobharvest')!;
      expect(sidecarExit.t - mainExit.t).toBeGreaterThanOrEqual(4000);
      expectSidecarExitedBeforeSucceeded(w!.uid);
    } finally {
      g.dispose();
      if (!stack.vl.running) await stack.vl.start();
    }
  });

  it('2b. the log server stays down past the drain budget: the sidecar reports exactly the lines it could not send', async () => {
    const N1 = 300;
    const N2 = 200;
    const DRAIN = 3;
    const g = gate('2b');
    try {
      const ns = await stack.namespace('lost', { drainSeconds: DRAIN });
      // The grace period the webhook would set for this budget: drain + 5 s.
      const GRACE = DRAIN + 5;
      const stored = await create(ns, shellJob('lost', { terminationGracePeriodSeconds: GRACE, script: `${numberedLines('lost', N1)}; while [ ! -e "$GATE" ]; do sleep 0.05; done; ${numberedLines('lost', N2, N1 + 1)}`, env: [{ name: 'GATE', value: g.path }] }));
      expect(stored.spec?.template.spec?.terminationGracePeriodSeconds).toBe(GRACE);
      const filter = stack.filter(ns);
      // Only what was delivered before the outage can be there at deletion.
      const lifeP = followJob(stack, ns, 'lost', { expected: N1, filter });
      await waitFor(`${N1} lines at the server`, async () => ((await stack.vl.count(filter)) >= N1 ? true : undefined), { timeoutMs: 60_000 });
      await stack.vl.stop();
      g.open();
      const mainExit = await stack.kubelet.waitForEvent((e) => e.namespace === ns && e.type === 'exit' && e.container === 'main', 30_000);
      const sidecarExit = await stack.kubelet.waitForEvent((e) => e.namespace === ns && e.type === 'exit' && e.container === 'jobharvest', 30_000);
      await stack.vl.start();
      const life = await lifeP;
      expectGuarantee(life);
      const [w] = stack.jobWorkers(ns, 'lost');
      const got = await received(filter);
      const unsent = unsentOf(w!.uid);
      tally.push({ scenario: '2b. server down past the drain budget', written: N1 + N2, received: got.total, duplicated: got.total - got.distinct, unsent: unsent ?? 'no summary' });
      expect(got).toEqual({ total: N1, distinct: N1 });
      expect(unsent, 'unsent in the summary = written - received').toBe(N1 + N2 - got.distinct);
      // It retried, then gave up by itself within the grace period: no SIGKILL was needed.
      expect(Number(stack.sidecarSummary(w!.uid)?.retries)).toBeGreaterThan(0);
      expect(sidecarExit.t - mainExit.t).toBeLessThan(GRACE * 1000);
      expect(stack.kubelet.events.some((e) => e.uid === w!.uid && e.type === 'signal' && e.signal === 'SIGKILL')).toBe(false);
    } finally {
      g.dispose();
      if (!stack.vl.running) await stack.vl.start();
    }
  });

  it('3. an OnFailure Job that fails twice, then succeeds: the logs of all three runs arrive, each with its restart count', async () => {
    const M = 200;
    const ns = await stack.namespace('retry');
    const script = `n=$(cat "$S/n" 2>/dev/null || echo 0); echo $((n+1)) > "$S/n"; i=1; while [ $i -le ${M} ]; do echo "attempt $n line $i"; i=$((i+1)); done; [ $n -ge 2 ] || exit 1`;
    await create(ns, shellJob('retry', { script, restartPolicy: 'OnFailure', backoffLimit: 6, env: [{ name: 'S', value: '/state' }], volumes: [{ name: 'state', emptyDir: {} }], volumeMounts: [{ name: 'state', mountPath: '/state' }] }));
    const filter = stack.filter(ns);
    const life = await followJob(stack, ns, 'retry', { expected: 3 * M, filter });
    expectGuarantee(life);
    const [w] = stack.jobWorkers(ns, 'retry');
    expect(w!.records.get('main')!.restartCount).toBe(2);
    const got = await received(filter);
    tally.push({ scenario: '3. OnFailure, two failures then success', written: 3 * M, received: got.total, duplicated: got.total - got.distinct, unsent: unsentOf(w!.uid) ?? 'no summary' });
    expect(got).toEqual({ total: 3 * M, distinct: 3 * M });
    for (const k of [0, 1, 2]) {
      const rows = await stack.vl.query(`${filter} ${exact('restart_count', String(k))} | stats count() as n, count_uniq(_msg) as d`);
      expect(rows[0], `restart ${k}`).toEqual({ n: String(M), d: String(M) });
      expect(await stack.vl.count(`${filter} ${exact('restart_count', String(k))} "attempt ${k} line"`), `run ${k}'s lines carry restart_count ${k}`).toBe(M);
    }
    expect(unsentOf(w!.uid)).toBe(0);
  });

  it('4. an Indexed Job, completions 4, parallelism 2: four pods, each with its own complete logs', async () => {
    const M = 300;
    const ns = await stack.namespace('indexed');
    await create(ns, shellJob('indexed', { script: `i=1; while [ $i -le ${M} ]; do echo "index $JOB_COMPLETION_INDEX line $i"; i=$((i+1)); done; sleep 0.5`, completions: 4, parallelism: 2, indexed: true }));
    const filter = stack.filter(ns);
    const life = await followJob(stack, ns, 'indexed', { expected: 4 * M, filter });
    expectGuarantee(life);
    const workers = stack.jobWorkers(ns, 'indexed');
    expect(workers).toHaveLength(4);
    const got = await received(filter);
    tally.push({ scenario: '4. Indexed, completions 4, parallelism 2', written: 4 * M, received: got.total, duplicated: got.total - got.distinct, unsent: workers.map((w) => unsentOf(w.uid) ?? '?').join('+') });
    expect(got).toEqual({ total: 4 * M, distinct: 4 * M });
    const rows = await stack.vl.query(`${filter} | stats by (pod_uid, pod) count() as n, count_uniq(_msg) as d`);
    expect(rows.map((r) => r.pod_uid).sort()).toEqual(workers.map((w) => w.uid).sort());
    for (const r of rows) expect(r, `pod ${r.pod}`).toMatchObject({ n: String(M), d: String(M) });
    for (const w of workers) {
      const index = w.annotations['batch.kubernetes.io/job-completion-index'];
      expect(await stack.vl.count(`${exact('pod_uid', w.uid)} ${exact('container', 'main')} "index ${index} line"`), `pod ${w.name} logged its own index`).toBe(M);
      expect(unsentOf(w.uid)).toBe(0);
    }
    // Never more than two pods at once on the node.
    const spans = workers.map((w) => {
      const ev = stack.kubelet.events.filter((e) => e.uid === w.uid);
      return { from: ev.find((e) => e.type === 'start')!.t, to: ev.find((e) => e.type === 'phase')!.t };
    });
    const overlap = Math.max(...spans.map((s) => spans.filter((o) => o.from <= s.from && s.from < o.to).length));
    expect(overlap).toBeLessThanOrEqual(2);
  });

  it('5. a 50 MiB flood across ten rotations: nothing lost', async () => {
    const CHUNKS = 50;
    const PER_CHUNK = 1024;
    const N = CHUNKS * PER_CHUNK;
    const ns = await stack.namespace('flood', { drainSeconds: 60 });
    // 1 KiB lines (newline included), 1 MiB at a time, about 4 MiB/s: a steady
    // flood that the kubelet rotates every 5 MiB, gzipping and deleting old files.
    const script = `c=0; while [ $c -lt ${CHUNKS} ]; do awk -v c=$c 'BEGIN { p = sprintf("%1009s", ""); gsub(/ /, "x", p); for (j = 0; j < ${PER_CHUNK}; j++) printf "flood %02d-%04d %s\\n", c, j, p }'; c=$((c+1)); sleep 0.25; done`;
    await create(ns, shellJob('flood', { script }));
    const filter = stack.filter(ns);
    const life = await followJob(stack, ns, 'flood', { expected: N, filter, timeoutMs: 300_000, intervalMs: 250 });
    expectGuarantee(life);
    const [w] = stack.jobWorkers(ns, 'flood');
    expect(w!.logRotations('main')).toBeGreaterThanOrEqual(9);
    const got = await received(filter);
    tally.push({ scenario: '5. 50 MiB flood, 5 MiB rotation', written: N, received: got.total, duplicated: got.total - got.distinct, unsent: unsentOf(w!.uid) ?? 'no summary' });
    expect(got.distinct).toBe(N);
    expect(got.total).toBe(N);
    expect(unsentOf(w!.uid)).toBe(0);
  }, 360_000);
});
