/**
 * Jobs that missed injection, on the real control plane with the test kubelet,
 * the webhook and the harvester as processes of their own, and VictoriaLogs:
 * the webhook is stopped (its configuration stays, with failurePolicy Ignore,
 * so the API server admits Jobs unpatched), 20 Jobs are created in an
 * opted-in namespace, and the webhook is started again. The harvester must
 * name every one of them missed (an InjectionMissed Event, a record saying
 * so, its metric), hold those with a TTL of their own as it holds an injected
 * Job and put that TTL back, give none to those without, and ship every line
 * of their pods through pods/log; each record's count is checked against the
 * lines that arrived.
 */
import { Watch, type V1Job } from '@kubernetes/client-node';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HOLD_ANNOTATION } from '../../harvester/hold.ts';
import { DELIVERY_ANNOTATION, type DeliveryRecord } from '../../harvester/report.ts';
import { INJECTED_LABEL, STATUS_ANNOTATION } from '../../src/contract/harvest.ts';
import { useCluster, waitFor } from '../harness/cluster/client.ts';
import { numberedLines, shellJob, Stack } from '../harness/kubelet/stack.ts';
import { exact } from '../harness/servers/victorialogs.ts';
import { freePort } from '../support/ports.ts';
import { startWebhook, type WebhookProcess } from '../support/webhook-process.ts';

const cluster = useCluster();
const NAME = 'mi';
/** Lines each Job writes. */
const LINES = 100;
/** The users' own TTL on the Jobs that have one: long enough that the harvester sees them finished before it runs out. */
const USER_TTL = 30;
let stack: Stack;
let metricsPort: number;
let restarted: WebhookProcess | undefined;
const gateDir = mkdtempSync(join(tmpdir(), 'jh-missed-'));

beforeAll(async () => {
  metricsPort = await freePort();
  stack = await Stack.start({ info: cluster.info, name: NAME, harvesterArgs: ['--metrics-port', String(metricsPort)] });
}, 240_000);

afterAll(async () => {
  await restarted?.stop();
  await stack?.stop();
  rmSync(gateDir, { recursive: true, force: true });
}, 120_000);

/** Every version of every Job of a namespace, as the watch delivers them: a Job whose restored TTL is past due goes within milliseconds of its record. */
function recordJobs(ns: string): { versions: Map<string, Array<{ type: string; job: V1Job }>>; stop(): void } {
  const versions = new Map<string, Array<{ type: string; job: V1Job }>>();
  let req: { abort(): void } | undefined;
  void new Watch(cluster.kc)
    .watch(`/apis/batch/v1/namespaces/${ns}/jobs`, {}, (type, job: V1Job) => {
      const name = job.metadata!.name!;
      versions.set(name, [...(versions.get(name) ?? []), { type, job }]);
    }, () => {})
    .then((r) => (req = r));
  return { versions, stop: () => req?.abort() };
}

/** The record without its signature, which must be there. */
function unsigned(raw: string): DeliveryRecord {
  const { sig, ...d } = JSON.parse(raw) as DeliveryRecord & { sig?: string };
  expect(sig).toMatch(/^v2\.[A-Za-z0-9_-]{8}\./);
  return d;
}

async function metric(name: string): Promise<number | undefined> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.split(' ')[1]);
}

