/**
 * Rotating the signing key, on the real control plane with the test kubelet,
 * VictoriaLogs, and the webhook and the harvester as their own processes,
 * step by step as docs/operations.md tells an operator:
 *
 * 1. Jobs admitted under key A finish while the log server is down; the
 *    harvester (key A) holds them.
 * 2. Rotation: the webhook restarts with key B; the harvester restarts with
 *    B, and A as a previous key (verification only).
 * 3. New Jobs are signed with B. The log server comes back: the A-Jobs held
 *    under A are shipped and released, their delivery records signed with B.
 * 4. A is dropped (the harvester restarts with B alone): a Job admitted
 *    under A that finishes now is reported as signed with a key the
 *    harvester does not hold, neither held nor shipped; a Job recorded
 *    under A keeps its record.
 */
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Watch, type V1Job } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DELIVERY_ANNOTATION, HOLD_ANNOTATION } from '../../src/contract/harvest.ts';
import { keyFromText, keyId, SIGNATURE_ANNOTATION, type SigningKey } from '../../src/contract/signature.ts';
import { deliveryRecordOf } from '../../harvester/hold.ts';
import type { DeliveryRecord } from '../../harvester/report.ts';
import { useCluster, waitFor } from '../harness/cluster/client.ts';
import { numberedLines, shellJob, Stack } from '../harness/kubelet/stack.ts';
import { signingKeyFile, startHarvester, type HarvesterProcess } from '../support/harvester-process.ts';
import { startWebhook, type WebhookProcess } from '../support/webhook-process.ts';

const cluster = useCluster();
const NAME = 'kr';
let stack: Stack;
/** Processes this file starts besides the stack's own webhook. */
const started: Array<HarvesterProcess | WebhookProcess> = [];
const rows: string[] = [];

beforeAll(async () => {
  // The harvesters are this file's: each step of the rotation starts its own.
  stack = await Stack.start({ info: cluster.info, name: NAME, kubelet: { restartBackoffMs: 300 }, harvesterArgs: false });
}, 240_000);

afterAll(async () => {
  console.log('key rotation: step / Job / key id of its signature / delivery record (key id of its sig)');
  for (const r of rows) console.log(`  ${r}`);
  for (const p of started.reverse()) await p.stop();
  await stack?.stop();
}, 120_000);

const keyOf = (file: string): SigningKey => keyFromText(readFileSync(file));
const sigKeyId = (sig: string | undefined): string | undefined => sig?.split('.')[1];

function harvester(signing: string, previous: string[] = []): HarvesterProcess {
  const h = startHarvester(cluster.info, {
    name: `jobharvest-${NAME}`,
    signingKeyFile: signing,
    destinationsFile: stack.harvesterFiles.destinationsFile,
    args: ['--lease-seconds', '3', ...previous.flatMap((f) => ['--previous-signing-key-file', f])],
  });
  started.push(h);
  return h;
}

async function leading(h: HarvesterProcess): Promise<void> {
  await waitFor('the harvester leading', async () => (readFileSync(h.logPath, 'utf8').includes('"msg":"started leading"') ? true : undefined), { timeoutMs: 60_000 });
}

async function readJob(ns: string, name: string): Promise<V1Job> {
  return stack.batch.readNamespacedJob({ name, namespace: ns });
}

async function held(ns: string, name: string): Promise<V1Job> {
  return waitFor(`${ns}/${name} held`, async () => {
    const job = await readJob(ns, name);
    return job.metadata?.annotations?.[HOLD_ANNOTATION] ? job : undefined;
  }, { timeoutMs: 60_000, intervalMs: 100 });
}

/**
 * The record's counts: its cost fields (`usage`) are checked here, that every
 * pod the record counts was measured, and left out of what is compared.
 */
function withoutUsage(delivery: DeliveryRecord): DeliveryRecord {
  const { usage, ...counts } = delivery;
  expect(usage?.pods, "every pod's requests and run time recorded").toBe(counts.pods);
  return counts;
}

/** The Job once it carries a delivery record; the record is read back with `key` only. */
async function recorded(ns: string, name: string, key: SigningKey): Promise<{ job: V1Job; delivery: DeliveryRecord; sig: string }> {
  return waitFor(
    `the delivery record on ${ns}/${name}`,
    async () => {
      const job = await readJob(ns, name);
      const raw = job.metadata?.annotations?.[DELIVERY_ANNOTATION];
      if (!raw) return undefined;
      const delivery = deliveryRecordOf(job, key);
      // A record there that this key does not verify is a failure, not something to wait out.
      expect(delivery, `the record on ${name} verifies with the current key: ${raw}`).toBeDefined();
      return { job, delivery: withoutUsage(delivery!), sig: (JSON.parse(raw) as { sig: string }).sig };
    },
    { timeoutMs: 90_000, intervalMs: 100 },
  );
}

