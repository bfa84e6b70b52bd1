/**
 * A namespace per CI run (issue 41, part 2), on the real control plane: 200
 * namespaces, each created with one injected Job and then deleted. The
 * harvester runs as its own program on the chart's RBAC alone (its rendered
 * ServiceAccount, ClusterRole and Lease Role, a TokenRequest token), reading
 * pods only through the log-reader RoleBinding the webhook keeps in each
 * opted-in namespace, so a deleted namespace takes the harvester's right to
 * list its pods with it, as on a real cluster.
 *
 * Most Jobs stay pending (their namespaces are not the test kubelet's); a few
 * run on the test kubelet, get their delivery record and are deleted by their
 * TTL before their namespace is. The harvester's own metrics
 * (--metrics-port) say how many namespaces it watches, how many list calls it
 * made, and its resident memory.
 */
import { type V1Job } from '@kubernetes/client-node';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DELIVERY_ANNOTATION } from '../../src/contract/harvest.ts';
import { one, render, type K8sObject } from '../harness/chart/helm.ts';
import { useCluster, waitFor } from '../harness/cluster/client.ts';
import { writeKubeconfig } from '../harness/cluster/kubeconfig.ts';
import { shellJob, Stack, WEBHOOK_NAMESPACE } from '../harness/kubelet/stack.ts';
import { startHarvester, type HarvesterProcess } from '../support/harvester-process.ts';
import { freePort } from '../support/ports.ts';

const cluster = useCluster();
const NAMESPACES = 200;
/** Of them, run to completion on the test kubelet (the rest stay pending: no node takes their pods). */
const RUN = 10;
/** Rounds of NAMESPACES (HARVESTER_NS_ROUNDS): the second shows what the first left behind. */
const ROUNDS = Number(process.env.HARVESTER_NS_ROUNDS ?? 2);
/** Namespaces created (or deleted) at once. */
const BATCH = 20;
/** After the last namespace is gone: longer than the 30 s + 10 s cycle in which each deleted namespace's watch used to end and list again. */
const QUIET_MS = 60_000;
/**
 * The harvester's resident memory (under tsx, as the e2e tests run it: about
 * 180 MiB idle) at the end may exceed its figure at the start, idle and just
 * leading, by at most RSS_SLACK_MIB: V8's heap and the allocator grow to a
 * high-water mark in the first bursts and keep it. The second round may add at
 * most RSS_ROUND_SLACK_MIB to the first: memory does not grow with the
 * namespaces ever made (four rounds: +64, +22, +5, +1 MiB).
 */
const RSS_SLACK_MIB = 120;
const RSS_ROUND_SLACK_MIB = 40;

const RELEASE = 'hn';
const NAME = `${RELEASE}-jobharvest`;
const tag = Date.now().toString(36);
let stack: Stack;
let harvester: HarvesterProcess | undefined;
let metricsPort = 0;
const cleanup: Array<() => Promise<unknown>> = [];

type Metrics = Map<string, number>;

async function metrics(): Promise<Metrics> {
  const res = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
  const text = await res.text();
  const m = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    m.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return m;
}

const watches = (m: Metrics) => m.get('jobharvest_harvester_pod_watches') ?? NaN;
const podLists = (m: Metrics) => m.get('jobharvest_harvester_list_requests_total{resource="pods"}') ?? NaN;
const rssMiB = (m: Metrics) => (m.get('process_resident_memory_bytes') ?? NaN) / 1024 / 1024;

/** The harvester's log lines (JSON) at warn or above. */
function warnings(): Array<{ level: string; msg: string; namespace?: string; error?: string }> {
  return readFileSync(harvester!.logPath, 'utf8')
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { level: string; msg: string; namespace?: string })
    .filter((l) => l.level === 'warn' || l.level === 'error');
}

async function inBatches<T>(items: readonly T[], f: (x: T) => Promise<unknown>): Promise<void> {
  for (let i = 0; i < items.length; i += BATCH) await Promise.all(items.slice(i, i + BATCH).map(f));
}

