// `npm run bench:fleet`: jobharvest on a fleet of fake nodes (KWOK, test/
// harness/kwok) on the real control plane, against the same fleet without
// it. A first version: it measures admission, the harvester's memory and
// backlog, the time from a Job's end to its deletion, and the harvester's
// shipping from pods/log; the API request and etcd figures per component
// come next (see the closing lines it prints).
//
// On this machine, as processes: etcd, kube-apiserver, kube-controller-manager
// (test/harness/cluster), KWOK and kube-scheduler (test/harness/kwok),
// VictoriaLogs, two webhook replicas behind a TCP round-robin in this process
// (the API server calls one URL, as it calls one Service), and one harvester,
// all from the built bundles (`npm run build`) as the image runs them.
//
// Arms, interleaved: `none` creates its Jobs in namespaces labelled
// jobharvest.io/inject=disabled, which the webhook configuration's
// namespaceSelector leaves out (the API server calls no webhook); `jobharvest`
// in opted-in namespaces. For each rate, each arm creates its share of the
// Jobs at that rate, spread over the namespaces. A Job's pod runs ~1 s on a
// fake node; every KILLED_EVERY-th pod's sidecar ends as a SIGKILL leaves it
// (137, no termination message), and the harvester ships its lines from
// pods/log, which KWOK serves from one CRI file.
//
// Knobs: BENCH_FLEET_JOBS (10000 per arm), BENCH_FLEET_RATES (50,200 Jobs/s),
// BENCH_FLEET_NODES (100), BENCH_FLEET_NAMESPACES (20).
import { BatchV1Api, CoreV1Api, Watch, type V1Job } from '@kubernetes/client-node';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, connect, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DELIVERY_ANNOTATION } from '../../src/contract/harvest.ts';
import { encodeTermination } from '../../src/contract/termination.ts';
import { startCluster, type Cluster } from '../../test/harness/cluster/harness.ts';
import { kubeConfigFor } from '../../test/harness/cluster/client.ts';
import { Fleet } from '../../test/harness/kwok/kwok.ts';
import { FLEET_ANNOTATIONS } from '../../test/harness/kwok/stages.ts';
import { createLogReaderClusterRole, Stack, WEBHOOK_NAMESPACE } from '../../test/harness/kubelet/stack.ts';
import { exact, VictoriaLogs } from '../../test/harness/servers/victorialogs.ts';
import { destinationsFile, signingKeyFile, startHarvester, type HarvesterProcess } from '../../test/support/harvester-process.ts';
import { freePort } from '../../test/support/ports.ts';
import { startWebhook, type WebhookProcess } from '../../test/support/webhook-process.ts';

const JOBS = Number(process.env.BENCH_FLEET_JOBS ?? 10_000);
const RATES = (process.env.BENCH_FLEET_RATES ?? '50,200').split(',').map(Number);
const NODES = Number(process.env.BENCH_FLEET_NODES ?? 100);
const NAMESPACES = Number(process.env.BENCH_FLEET_NAMESPACES ?? 20);
const KILLED_EVERY = 20;
const LINES = 20;
const NAME = 'fleet';
const ARMS = ['none', 'jobharvest'] as const;
type Arm = (typeof ARMS)[number];

