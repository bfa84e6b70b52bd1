/**
 * Where a Job's logs went, on the real control plane with the test kubelet,
 * the webhook and VictoriaLogs: the sidecar's termination message in the pod
 * status, the `jobharvest.io/delivery` annotation and the one Event on the
 * Job. Counts are checked at VictoriaLogs.
 */
import { Watch, type CoreV1Event, type V1Job, type V1Pod } from '@kubernetes/client-node';
import { execFileSync } from 'node:child_process';
import { createServer } from 'node:http';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeTermination } from '../../src/contract/termination.ts';
import { HOLD_ANNOTATION } from '../../harvester/hold.ts';
import { DELIVERY_ANNOTATION, type DeliveryRecord } from '../../harvester/report.ts';
import { useCluster, waitFor } from '../harness/cluster/client.ts';
import { numberedLines, shellJob, Stack } from '../harness/kubelet/stack.ts';
import { destinationsFile, startHarvester, type HarvesterProcess } from '../support/harvester-process.ts';
import { VictoriaLogs } from '../harness/servers/victorialogs.ts';

const cluster = useCluster();
/** H3 only: the point there is giving up at the end of the maximum hold. Everything else runs at the default (86,400 s). */
const SHORT_HOLD = 20;
let stack: Stack;

interface Row {
  scenario: string;
  written: number;
  received: number;
  duplicated: number;
  annotation: string;
  event: string;
}
const tally: Row[] = [];

beforeAll(async () => {
  // The harvester at its default maximum hold; a short Lease, so that takeovers fit in a test.
  stack = await Stack.start({ info: cluster.info, name: 'hv', kubelet: { restartBackoffMs: 300 }, harvesterArgs: ['--lease-seconds', '3'] });
}, 240_000);

afterAll(async () => {
  console.log('harvester: written / received / duplicated / delivery annotation / Event');
  for (const r of tally) console.log(`  ${r.scenario}: ${r.written} / ${r.received} / ${r.duplicated} / ${r.annotation} / ${r.event}`);
  await stack?.stop();
}, 120_000);

function gate(name: string): { path: string; open(): void; dispose(): void } {
  const path = join(tmpdir(), `jh-gate-${name}-${process.pid}-${Date.now()}`);
  return { path, open: () => writeFileSync(path, ''), dispose: () => rmSync(path, { force: true }) };
}

/**
 * Every version of one Job as the API server's watch delivers it: a release
 * that restores a TTL already past due is followed by the deletion within
 * milliseconds, too fast for polling.
 */
function recordJob(ns: string, name: string): { versions: Array<{ type: string; job: V1Job; at: number }>; stop(): void } {
  const versions: Array<{ type: string; job: V1Job; at: number }> = [];
  let req: { abort(): void } | undefined;
  void new Watch(cluster.kc)
    .watch(`/apis/batch/v1/namespaces/${ns}/jobs`, { fieldSelector: `metadata.name=${name}` }, (type, job: V1Job) => versions.push({ type, job, at: Date.now() }), () => {})
    .then((r) => (req = r));
  return { versions, stop: () => req?.abort() };
}

/**
 * The record without its signature, which must be there: an unsigned record
 * is no report. Its usage is checked here and left out of what is returned:
 * its run time is the clock's, so the cases compare the counts exactly.
 */
function unsigned(raw: string): DeliveryRecord {
  const { sig, usage, ...d } = JSON.parse(raw) as DeliveryRecord & { sig?: string };
  expect(sig).toMatch(/^v2\.[A-Za-z0-9_-]{8}\./);
  expect(usage?.pods, "every pod's requests and run time recorded").toBe(d.pods);
  // The kubelet's times are whole seconds: a pod of less than one may read 0.
  expect(Number.isFinite(usage!.run_seconds)).toBe(true);
  return d;
}

function deliveryIn(rec: ReturnType<typeof recordJob>): { job: V1Job; delivery: DeliveryRecord; at: number } | undefined {
  const v = rec.versions.find((x) => x.type !== 'DELETED' && x.job.metadata?.annotations?.[DELIVERY_ANNOTATION]);
  return v ? { job: v.job, delivery: unsigned(v.job.metadata!.annotations![DELIVERY_ANNOTATION]!), at: v.at } : undefined;
}