beforeAll(async () => {
  // The chart's harvester identity and rights, as rendered.
  const objects = await render(cluster.info.helmPath, { release: RELEASE, namespace: WEBHOOK_NAMESPACE, values: {} });
  const sa = one<{ spec: { template: { spec: { serviceAccountName: string } } } }>(objects, 'Deployment', `${NAME}-harvester`).spec.template.spec.serviceAccountName;
  stack = await Stack.start({ info: cluster.info, name: RELEASE, harvesterArgs: false, webhookArgs: ['--harvester-service-account', sa] });
  const rbac = objects.filter((o: K8sObject) => ['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding'].includes(o.kind) && (o.metadata.name === `${NAME}-harvester` || o.metadata.name === sa));
  expect(rbac.map((o) => o.kind).sort()).toEqual(['ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding', 'ServiceAccount']);
  for (const o of rbac) {
    await cluster.objects.create(o);
    cleanup.push(() => cluster.objects.delete(o));
  }
  const token = await cluster.core.createNamespacedServiceAccountToken({ name: sa, namespace: WEBHOOK_NAMESPACE, body: { spec: { audiences: [], expirationSeconds: 3600 } } });
  const kubeconfig = join(cluster.info.logsDir, `harvester-${NAME}-${tag}.kubeconfig`);
  await writeKubeconfig(kubeconfig, { server: cluster.info.server, caPem: cluster.info.caPem, user: `system:serviceaccount:${WEBHOOK_NAMESPACE}:${sa}`, token: token.status!.token! });
  metricsPort = await freePort();
  // Its Lease is the one the chart's Role names: <fullname>-harvester.
  harvester = startHarvester(cluster.info, { name: NAME, ...stack.harvesterFiles, kubeconfig, args: ['--metrics-port', String(metricsPort)] });
  await waitFor('the harvester leading', async () => (readFileSync(harvester!.logPath, 'utf8').includes('"msg":"started leading"') ? true : undefined), { timeoutMs: 60_000 });
}, 300_000);

afterAll(async () => {
  await harvester?.stop();
  await stack?.stop();
  for (const undo of cleanup.reverse()) await undo().catch(() => undefined);
}, 180_000);