describe('Jobs that missed injection', () => {
  it('M1. the webhook stopped while 20 Jobs are created in an opted-in namespace, then started: all 20 named missed, every line shipped, each record counts its lines', async () => {
    const started = Date.now();
    const ns = await stack.namespace('m1');
    const jobs = recordJobs(ns);
    const gate = join(gateDir, 'open');
    // The webhook goes; its configuration stays, pointing at a closed port, and failurePolicy Ignore lets Jobs through unpatched.
    await stack.webhook.stop();
    // 8 finish at once and have no TTL; 6 finish at once with a TTL of the user's; 6 still run when the webhook is back, with a TTL.
    const kinds: Array<{ name: string; ttl: number | undefined; waits: boolean }> = [];
    for (let i = 0; i < 20; i++) kinds.push({ name: `m1-${String(i).padStart(2, '0')}`, ttl: i < 8 ? undefined : USER_TTL, waits: i >= 14 });
    for (const k of kinds) {
      const body = shellJob(k.name, {
        script: k.waits ? `while [ ! -e "$GATE" ]; do sleep 0.1; done; ${numberedLines(k.name, LINES)}` : numberedLines(k.name, LINES),
        env: [{ name: 'GATE', value: gate }],
      });
      if (k.ttl !== undefined) body.spec!.ttlSecondsAfterFinished = k.ttl;
      const created = await stack.batch.createNamespacedJob({ namespace: ns, body });
      // Admitted as written: no sidecar, no label, no status.
      expect(created.spec!.template.spec!.initContainers ?? []).toEqual([]);
      expect(created.metadata?.labels?.[INJECTED_LABEL]).toBeUndefined();
      expect(created.metadata?.annotations?.[STATUS_ANNOTATION]).toBeUndefined();
      expect(created.spec!.ttlSecondsAfterFinished).toBe(k.ttl);
    }
    // The webhook back, at a new address: it registers its configuration again.
    restarted = await startWebhook(cluster.info, { name: `jobharvest-${NAME}`, args: [...Stack.webhookArgs({ name: NAME }), '--signing-key-file', stack.harvesterFiles.signingKeyFile] });
    writeFileSync(gate, '');

    const records = await waitFor(
      'the 20 delivery records',
      async () => {
        const found = new Map<string, { delivery: DeliveryRecord; job: V1Job }>();
        for (const [name, vs] of jobs.versions) {
          const v = vs.find((x) => x.type !== 'DELETED' && x.job.metadata?.annotations?.[DELIVERY_ANNOTATION]);
          if (v) found.set(name, { delivery: unsigned(v.job.metadata!.annotations![DELIVERY_ANNOTATION]!), job: v.job });
        }
        return found.size === kinds.length ? found : undefined;
      },
      { timeoutMs: 180_000, intervalMs: 500 },
    );
    jobs.stop();

    for (const k of kinds) {
      const { delivery, job } = records.get(k.name)!;
      const { usage, ...counts } = delivery;
      expect(counts, k.name).toEqual({ sink: 'loki', pods: 1, shipped: LINES, lost: 0, unaccounted: 0, harvested: LINES, injection: 'missed' });
      // A missed Job's pods are measured as an injected Job's are.
      expect(usage?.pods, `${k.name}: the pod's requests and run time recorded`).toBe(1);
      const versions = jobs.versions.get(k.name)!.filter((v) => v.type !== 'DELETED').map((v) => v.job);
      if (k.ttl === undefined) {
        // No TTL of the harvester's own, ever.
        expect(versions.every((j) => j.spec?.ttlSecondsAfterFinished === undefined && !j.metadata?.annotations?.[HOLD_ANNOTATION]), k.name).toBe(true);
      } else {
        // Held as an injected Job is (the user's TTL raised and recorded), then given back in the write that records.
        const held = versions.find((j) => j.metadata?.annotations?.[HOLD_ANNOTATION]);
        expect(held, `${k.name} held`).toBeDefined();
        expect(JSON.parse(held!.metadata!.annotations![HOLD_ANNOTATION]!)).toMatchObject({ originalTtl: k.ttl });
        expect(held!.spec!.ttlSecondsAfterFinished).toBeGreaterThanOrEqual(86_400);
        expect(job.spec!.ttlSecondsAfterFinished, k.name).toBe(k.ttl);
        expect(job.metadata?.annotations?.[HOLD_ANNOTATION]).toBeUndefined();
      }
    }

    // Every line, once, at the log server; and per Job exactly what its record says.
    const all = await stack.vl.countWithDistinct(stack.filter(ns), '_msg');
    expect(all).toEqual({ total: kinds.length * LINES, distinct: kinds.length * LINES });
    for (const k of kinds) expect(await stack.vl.count(`${stack.filter(ns)} ${exact('job', k.name)}`), k.name).toBe(records.get(k.name)!.delivery.shipped);

    // Named: one InjectionMissed Event on each, from the harvester.
    const events = await waitFor('the 20 InjectionMissed Events', async () => {
      const list = (await stack.core.listNamespacedEvent({ namespace: ns, fieldSelector: 'reason=InjectionMissed' })).items.filter((e) => e.source?.component === 'jobharvest');
      return list.length >= kinds.length ? list : undefined;
    });
    expect(events.map((e) => e.involvedObject.name).sort()).toEqual(kinds.map((k) => k.name));
    for (const e of events) {
      expect(e.type).toBe('Warning');
      expect(e.message).toBe(`created without the log sidecar (the webhook was unreachable or not yet installed); ${LINES} lines from 1 pod shipped to loki by the harvester`);
      expect(e.involvedObject.uid).toBe(records.get(e.involvedObject.name!)!.job.metadata!.uid);
    }
    expect(await metric('jobharvest_harvester_injection_missed_total')).toBe(kinds.length);

    // With the webhook back, a new Job is injected and reported as usual, not missed.
    const after = await stack.namespace('m1-after', { ttlSeconds: 60 });
    await stack.batch.createNamespacedJob({ namespace: after, body: shellJob('after', { script: numberedLines('after', LINES) }) });
    const injected = await waitFor('the injected Job recorded', async () => {
      const j = await stack.batch.readNamespacedJob({ name: 'after', namespace: after }).catch(() => undefined);
      const raw = j?.metadata?.annotations?.[DELIVERY_ANNOTATION];
      return raw ? unsigned(raw) : undefined;
    }, { timeoutMs: 60_000 });
    const { usage: injectedUsage, ...injectedCounts } = injected;
    expect(injectedCounts).toEqual({ sink: 'loki', pods: 1, shipped: LINES, lost: 0, unaccounted: 0 });
    expect(injectedUsage?.pods, "the injected Job's pod's requests and run time recorded").toBe(1);
    expect(await metric('jobharvest_harvester_injection_missed_total')).toBe(kinds.length);
    console.log(`M1: 20 missed Jobs created, named and shipped (${kinds.length * LINES} lines) in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  }, 300_000);
});