/** Resolves once `h` holds the Lease: a Job with a TTL of seconds must not finish before a harvester is there to hold it. */
async function leading(h: HarvesterProcess): Promise<void> {
  await waitFor('the harvester leading', async () => (readFileSync(h.logPath, 'utf8').includes('"msg":"started leading"') ? true : undefined), { timeoutMs: 60_000 });
}

/** Another harvester of this stack: same key, same destinations (unless given), same Lease. */
function anotherHarvester(args: string[], destinations?: string): HarvesterProcess {
  return startHarvester(cluster.info, { name: 'jobharvest-hv', ...stack.harvesterFiles, ...(destinations ? { destinationsFile: destinations } : {}), args: ['--lease-seconds', '3', ...args] });
}

async function delivered(ns: string, name: string): Promise<{ job: V1Job; delivery: DeliveryRecord }> {
  return waitFor(
    `the delivery annotation on ${ns}/${name}`,
    async () => {
      const job = await stack.batch.readNamespacedJob({ name, namespace: ns });
      const raw = job.metadata?.annotations?.[DELIVERY_ANNOTATION];
      return raw ? { job, delivery: unsigned(raw) } : undefined;
    },
    { timeoutMs: 60_000 },
  );
}

async function eventsOf(ns: string, job: V1Job): Promise<CoreV1Event[]> {
  const list = await stack.core.listNamespacedEvent({ namespace: ns, fieldSelector: `involvedObject.uid=${job.metadata!.uid}` });
  return list.items.filter((e) => e.source?.component === 'jobharvest');
}

async function sidecarMessage(ns: string, job: string): Promise<{ pod: V1Pod; text: string | undefined }> {
  const pods = await stack.core.listNamespacedPod({ namespace: ns, labelSelector: `batch.kubernetes.io/job-name=${job}` });
  const pod = pods.items[0]!;
  const st = pod.status?.initContainerStatuses?.find((s) => s.name === 'jobharvest');
  return { pod, text: st?.state?.terminated?.message };
}

describe('delivery report', () => {
  it('D1. every line shipped: the sidecar reports complete, the Job says where its logs went, one Normal LogsShipped Event', async () => {
    const N = 2000;
    const ns = await stack.namespace('d1', { ttlSeconds: 60 });
    await stack.batch.createNamespacedJob({ namespace: ns, body: shellJob('d1', { script: `sleep 1; ${numberedLines('d1', N)}` }) });
    const { job, delivery } = await delivered(ns, 'd1');
    expect(delivery).toEqual({ sink: 'loki', pods: 1, shipped: N, lost: 0, unaccounted: 0 });
    const { text } = await sidecarMessage(ns, 'd1');
    expect(decodeTermination(text)).toMatchObject({ state: 'complete', shipped: N, unsent: 0, runs: [], done: ['main/0'] });
    const events = await waitFor('the Event', async () => {
      const e = await eventsOf(ns, job);
      return e.length > 0 ? e : undefined;
    });
    expect(events.map((e) => [e.type, e.reason, e.message])).toEqual([['Normal', 'LogsShipped', `${N} lines from 1 pod shipped to loki`]]);
    const got = await stack.vl.countWithDistinct(stack.filter(ns), '_msg');
    tally.push({ scenario: 'D1. all shipped', written: N, received: got.total, duplicated: got.total - got.distinct, annotation: JSON.stringify(delivery), event: `${events[0]!.reason}: ${events[0]!.message}` });
    expect(got).toEqual({ total: N, distinct: N });
  });

});

async function waitGone(ns: string, name: string, timeoutMs = 60_000): Promise<number> {
  return waitFor(
    `${ns}/${name} deleted`,
    async () => {
      try {
        await stack.batch.readNamespacedJob({ name, namespace: ns });
        return undefined;
      } catch (err) {
        return (err as { code?: number }).code === 404 ? Date.now() : undefined;
      }
    },
    { timeoutMs, intervalMs: 100 },
  );
}

async function held(ns: string, name: string): Promise<V1Job> {
  return waitFor(`${ns}/${name} held`, async () => {
    const job = await stack.batch.readNamespacedJob({ name, namespace: ns });
    return job.metadata?.annotations?.[HOLD_ANNOTATION] ? job : undefined;
  }, { timeoutMs: 30_000, intervalMs: 100 });
}