describe('a namespace per CI run', () => {
  it(`${NAMESPACES} namespaces, one injected Job each, then deleted, in ${ROUNDS} rounds: the harvester watches none of them afterwards, warns about none, and its memory is back`, async () => {
    // Settled and idle: its figures at the start.
    await new Promise((r) => setTimeout(r, 3000));
    const start = await metrics();
    expect(watches(start)).toBe(0);
    const warnedBefore = warnings().length;

    const t0 = Date.now();
    let peak = 0;
    let phase = 'start';
    const timeline: string[] = [];
    let lastLine = 0;
    const mib = (m: Metrics, k: string) => ((m.get(k) ?? NaN) / 1024 / 1024).toFixed(0);
    const sampler = setInterval(
      () =>
        void metrics().then((m) => {
          peak = Math.max(peak, watches(m));
          if (Date.now() - lastLine < 5000) return;
          lastLine = Date.now();
          timeline.push(`${((Date.now() - t0) / 1000).toFixed(0)} s ${phase}: watched ${watches(m)}, RSS ${rssMiB(m).toFixed(0)} MiB (V8 heap ${mib(m, 'nodejs_heap_size_used_bytes')} used of ${mib(m, 'nodejs_heap_size_total_bytes')}, external ${mib(m, 'nodejs_external_memory_bytes')})`);
        }, () => undefined),
      1000,
    );
    const all: string[] = [];
    const rounds: string[] = [];
    const afterRound: Metrics[] = [];
    try {
      for (let round = 1; round <= ROUNDS; round++) {
        phase = `round ${round}: create`;
        peak = 0;
        const names = Array.from({ length: NAMESPACES }, (_, i) => (i < RUN ? `${RELEASE}-ci${round}-${i}-${tag}` : `ci${round}-${RELEASE}-${i}-${tag}`));
        all.push(...names);
        const created = Date.now();
        await inBatches(names, async (name) => {
          await cluster.core.createNamespace({
            body: {
              metadata: {
                name,
                annotations: {
                  'jobharvest.io/inject': 'enabled',
                  'jobharvest.io/sink': 'loki',
                  'jobharvest.io/endpoint': stack.vl.endpoints.loki,
                  'jobharvest.io/ttl-seconds-after-finished': '3',
                  'jobharvest.io/drain-seconds': '10',
                },
              },
            },
          });
          const job = await cluster.batch.createNamespacedJob({ namespace: name, body: shellJob('build', { script: 'echo "ci run"' }) });
          expect(job.spec?.template.spec?.initContainers?.some((c) => c.name === 'jobharvest' && c.restartPolicy === 'Always'), `${name}: injected`).toBe(true);
        });
        const createdMs = Date.now() - created;

        // The run ones are recorded, then deleted by their TTL: the harvester lets their namespaces go while they still exist.
        await waitFor(
          'the delivery records of the Jobs that ran',
          async () => {
            const jobs = await Promise.all(names.slice(0, RUN).map((ns) => cluster.batch.readNamespacedJob({ name: 'build', namespace: ns }).then((j: V1Job) => j, () => undefined)));
            return jobs.every((j) => j === undefined || j.metadata?.annotations?.[DELIVERY_ANNOTATION]) ? true : undefined;
          },
          { timeoutMs: 120_000, intervalMs: 500 },
        );
        const pending = await waitFor('the watches of the pending Jobs only', async () => {
          const m = await metrics();
          return watches(m) === NAMESPACES - RUN ? m : undefined;
        }, { timeoutMs: 30_000 });
        expect(peak).toBeGreaterThanOrEqual(NAMESPACES - RUN);
        expect(peak).toBeLessThanOrEqual(NAMESPACES);

        phase = `round ${round}: delete`;
        const deleting = Date.now();
        await inBatches(names, (name) => cluster.core.deleteNamespace({ name }));
        await waitFor('no namespace watched', async () => (watches(await metrics()) === 0 ? true : undefined), { timeoutMs: 120_000, intervalMs: 250 });
        const unwatchedMs = Date.now() - deleting;
        await waitFor(
          'every namespace gone',
          async () => {
            const left = await Promise.all(names.map((name) => cluster.core.readNamespace({ name }).then(() => 1, () => 0)));
            return left.every((x) => x === 0) ? true : undefined;
          },
          { timeoutMs: 240_000, intervalMs: 1000 },
        );
        const goneMs = Date.now() - deleting;
        phase = `round ${round}: gone`;
        await new Promise((r) => setTimeout(r, 5000));
        const after = await metrics();
        afterRound.push(after);
        rounds.push(
          `round ${round}: ${NAMESPACES} namespaces (${RUN} run to completion) created in ${(createdMs / 1000).toFixed(1)} s; watched at most ${peak}, ${watches(pending)} once the run Jobs were recorded; ` +
            `deleted: 0 watched after ${(unwatchedMs / 1000).toFixed(1)} s, all gone after ${(goneMs / 1000).toFixed(1)} s; RSS ${rssMiB(pending).toFixed(1)} MiB with ${watches(pending)} watched, ${rssMiB(after).toFixed(1)} MiB 5 s after they were gone`,
        );
      }

      phase = 'quiet';
      const atGone = afterRound[ROUNDS - 1]!;
      await new Promise((r) => setTimeout(r, QUIET_MS));
      const end = await metrics();
      const listsAfter = podLists(end) - podLists(atGone);
      const nsWarnings = warnings()
        .slice(warnedBefore)
        .filter((w) => all.some((n) => JSON.stringify(w).includes(n)));
      console.log(
        `harvester, a namespace per CI run:\n  ${rounds.join('\n  ')}\n  ` +
          `pod list calls ${podLists(end)} in all, ${listsAfter} in the ${QUIET_MS / 1000} s after; watched ${watches(end)}; warnings about the ${all.length} namespaces ${nsWarnings.length}; ` +
          `RSS ${rssMiB(start).toFixed(1)} MiB at the start, ${afterRound.map((m, i) => `${rssMiB(m).toFixed(1)} after round ${i + 1}`).join(', ')}, ${rssMiB(end).toFixed(1)} at the end`,
      );
      console.log(`harvester memory over the run:\n  ${timeline.join('\n  ')}`);
      expect(watches(end)).toBe(0);
      expect(end.get('jobharvest_harvester_tracked_jobs')).toBe(0);
      expect(listsAfter, 'no list calls for namespaces that are gone').toBe(0);
      expect(nsWarnings).toEqual([]);
      // The second 200 leave nothing behind: memory does not grow with the namespaces ever made.
      expect(rssMiB(end) - rssMiB(afterRound[0]!)).toBeLessThanOrEqual(RSS_ROUND_SLACK_MIB);
      expect(rssMiB(end) - rssMiB(start)).toBeLessThanOrEqual(RSS_SLACK_MIB);
    } finally {
      clearInterval(sampler);
    }
  }, 600_000);
});