/**
 * Every version of a namespace's Jobs as the API server's watch delivers them:
 * a release that restores a TTL already past due is followed by the deletion
 * within moments, too fast for polling.
 */
function recordJobs(ns: string): { versions: Array<{ type: string; job: V1Job }>; stop(): void } {
  const versions: Array<{ type: string; job: V1Job }> = [];
  let req: { abort(): void } | undefined;
  void new Watch(cluster.kc).watch(`/apis/batch/v1/namespaces/${ns}/jobs`, {}, (type, job: V1Job) => versions.push({ type, job }), () => {}).then((r) => (req = r));
  return { versions, stop: () => req?.abort() };
}

/** The first version of `name` the watch saw with a delivery record, the record read back with `key` only. */
async function recordedIn(rec: ReturnType<typeof recordJobs>, name: string, key: SigningKey): Promise<{ job: V1Job; delivery: DeliveryRecord; sig: string }> {
  const job = await waitFor(
    `the delivery record on ${name}`,
    async () => rec.versions.find((v) => v.type !== 'DELETED' && v.job.metadata?.name === name && v.job.metadata.annotations?.[DELIVERY_ANNOTATION])?.job,
    { timeoutMs: 90_000, intervalMs: 100 },
  );
  const raw = job.metadata!.annotations![DELIVERY_ANNOTATION]!;
  const delivery = deliveryRecordOf(job, key);
  expect(delivery, `the record on ${name} verifies with the current key: ${raw}`).toBeDefined();
  return { job, delivery: withoutUsage(delivery!), sig: (JSON.parse(raw) as { sig: string }).sig };
}

async function waitGone(ns: string, name: string): Promise<void> {
  await waitFor(`${ns}/${name} deleted`, async () => {
    try {
      await readJob(ns, name);
      return undefined;
    } catch (err) {
      return (err as { code?: number }).code === 404 ? true : undefined;
    }
  }, { timeoutMs: 60_000, intervalMs: 200 });
}