describe('the harvester', () => {
  it('H1. log server down past the drain budget, back later: the Job is held, the harvester ships the rest, Normal Event, original TTL restored, then deleted', async () => {
    const N1 = 300;
    const N2 = 200;
    const DRAIN = 3;
    const DOWN_MS = 10_000;
    const g = gate('h1');
    try {
      const ns = await stack.namespace('h1', { drainSeconds: DRAIN });
      const rec = recordJob(ns, 'h1');
      await stack.batch.createNamespacedJob({
        namespace: ns,
        body: shellJob('h1', { terminationGracePeriodSeconds: DRAIN + 5, script: `${numberedLines('h1', N1)}; while [ ! -e "$GATE" ]; do sleep 0.05; done; ${numberedLines('h1', N2, N1 + 1)}`, env: [{ name: 'GATE', value: g.path }] }),
      });
      const filter = stack.filter(ns);
      await waitFor(`${N1} lines at the server`, async () => ((await stack.vl.count(filter)) >= N1 ? true : undefined), { timeoutMs: 60_000 });
      await stack.vl.stop();
      const downAt = Date.now();
      g.open();
      const job = await held(ns, 'h1');
      const hold = JSON.parse(job.metadata!.annotations![HOLD_ANNOTATION]!) as { originalTtl: number };
      expect(hold.originalTtl).toBe(3);
      // The default maximum hold: a day.
      expect(job.spec!.ttlSecondsAfterFinished!).toBeGreaterThanOrEqual(86_400);
      expect(hold).toMatchObject({ maxHoldSeconds: 86_400, sig: expect.stringMatching(/^v2\.[A-Za-z0-9_-]{8}\./) });
      const { pod, text } = await sidecarMessage(ns, 'h1');
      const m = decodeTermination(text)!;
      expect(m).toMatchObject({ state: 'incomplete', mode: 'node', shipped: N1, unsent: N2, done: [] });
      expect(m.runs).toHaveLength(1);
      const [container, restart, ts, n] = m.runs[0]!;
      expect([container, restart, n]).toEqual(['main', 0, 1]);
      // The position, read back through pods/log as the harvester does: skip the
      // lines before ts and n at ts; the first line left is the first unsent one.
      const log = await stack.core.readNamespacedPodLog({ name: pod.metadata!.name!, namespace: ns, container: 'main', timestamps: true });
      const lines = String(log).split('\n').filter(Boolean);
      const at = lines.findIndex((l) => l.startsWith(`${ts} `));
      expect(lines[at]!.endsWith(`h1 line ${N1}`)).toBe(true);
      expect(lines[at + n]!.endsWith(`h1 line ${N1 + 1}`)).toBe(true);
      expect(lines.length - at - n).toBe(N2);
      // Still down, past the drain budget: the Job stays.
      await new Promise((r) => setTimeout(r, Math.max(0, DOWN_MS - (Date.now() - downAt))));
      expect((await stack.batch.readNamespacedJob({ name: 'h1', namespace: ns })).metadata?.annotations?.[HOLD_ANNOTATION]).toBeDefined();
      await stack.vl.start();
      const { job: released, delivery, at: releasedAt } = await waitFor('the release', async () => deliveryIn(rec), { timeoutMs: 60_000 });
      expect(delivery).toEqual({ sink: 'loki', pods: 1, shipped: N1 + N2, lost: 0, unaccounted: 0, harvested: N2 });
      expect(released.spec?.ttlSecondsAfterFinished, 'the original TTL is back').toBe(3);
      expect(released.metadata?.annotations?.[HOLD_ANNOTATION]).toBeUndefined();
      const events = await waitFor('the Event', async () => ((await eventsOf(ns, released)).length > 0 ? eventsOf(ns, released) : undefined));
      expect(events.map((e) => [e.type, e.reason, e.message])).toEqual([['Normal', 'LogsShipped', `${N1 + N2} lines from 1 pod shipped to loki (${N2} by the harvester)`]]);
      await waitGone(ns, 'h1');
      await waitFor('the deletion in the watch', async () => (rec.versions.some((v) => v.type === 'DELETED') ? true : undefined));
      rec.stop();
      const deletedAt = rec.versions.find((v) => v.type === 'DELETED')!.at;
      expect(deletedAt, 'deleted only after the release').toBeGreaterThanOrEqual(releasedAt);
      // Before the release every version of the Job still had its hold.
      const before = rec.versions.filter((v) => v.at < releasedAt && v.job.metadata?.annotations?.[HOLD_ANNOTATION]);
      expect(before.length).toBeGreaterThan(0);
      const got = await stack.vl.countWithDistinct(filter, '_msg');
      tally.push({ scenario: `H1. server down ${DOWN_MS / 1000} s past a ${DRAIN} s drain budget`, written: N1 + N2, received: got.total, duplicated: got.total - got.distinct, annotation: JSON.stringify(delivery), event: `${events[0]!.reason}: ${events[0]!.message}` });
      expect(got.distinct).toBe(N1 + N2);
      expect(got.total - got.distinct).toBe(0);
    } finally {
      g.dispose();
      if (!stack.vl.running) await stack.vl.start();
    }
  }, 180_000);

  it('H3. a log server that never comes back within the maximum hold: a Warning Event with the exact count lost, then the Job is deleted', async () => {
    const N1 = 300;
    const N2 = 200;
    const DRAIN = 3;
    const g = gate('h3');
    // The stack's harvester gives the Lease up; one with a short maximum hold takes it.
    await stack.harvester!.stop();
    const short = anotherHarvester(['--max-hold-seconds', String(SHORT_HOLD)]);
    await leading(short);
    try {
      const ns = await stack.namespace('h3', { drainSeconds: DRAIN });
      const rec = recordJob(ns, 'h3');
      await stack.batch.createNamespacedJob({
        namespace: ns,
        body: shellJob('h3', { terminationGracePeriodSeconds: DRAIN + 5, script: `${numberedLines('h3', N1)}; while [ ! -e "$GATE" ]; do sleep 0.05; done; ${numberedLines('h3', N2, N1 + 1)}`, env: [{ name: 'GATE', value: g.path }] }),
      });
      const filter = stack.filter(ns);
      await waitFor(`${N1} lines at the server`, async () => ((await stack.vl.count(filter)) >= N1 ? true : undefined), { timeoutMs: 60_000 });
      await stack.vl.stop();
      g.open();
      const job = await held(ns, 'h3');
      const heldAt = Date.parse((JSON.parse(job.metadata!.annotations![HOLD_ANNOTATION]!) as { since: string }).since);
      const { job: released, delivery, at: releasedAt } = await waitFor('the release', async () => deliveryIn(rec), { timeoutMs: (SHORT_HOLD + 60) * 1000 });
      expect(releasedAt - heldAt, 'held for the maximum hold').toBeGreaterThanOrEqual(SHORT_HOLD * 1000 - 1000);
      expect(delivery).toEqual({ sink: 'loki', pods: 1, shipped: N1, lost: N2, unaccounted: 0, harvested: 0 });
      expect(released.spec?.ttlSecondsAfterFinished).toBe(3);
      const events = await waitFor('the Event', async () => ((await eventsOf(ns, released)).length > 0 ? eventsOf(ns, released) : undefined));
      expect(events.map((e) => [e.type, e.reason, e.message])).toEqual([['Warning', 'LogsLost', `${N1} lines from 1 pod shipped to loki; ${N2} lines lost`]]);
      await waitGone(ns, 'h3');
      rec.stop();
      await stack.vl.start();
      const got = await stack.vl.countWithDistinct(filter, '_msg');
      tally.push({ scenario: `H3. server never back within a ${SHORT_HOLD} s maximum hold`, written: N1 + N2, received: got.total, duplicated: got.total - got.distinct, annotation: JSON.stringify(delivery), event: `${events[0]!.reason}: ${events[0]!.message}` });
      expect(got).toEqual({ total: N1, distinct: N1 });
    } finally {
      g.dispose();
      if (!stack.vl.running) await stack.vl.start();
      await short.stop();
      // Back to a harvester at the default maximum hold for the rest.
      const next = anotherHarvester([]);
      (stack as { harvester: HarvesterProcess | undefined }).harvester = next;
      await leading(next);
    }
  }, 180_000);

  it('H2. the sidecar SIGKILLed as the Job ends: its last checkpoint is in the termination message, the harvester ships the rest with at most one batch duplicated', async () => {
    const N1 = 300;
    const N2 = 200;
    const g = gate('h2');
    try {
      // A long drain: the sidecar would wait for the server, but is killed first.
      const ns = await stack.namespace('h2', { drainSeconds: 30 });
      const rec = recordJob(ns, 'h2');
      await stack.batch.createNamespacedJob({
        namespace: ns,
        body: shellJob('h2', { script: `${numberedLines('h2', N1)}; while [ ! -e "$GATE" ]; do sleep 0.05; done; ${numberedLines('h2', N2, N1 + 1)}`, env: [{ name: 'GATE', value: g.path }] }),
      });
      const filter = stack.filter(ns);
      await waitFor(`${N1} lines at the server`, async () => ((await stack.vl.count(filter)) >= N1 ? true : undefined), { timeoutMs: 60_000 });
      await stack.vl.stop();
      g.open();
      await stack.kubelet.waitForEvent((e) => e.namespace === ns && e.type === 'exit' && e.container === 'main', 30_000);
      const start = stack.kubelet.events.find((e) => e.namespace === ns && e.type === 'start' && e.container === 'jobharvest');
      await new Promise((r) => setTimeout(r, 1000));
      process.kill((start as { pid: number }).pid, 'SIGKILL');
      const exit = await stack.kubelet.waitForEvent((e) => e.namespace === ns && e.type === 'exit' && e.container === 'jobharvest', 30_000);
      expect((exit as { exitCode: number }).exitCode).toBe(137);
      await stack.vl.start();
      const { text } = await sidecarMessage(ns, 'h2');
      const m = decodeTermination(text)!;
      // No drain ran: the snapshot of the last checkpoint, up to the last acknowledged line.
      expect(m).toMatchObject({ state: 'running', shipped: N1, done: [] });
      expect(m.runs.map(([c, r]) => [c, r])).toEqual([['main', 0]]);
      const { job: released, delivery } = await waitFor('the release', async () => deliveryIn(rec), { timeoutMs: 90_000 });
      expect(delivery).toEqual({ sink: 'loki', pods: 1, shipped: N1 + N2, lost: 0, unaccounted: 0, harvested: N2 });
      expect(released.spec?.ttlSecondsAfterFinished).toBe(3);
      const events = await waitFor('the Event', async () => ((await eventsOf(ns, released)).length > 0 ? eventsOf(ns, released) : undefined));
      expect(events.map((e) => [e.type, e.reason])).toEqual([['Normal', 'LogsShipped']]);
      await waitGone(ns, 'h2');
      rec.stop();
      const got = await stack.vl.countWithDistinct(filter, '_msg');
      tally.push({ scenario: 'H2. sidecar SIGKILLed as the Job ends', written: N1 + N2, received: got.total, duplicated: got.total - got.distinct, annotation: JSON.stringify(delivery), event: `${events[0]!.reason}: ${events[0]!.message}` });
      expect(got.distinct).toBe(N1 + N2);
      // At most one batch (JOBHARVEST_BATCH_MAX_RECORDS, 5000 by default) again; here the position is exact.
      expect(got.total - got.distinct).toBeLessThanOrEqual(5000);
    } finally {
      g.dispose();
      if (!stack.vl.running) await stack.vl.start();
    }
  }, 180_000);

  it('H5. a TTL of 0 set by the user: raised to the floor with a warning, and the Job still gets its report before it is deleted', async () => {
    const ns = await stack.namespace('h5');
    const warnings: string[] = [];
    const body = shellJob('h5', { script: numberedLines('h5', 100) });
    body.spec!.ttlSecondsAfterFinished = 0;
    const rec = recordJob(ns, 'h5');
    const res = await stack.batch.createNamespacedJobWithHttpInfo({ namespace: ns, body });
    for (const [k, v] of Object.entries(res.headers)) if (k.toLowerCase() === 'warning') warnings.push(String(v));
    expect(res.data.spec?.ttlSecondsAfterFinished).toBe(3);
    expect(warnings.join('\n')).toContain('ttlSecondsAfterFinished 0 is raised to 3');
    const { delivery } = await waitFor('the report', async () => deliveryIn(rec), { timeoutMs: 60_000 });
    await waitGone(ns, 'h5');
    rec.stop();
    const got = await stack.vl.countWithDistinct(stack.filter(ns), '_msg');
    tally.push({ scenario: 'H5. TTL 0 from the user', written: 100, received: got.total, duplicated: got.total - got.distinct, annotation: JSON.stringify(delivery), event: `TTL ${res.data.spec?.ttlSecondsAfterFinished}, warning: ${warnings.join(' ').slice(0, 60)}…` });
    expect(delivery).toMatchObject({ shipped: 100, lost: 0 });
    expect(got).toEqual({ total: 100, distinct: 100 });
  }, 120_000);

  it('H7. a sink behind basic auth: the harvester sends with the approved destination\'s own credentials, the server down past the drain then back, every line arrives', async () => {
    const N1 = 300;
    const N2 = 200;
    const DRAIN = 3;
    const g = gate('h7');
    const auth = { username: 'logs-writer', password: `pw-${Date.now()}` };
    const secured = await VictoriaLogs.start({ basicAuth: auth });
    // The operator's destination for it, with credentials from files (Secrets in jobharvest's namespace in the chart).
    const dir = mkdtempSync(join(tmpdir(), 'jh-h7-'));
    writeFileSync(join(dir, 'username'), auth.username);
    writeFileSync(join(dir, 'password'), auth.password);
    const destinations = destinationsFile(cluster.info, 'hv-h7', [
      ...Stack.destinations(stack.vl),
      { name: 'secured', sink: 'loki', endpoint: secured.endpoints.loki, allow: ['loopback'], auth: { usernameFile: join(dir, 'username'), passwordFile: join(dir, 'password') } },
    ]);
    await stack.harvester!.stop();
    const withAuth = anotherHarvester([], destinations);
    await leading(withAuth);
    try {
      const ns = await stack.namespace('h7', { drainSeconds: DRAIN });
      // The sidecar's own credentials: a Secret in the Job's namespace.
      await stack.core.createNamespacedSecret({ namespace: ns, body: { metadata: { name: 'vl-creds' }, stringData: auth } });
      const rec = recordJob(ns, 'h7');
      const job = shellJob('h7', { terminationGracePeriodSeconds: DRAIN + 5, script: `${numberedLines('h7', N1)}; while [ ! -e "$GATE" ]; do sleep 0.05; done; ${numberedLines('h7', N2, N1 + 1)}`, env: [{ name: 'GATE', value: g.path }] });
      job.metadata = { name: 'h7', annotations: { 'jobharvest.io/endpoint': secured.endpoints.loki, 'jobharvest.io/auth-secret': 'vl-creds' } };
      await stack.batch.createNamespacedJob({ namespace: ns, body: job });
      const filter = stack.filter(ns);
      await waitFor(`${N1} lines at the secured server`, async () => ((await secured.count(filter)) >= N1 ? true : undefined), { timeoutMs: 60_000 });
      await secured.stop();
      g.open();
      await held(ns, 'h7');
      await new Promise((r) => setTimeout(r, 3000));
      await secured.start();
      const { delivery } = await waitFor('the release', async () => deliveryIn(rec), { timeoutMs: 90_000 });
      expect(delivery).toEqual({ sink: 'loki', pods: 1, shipped: N1 + N2, lost: 0, unaccounted: 0, harvested: N2 });
      await waitGone(ns, 'h7');
      rec.stop();
      const got = await secured.countWithDistinct(filter, '_msg');
      tally.push({ scenario: 'H7. basic auth, server down past the drain then back', written: N1 + N2, received: got.total, duplicated: got.total - got.distinct, annotation: JSON.stringify(delivery), event: '' });
      expect(got.distinct).toBe(N1 + N2);
    } finally {
      g.dispose();
      await secured.dispose();
      rmSync(dir, { recursive: true, force: true });
      await withAuth.stop();
      const next = anotherHarvester([]);
      (stack as { harvester: HarvesterProcess | undefined }).harvester = next;
      await leading(next);
    }
  }, 240_000);

  it('H6. the leader frozen (SIGSTOP) mid-harvest: the other replica takes over within the Lease, and the frozen one, woken, sends nothing more', async () => {
    const N1 = 300;
    const N2 = 200;
    const DRAIN = 3;
    const g = gate('h6');
    const first = stack.harvester!;
    const second = anotherHarvester([]);
    // While VictoriaLogs is down, this stands on its port, answers 503 and counts each replica's requests.
    const byAgent = new Map<string, number>();
    const standIn = createServer((req, res) => {
      const agent = String(req.headers['user-agent'] ?? '');
      byAgent.set(agent, (byAgent.get(agent) ?? 0) + 1);
      req.resume();
      req.on('end', () => res.writeHead(503).end());
    });
    const identityOf = (log: string) => /"msg":"harvester starting"[^\n]*"identity":"([^"]+)"/.exec(readFileSync(log, 'utf8'))?.[1];
    let stoppedPid: number | undefined;
    try {
      const ns = await stack.namespace('h6', { drainSeconds: DRAIN });
      const rec = recordJob(ns, 'h6');
      await stack.batch.createNamespacedJob({
        namespace: ns,
        body: shellJob('h6', { terminationGracePeriodSeconds: DRAIN + 5, script: `${numberedLines('h6', N1)}; while [ ! -e "$GATE" ]; do sleep 0.05; done; ${numberedLines('h6', N2, N1 + 1)}`, env: [{ name: 'GATE', value: g.path }] }),
      });
      const filter = stack.filter(ns);
      await waitFor(`${N1} lines at the server`, async () => ((await stack.vl.count(filter)) >= N1 ? true : undefined), { timeoutMs: 60_000 });
      await stack.vl.stop();
      await new Promise<void>((r) => standIn.listen(stack.vl.port, '127.0.0.1', r));
      g.open();
      await held(ns, 'h6');
      const firstAgent = `jobharvest-harvester (${identityOf(first.logPath)})`;
      await waitFor('the leader sending its harvest', async () => ((byAgent.get(firstAgent) ?? 0) > 0 ? true : undefined), { timeoutMs: 30_000 });
      const pid = Number(execFileSync('pgrep', ['-P', String(first.child.pid)], { encoding: 'utf8' }).split('\n').filter(Boolean)[0]);
      process.kill(pid, 'SIGSTOP');
      stoppedPid = pid;
      const frozenAt = Date.now();
      await waitFor('the second replica leading', async () => (readFileSync(second.logPath, 'utf8').includes('started leading') ? true : undefined), { timeoutMs: 30_000 });
      const tookOverMs = Date.now() - frozenAt;
      // Within the Lease duration (3 s), plus one retry period and the test's polling.
      expect(tookOverMs).toBeLessThan(3000 + 2000);
      const secondAgent = `jobharvest-harvester (${identityOf(second.logPath)})`;
      await waitFor('the new leader sending', async () => ((byAgent.get(secondAgent) ?? 0) > 0 ? true : undefined), { timeoutMs: 30_000 });
      const beforeWake = byAgent.get(firstAgent) ?? 0;
      process.kill(pid, 'SIGCONT');
      stoppedPid = undefined;
      // Its retries were due while it was frozen; none may go out now.
      await new Promise((r) => setTimeout(r, 5000));
      const afterWake = (byAgent.get(firstAgent) ?? 0) - beforeWake;
      expect(afterWake).toBe(0);
      expect(readFileSync(first.logPath, 'utf8')).toMatch(/"msg":"stopped leading"/);
      await new Promise((r) => standIn.close(r));
      standIn.closeAllConnections();
      await stack.vl.start();
      const { delivery } = await waitFor('the release', async () => deliveryIn(rec), { timeoutMs: 90_000 });
      expect(delivery).toEqual({ sink: 'loki', pods: 1, shipped: N1 + N2, lost: 0, unaccounted: 0, harvested: N2 });
      await waitGone(ns, 'h6');
      rec.stop();
      const got = await stack.vl.countWithDistinct(filter, '_msg');
      tally.push({ scenario: `H6. leader SIGSTOPped mid-harvest, takeover after ${(tookOverMs / 1000).toFixed(1)} s; requests from it after SIGCONT: ${afterWake}`, written: N1 + N2, received: got.total, duplicated: got.total - got.distinct, annotation: JSON.stringify(delivery), event: '' });
      expect(got.distinct).toBe(N1 + N2);
    } finally {
      g.dispose();
      if (stoppedPid) process.kill(stoppedPid, 'SIGCONT');
      if (standIn.listening) {
        standIn.closeAllConnections();
        await new Promise((r) => standIn.close(r));
      }
      if (!stack.vl.running) await stack.vl.start();
      await first.stop();
      // The second replica is the stack's harvester from here on.
      (stack as { harvester: HarvesterProcess | undefined }).harvester = second;
    }
  }, 240_000);

  // Last: it kills the stack's harvester.
  it('H4. two harvester replicas: the leader killed mid-harvest, the other takes over, nothing lost', async () => {
    const N1 = 300;
    const N2 = 200;
    const DRAIN = 3;
    const g = gate('h4');
    const first = stack.harvester!;
    const second = anotherHarvester([]);
    try {
      const ns = await stack.namespace('h4', { drainSeconds: DRAIN });
      const rec = recordJob(ns, 'h4');
      await stack.batch.createNamespacedJob({
        namespace: ns,
        body: shellJob('h4', { terminationGracePeriodSeconds: DRAIN + 5, script: `${numberedLines('h4', N1)}; while [ ! -e "$GATE" ]; do sleep 0.05; done; ${numberedLines('h4', N2, N1 + 1)}`, env: [{ name: 'GATE', value: g.path }] }),
      });
      const filter = stack.filter(ns);
      await waitFor(`${N1} lines at the server`, async () => ((await stack.vl.count(filter)) >= N1 ? true : undefined), { timeoutMs: 60_000 });
      await stack.vl.stop();
      g.open();
      await held(ns, 'h4');
      // The leader (the stack's harvester) is harvesting: its ship pass retries against the stopped server.
      await waitFor('the leader harvesting', async () => (/"msg":"holding the Job[^\n]*"job":"h4"/.test(readFileSync(first.logPath, 'utf8')) && readFileSync(first.logPath, 'utf8').includes('"msg":"sidecar started"') ? true : undefined), { timeoutMs: 30_000 });
      // tsx runs the harvester in a child process: kill that one, then tsx.
      for (const pid of execFileSync('pgrep', ['-P', String(first.child.pid)], { encoding: 'utf8' }).split('\n').filter(Boolean)) process.kill(Number(pid), 'SIGKILL');
      first.child.kill('SIGKILL');
      const killedAt = Date.now();
      await waitFor('the second replica leading', async () => (readFileSync(second.logPath, 'utf8').includes('started leading') ? true : undefined), { timeoutMs: 30_000 });
      const tookOverMs = Date.now() - killedAt;
      await stack.vl.start();
      const { job: released, delivery } = await waitFor('the release', async () => deliveryIn(rec), { timeoutMs: 90_000 });
      expect(delivery).toEqual({ sink: 'loki', pods: 1, shipped: N1 + N2, lost: 0, unaccounted: 0, harvested: N2 });
      expect(released.spec?.ttlSecondsAfterFinished).toBe(3);
      const events = await waitFor('the Event', async () => ((await eventsOf(ns, released)).length > 0 ? eventsOf(ns, released) : undefined));
      expect(events.map((e) => [e.type, e.reason])).toEqual([['Normal', 'LogsShipped']]);
      await waitGone(ns, 'h4');
      rec.stop();
      const got = await stack.vl.countWithDistinct(filter, '_msg');
      tally.push({ scenario: `H4. leader SIGKILLed mid-harvest, takeover after ${(tookOverMs / 1000).toFixed(1)} s`, written: N1 + N2, received: got.total, duplicated: got.total - got.distinct, annotation: JSON.stringify(delivery), event: `${events[0]!.reason}: ${events[0]!.message}` });
      expect(got.distinct).toBe(N1 + N2);
    } finally {
      g.dispose();
      if (!stack.vl.running) await stack.vl.start();
      await second.stop();
    }
  }, 240_000);
});