const t0 = Date.now();
const log = (m: string) => console.log(`[fleet ${((Date.now() - t0) / 1000).toFixed(1).padStart(7)} s] ${m}`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const fmt = (n: number, d = 1) => (Number.isFinite(n) ? n.toFixed(d) : 'n/a');
const quantile = (sorted: number[], q: number) => (sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!);

/** CPU-seconds and resident memory of a process, from /proc. */
function procStat(pid: number): { cpuSeconds: number; rssMiB: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(f[11]) + Number(f[12]);
  const rss = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return { cpuSeconds: ticks / 100, rssMiB: Number(rss?.[1] ?? 0) / 1024 };
}

/** The API server calls one URL: a TCP round-robin over the replicas, TLS passed through, as a Service spreads connections. */
async function roundRobin(ports: number[]): Promise<{ port: number; connections: number[]; close(): void }> {
  const connections = ports.map(() => 0);
  let next = 0;
  const server = createServer((client: Socket) => {
    const i = next++ % ports.length;
    connections[i]!++;
    const up = connect(ports[i]!, '127.0.0.1');
    client.pipe(up).pipe(client);
    const end = () => (client.destroy(), up.destroy());
    client.on('error', end);
    up.on('error', end);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { port: (server.address() as AddressInfo).port, connections, close: () => server.close() };
}

interface ArmResult {
  arm: Arm;
  rate: number;
  jobs: number;
  createMs: number[];
  webhookCpu: number;
  /** From a pod's end (its Job's completion) to the Job's deletion, per Job. */
  endToDeleteMs: number[];
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'jobharvest-fleet-bench-'));
  const logsFile = join(dir, 'main.log');
  const stamps = Array.from({ length: LINES }, (_, i) => `2026-12-04T10:00:${String(i).padStart(2, '0')}.000000001Z`);
  writeFileSync(logsFile, stamps.map((ts, i) => `${ts} stdout F fleet line ${i + 1}\n`).join(''));
  const message = encodeTermination({ state: 'complete', mode: 'api', sink: 'loki', shipped: LINES, unsent: 0, dead_lettered: 0 }, [['main', 0, stamps.at(-1)!, 1, LINES]], []);

  let cluster: Cluster | undefined;
  let fleet: Fleet | undefined;
  let vl: VictoriaLogs | undefined;
  const webhooks: WebhookProcess[] = [];
  let harvester: HarvesterProcess | undefined;
  let rr: Awaited<ReturnType<typeof roundRobin>> | undefined;
  try {
    cluster = await startCluster({ log: () => {} });
    log(`control plane ${cluster.versions.kubernetes} at ${cluster.server}`);
    fleet = await Fleet.start(cluster, { nodes: NODES, logsFile });
    log(`${NODES} fake nodes Ready`);
    const kc = kubeConfigFor(cluster);
    const core = kc.makeApiClient(CoreV1Api);
    const batch = kc.makeApiClient(BatchV1Api);
    await createLogReaderClusterRole(kc);
    await core.createNamespace({ body: { metadata: { name: WEBHOOK_NAMESPACE } } });
    vl = await VictoriaLogs.start();
    const files = { signingKeyFile: signingKeyFile(cluster, NAME), destinationsFile: destinationsFile(cluster, NAME, Stack.destinations(vl)) };
    const ports = [await freePort(), await freePort()];
    rr = await roundRobin(ports);
    // The first replica registers the configuration, at the round-robin's address.
    for (const [i, port] of ports.entries()) {
      webhooks.push(
        await startWebhook(cluster, {
          name: `jobharvest-${NAME}`,
          port,
          bundle: true,
          register: false,
          args: [...Stack.webhookArgs({ name: NAME }), '--signing-key-file', files.signingKeyFile, ...(i === 0 ? ['--webhook-url', `https://127.0.0.1:${rr.port}/mutate`, '--webhook-config-name', `jobharvest-${NAME}`, '--failure-policy', 'Ignore'] : [])],
        }),
      );
    }
    const metricsPort = await freePort();
    harvester = startHarvester(cluster, { name: `jobharvest-${NAME}`, ...files, bundle: true, args: ['--metrics-port', String(metricsPort)] });
    await sleep(3000);
    const harvesterRss: Array<{ at: number; rssMiB: number; tracked: number }> = [];
    const trackedNow = async () => {
      const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text().catch(() => '');
      return Number(/^jobharvest_harvester_tracked_jobs (\S+)/m.exec(text)?.[1] ?? NaN);
    };
    const sampler = setInterval(() => {
      void trackedNow().then((tracked) => harvesterRss.push({ at: Date.now(), rssMiB: procStat(harvester!.child.pid!).rssMiB, tracked }));
    }, 1000);

    const namespaces: Record<Arm, string[]> = { none: [], jobharvest: [] };
    for (const arm of ARMS) {
      for (let i = 0; i < NAMESPACES; i++) {
        const name = `${arm === 'none' ? 'plain' : 'jh'}-${i}`;
        const annotations: Record<string, string> =
          arm === 'none' ? {} : { 'jobharvest.io/inject': 'enabled', 'jobharvest.io/sink': 'loki', 'jobharvest.io/endpoint': vl.endpoints.loki, 'jobharvest.io/ttl-seconds-after-finished': '5', 'jobharvest.io/mode': 'api' };
        const labels: Record<string, string> = arm === 'none' ? { 'jobharvest.io/inject': 'disabled' } : {};
        await core.createNamespace({ body: { metadata: { name, annotations, labels } } });
        namespaces[arm].push(name);
      }
    }

    // Every Job's completion and deletion, as the watch sees them.
    const completedAt = new Map<string, number>();
    const deletedAt = new Map<string, number>();
    const recorded = new Set<string>();
    let watchReq: { abort(): void } | undefined;
    await new Watch(kc)
      .watch('/apis/batch/v1/jobs', {}, (type, job: V1Job) => {
        const key = `${job.metadata!.namespace}/${job.metadata!.name}`;
        if (type === 'DELETED') deletedAt.set(key, Date.now());
        else if (job.status?.completionTime && !completedAt.has(key)) completedAt.set(key, Date.now());
        if (job.metadata?.annotations?.[DELIVERY_ANNOTATION]) recorded.add(key);
      }, () => {})
      .then((r) => (watchReq = r));

    const results: ArmResult[] = [];
    const perRate = Math.floor(JOBS / RATES.length);
    let seq = 0;
    for (const rate of RATES) {
      for (const arm of ARMS) {
        const keys: string[] = [];
        const createMs: number[] = [];
        const cpu0 = webhooks.reduce((s, w) => s + procStat(w.child.pid!).cpuSeconds, 0);
        const started = Date.now();
        const inflight = new Set<Promise<void>>();
        for (let i = 0; i < perRate; i++) {
          const due = started + (i * 1000) / rate;
          const wait = due - Date.now();
          if (wait > 0) await sleep(wait);
          const ns = namespaces[arm][i % NAMESPACES]!;
          const name = `j${seq++}`;
          const killed = i % KILLED_EVERY === KILLED_EVERY - 1;
          const body: V1Job = {
            metadata: { name },
            spec: {
              backoffLimit: 0,
              ttlSecondsAfterFinished: arm === 'none' ? 5 : undefined,
              template: {
                metadata: { annotations: killed ? { [FLEET_ANNOTATIONS.exitCode]: '137', [FLEET_ANNOTATIONS.runFor]: '1s' } : { [FLEET_ANNOTATIONS.message]: message, [FLEET_ANNOTATIONS.runFor]: '1s' } },
                spec: { ...Fleet.podSpec(), restartPolicy: 'Never', containers: [{ name: 'main', image: 'registry.example/app:1', command: ['run'] }] },
              },
            },
          };
          const p = (async () => {
            const s = performance.now();
            await batch.createNamespacedJob({ namespace: ns, body });
            createMs.push(performance.now() - s);
            keys.push(`${ns}/${name}`);
          })();
          inflight.add(p);
          void p.finally(() => inflight.delete(p));
        }
        await Promise.all(inflight);
        const cpu1 = webhooks.reduce((s, w) => s + procStat(w.child.pid!).cpuSeconds, 0);
        log(`${arm} at ${rate}/s: ${keys.length} Jobs created in ${fmt((Date.now() - started) / 1000)} s`);
        // Until every Job of this arm is gone (TTL after its record, for jobharvest).
        const deadline = Date.now() + 15 * 60_000;
        while (keys.some((k) => !deletedAt.has(k)) && Date.now() < deadline) await sleep(1000);
        const endToDeleteMs = keys.filter((k) => completedAt.has(k) && deletedAt.has(k)).map((k) => deletedAt.get(k)! - completedAt.get(k)!);
        log(`${arm} at ${rate}/s: ${endToDeleteMs.length} of ${keys.length} Jobs completed and deleted`);
        results.push({ arm, rate, jobs: keys.length, createMs: createMs.sort((a, b) => a - b), webhookCpu: cpu1 - cpu0, endToDeleteMs: endToDeleteMs.sort((a, b) => a - b) });
      }
    }
    clearInterval(sampler);
    watchReq?.abort();

    const killedJobs = results.filter((r) => r.arm === 'jobharvest').reduce((s, r) => s + Math.floor(r.jobs / KILLED_EVERY), 0);
    const counted = await vl.countWithDistinct(`${exact('container', 'main')}`, '_msg');
    const ids = await vl.countWithDistinct('*', '_stream_id');

    console.log('');
    console.log('arm         rate/s   jobs  create p50 ms  p99 ms   max ms  webhook cpu ms/Job  end->delete p50 s  p99 s');
    for (const r of results) {
      console.log(
        `${r.arm.padEnd(11)} ${String(r.rate).padStart(6)} ${String(r.jobs).padStart(6)} ${fmt(quantile(r.createMs, 0.5)).padStart(14)} ${fmt(quantile(r.createMs, 0.99)).padStart(7)} ${fmt(r.createMs.at(-1) ?? NaN).padStart(8)} ${fmt((r.webhookCpu * 1000) / Math.max(1, r.jobs), 2).padStart(19)} ${fmt(quantile(r.endToDeleteMs, 0.5) / 1000, 1).padStart(18)} ${fmt(quantile(r.endToDeleteMs, 0.99) / 1000, 1).padStart(6)}`,
      );
    }
    for (const rate of RATES) {
      const a = results.find((r) => r.arm === 'jobharvest' && r.rate === rate);
      const b = results.find((r) => r.arm === 'none' && r.rate === rate);
      if (a && b) console.log(`ratio create p99 jobharvest/none at ${rate}/s: ${fmt(quantile(a.createMs, 0.99) / quantile(b.createMs, 0.99), 2)}x`);
    }
    const rss = harvesterRss.map((s) => s.rssMiB);
    console.log(`harvester rss_start_MiB=${fmt(rss[0] ?? NaN)} rss_peak_MiB=${fmt(Math.max(...rss))} rss_end_MiB=${fmt(rss.at(-1) ?? NaN)} tracked_peak=${Math.max(...harvesterRss.map((s) => s.tracked).filter(Number.isFinite))}`);
    console.log(`harvested lines: ${counted.total} received (${counted.distinct} distinct) for ${killedJobs} killed sidecars x ${LINES} lines = ${killedJobs * LINES}; streams ${ids.distinct}`);
    console.log(`records: ${recorded.size} of ${results.filter((r) => r.arm === 'jobharvest').reduce((s, r) => s + r.jobs, 0)} jobharvest Jobs`);
    console.log(`webhook connections through the round-robin: ${rr.connections.join(' / ')}`);
  } finally {
    rr?.close();
    await harvester?.stop();
    for (const w of webhooks) await w.stop();
    await fleet?.stop();
    await vl?.dispose();
    await cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