describe('signing key rotation', () => {
  it('R1. Jobs held under key A are shipped and released after the rotation to B; new Jobs are signed with B; once A is dropped, an A-signed Job is reported as signed by a key not held, and not held', async () => {
    const N = 300;
    const DRAIN = 3;
    const fileA = stack.harvesterFiles.signingKeyFile;
    const fileB = signingKeyFile(cluster.info, `${NAME}-b`);
    const [A, B] = [keyOf(fileA), keyOf(fileB)];
    const gate = join(tmpdir(), `jh-gate-kr-${process.pid}-${Date.now()}`);
    try {
      // --- Before the rotation: webhook and harvester on A.
      const hA = harvester(fileA);
      await leading(hA);
      const heldNs = await stack.namespace('held', { drainSeconds: DRAIN });
      // The TTL outlives the test's steps: this Job must still be there when A is dropped.
      const lateNs = await stack.namespace('late', { drainSeconds: DRAIN, ttlSeconds: 600 });
      await stack.batch.createNamespacedJob({
        namespace: lateNs,
        body: shellJob('late', { terminationGracePeriodSeconds: DRAIN + 5, script: `${numberedLines('late', 5)}; while [ ! -e "$GATE" ]; do sleep 0.05; done; ${numberedLines('late', N, 6)}`, env: [{ name: 'GATE', value: gate }] }),
      });
      // Recorded under A while the log server is up: the record must outlive A.
      await stack.batch.createNamespacedJob({ namespace: lateNs, body: shellJob('a0', { script: numberedLines('a0', 5) }) });
      const a0 = await recorded(lateNs, 'a0', A);
      expect(a0.delivery).toEqual({ sink: 'loki', pods: 1, shipped: 5, lost: 0, unaccounted: 0 });
      const a0Record = a0.job.metadata!.annotations![DELIVERY_ANNOTATION]!;
      rows.push(`recorded under A: a0 / ${keyId(A)} / ${JSON.stringify(a0.delivery)} (${sigKeyId(a0.sig)})`);
      // The log server down: the sidecars give up after their drain budget, and the harvester holds their Jobs.
      await stack.vl.stop();
      const names = ['a1', 'a2'];
      for (const name of names) {
        await stack.batch.createNamespacedJob({ namespace: heldNs, body: shellJob(name, { terminationGracePeriodSeconds: DRAIN + 5, script: numberedLines(name, N) }) });
      }
      for (const name of names) {
        const job = await held(heldNs, name);
        expect(sigKeyId(job.metadata?.annotations?.[SIGNATURE_ANNOTATION])).toBe(keyId(A));
        const hold = JSON.parse(job.metadata!.annotations![HOLD_ANNOTATION]!) as { originalTtl: number; sig: string };
        expect(sigKeyId(hold.sig)).toBe(keyId(A));
        expect(hold.originalTtl).toBe(3);
        expect(job.spec!.ttlSecondsAfterFinished!).toBeGreaterThan(86_400);
        rows.push(`held under A: ${name} / ${keyId(A)} / hold ${sigKeyId(hold.sig)}`);
      }
      const late = await readJob(lateNs, 'late');
      expect(sigKeyId(late.metadata?.annotations?.[SIGNATURE_ANNOTATION])).toBe(keyId(A));

      // --- The rotation: the webhook signs with B; the harvester verifies with B and A.
      await stack.webhook.stop();
      const webhookB = await startWebhook(cluster.info, { name: `jobharvest-${NAME}`, args: [...Stack.webhookArgs({ name: NAME }), '--signing-key-file', fileB] });
      started.push(webhookB);
      await hA.stop();
      const hAB = harvester(fileB, [fileA]);
      await leading(hAB);
      expect(readFileSync(hAB.logPath, 'utf8')).toContain(`"signingKeys":"${keyId(B)}; previous keys ${keyId(A)}"`);
      // Still held: nothing was released while the log server is down.
      for (const name of names) expect((await readJob(heldNs, name)).metadata?.annotations?.[HOLD_ANNOTATION]).toBeDefined();

      // New Jobs: signed with B.
      const newNs = await stack.namespace('new', { drainSeconds: DRAIN, ttlSeconds: 600 });
      const heldJobs = recordJobs(heldNs);
      // The watch lists the held Jobs first: once it has, no later version can be missed.
      await waitFor('the watch of the held Jobs', async () => (names.every((n) => heldJobs.versions.some((v) => v.job.metadata?.name === n)) ? true : undefined));
      await stack.vl.start();
      await stack.batch.createNamespacedJob({ namespace: newNs, body: shellJob('b1', { script: numberedLines('b1', N) }) });
      const b1 = await recorded(newNs, 'b1', B);
      expect(sigKeyId(b1.job.metadata?.annotations?.[SIGNATURE_ANNOTATION])).toBe(keyId(B));
      expect(b1.delivery).toEqual({ sink: 'loki', pods: 1, shipped: N, lost: 0, unaccounted: 0 });
      rows.push(`new, under B: b1 / ${keyId(B)} / ${JSON.stringify(b1.delivery)} (${sigKeyId(b1.sig)})`);

      // The A-Jobs held under A: shipped and released, the records signed with B.
      for (const name of names) {
        const r = await recordedIn(heldJobs, name, B);
        expect(sigKeyId(r.sig)).toBe(keyId(B));
        expect(deliveryRecordOf(r.job, A), 'a record is never signed with the previous key').toBeUndefined();
        expect(r.delivery).toEqual({ sink: 'loki', pods: 1, shipped: N, lost: 0, unaccounted: 0, harvested: N });
        expect(r.job.metadata?.annotations?.[HOLD_ANNOTATION]).toBeUndefined();
        expect(r.job.spec?.ttlSecondsAfterFinished).toBe(3);
        rows.push(`held under A, released after the rotation: ${name} / ${keyId(A)} / ${JSON.stringify(r.delivery)} (${sigKeyId(r.sig)})`);
      }
      // Released with their own TTL back: the TTL controller deletes them.
      for (const name of names) await waitGone(heldNs, name);
      heldJobs.stop();
      const got = await stack.vl.countWithDistinct(stack.filter(heldNs), '_msg');
      expect(got.distinct).toBe(names.length * N);

      // --- A dropped: the harvester verifies with B alone.
      await hAB.stop();
      const hB = harvester(fileB);
      await leading(hB);
      // The A-signed Job finishes with its sidecar unable to ship: a trusted one would be held.
      await stack.vl.stop();
      writeFileSync(gate, '');
      const dropped = await recorded(lateNs, 'late', B);
      expect(dropped.delivery).toMatchObject({ sink: 'unknown', pods: 1, shipped: 0, unaccounted: 1 });
      expect(dropped.delivery.notes?.[0]).toContain(`not harvested: the injection was signed with another signing key (key id ${keyId(A)}, this one's is ${keyId(B)})`);
      expect(dropped.job.metadata?.annotations?.[HOLD_ANNOTATION]).toBeUndefined();
      expect(dropped.job.spec?.ttlSecondsAfterFinished).toBe(600);
      expect(readFileSync(hB.logPath, 'utf8')).not.toContain('"msg":"holding the Job');
      // Recorded under A before: left as it was, not reported again.
      expect((await readJob(lateNs, 'a0')).metadata?.annotations?.[DELIVERY_ANNOTATION]).toBe(a0Record);
      expect(readFileSync(hB.logPath, 'utf8')).not.toContain('"job":"a0"');
      rows.push(`A dropped: a0 keeps its record (${sigKeyId(a0.sig)})`);
      rows.push(`A dropped: late / ${keyId(A)} / ${JSON.stringify(dropped.delivery)} (${sigKeyId(dropped.sig)})`);
    } finally {
      rmSync(gate, { force: true });
    }
  }, 300_000);
});
