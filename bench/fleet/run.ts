// `npm run bench:fleet`: jobharvest on a fleet of fake nodes (KWOK, test/
// harness/kwok) on the real control plane, against the same fleet without it.
//
// On this machine, as processes: etcd, kube-apiserver, kube-controller-manager
// (test/harness/cluster), KWOK and kube-scheduler (test/harness/kwok),
// VictoriaLogs, two webhook replicas behind a TCP round-robin in this process
// (the API server calls one URL, as it calls one Service), and one harvester,
// all from the built bundles (`npm run build`) as the image runs them. The
// webhook replicas share one certificate Secret (`--cert-mode auto`, as in the
// chart) and keep the webhook configuration's CA bundle; each component runs
// on a ServiceAccount of its own, so the API server's audit log (audit.ts)
// counts its requests by name.
//
// Arms, interleaved: `none` creates its Jobs in namespaces labelled
// jobharvest.io/inject=disabled, which the webhook configuration's
// namespaceSelector leaves out (the API server calls no webhook); `jobharvest`
// in opted-in namespaces. For each rate, each arm creates its share of the
// Jobs at that rate, spread over the namespaces, and waits until every one is
// deleted by its TTL; then each arm runs one Indexed Job. A Job's pod runs ~1 s
// on a fake node; every KILLED_EVERY-th pod's sidecar ends as a SIGKILL leaves
// it (137, no termination message), and the harvester ships its lines from
// pods/log, which KWOK serves from one CRI file. Before all that, suspended
// 1 MiB Jobs in namespaces that never opted in: what the harvester and the
// webhook hold for Jobs they never touch.
//
// Knobs: BENCH_FLEET_JOBS (10000 per arm), BENCH_FLEET_RATES (50,200 Jobs/s),
// BENCH_FLEET_NODES (100), BENCH_FLEET_NAMESPACES (20), BENCH_FLEET_INDEXED
// (2000x500: completions x parallelism; 0 for none), BENCH_FLEET_SUSPENDED (60),
// BENCH_FLEET_TTL (30 s), BENCH_FLEET_HARVESTER_ARGS (more harvester flags).
import { AdmissionregistrationV1Api, BatchV1Api, CoreV1Api, RbacAuthorizationV1Api, Watch, type V1Job } from '@kubernetes/client-node';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stringify } from 'yaml';
import { DELIVERY_ANNOTATION, INJECTED_LABEL } from '../../src/contract/harvest.ts';
import { encodeTermination } from '../../src/contract/termination.ts';
import { defaultConfig } from '../../src/core/config.ts';
import { registerUrlWebhook } from '../../src/k8s/register.ts';
import { startCluster, type Cluster } from '../../test/harness/cluster/harness.ts';
import { kubeConfigFor } from '../../test/harness/cluster/client.ts';
import { writeKubeconfig } from '../../test/harness/cluster/kubeconfig.ts';
import { Fleet } from '../../test/harness/kwok/kwok.ts';
import { FLEET_ANNOTATIONS } from '../../test/harness/kwok/stages.ts';
import { createLogReaderClusterRole, Stack, WEBHOOK_NAMESPACE } from '../../test/harness/kubelet/stack.ts';
import { VictoriaLogs } from '../../test/harness/servers/victorialogs.ts';
import { destinationsFile, signingKeyFile, startHarvester, type HarvesterProcess } from '../../test/support/harvester-process.ts';
import { freePort } from '../../test/support/ports.ts';
import { get, startWebhook, type WebhookProcess } from '../../test/support/webhook-process.ts';
import { countByRequest, readAuditLog, WRITE_VERBS, auditPolicy, type AuditEvent } from './audit.ts';
import { addSizes, storedSize, type StoredSize } from './etcd.ts';
import { callsBetween, webhookCalls } from './apiserver.ts';

const JOBS = Number(process.env.BENCH_FLEET_JOBS ?? 10_000);
const RATES = (process.env.BENCH_FLEET_RATES ?? '50,200').split(',').map(Number);
const NODES = Number(process.env.BENCH_FLEET_NODES ?? 100);
const NAMESPACES = Number(process.env.BENCH_FLEET_NAMESPACES ?? 20);
const [INDEXED_COMPLETIONS, INDEXED_PARALLELISM] = (process.env.BENCH_FLEET_INDEXED ?? '2000x500').split('x').map(Number) as [number, number | undefined];
const SUSPENDED = Number(process.env.BENCH_FLEET_SUSPENDED ?? 60);
/** Every Job's TTL: long enough for the harvester's backlog at these rates, short enough to see the deletions in the run (the chart's default is 3600 s). */
const TTL = Number(process.env.BENCH_FLEET_TTL ?? 30);
const HARVESTER_ARGS = (process.env.BENCH_FLEET_HARVESTER_ARGS ?? '').split(' ').filter(Boolean);
const KILLED_EVERY = 20;
const LINES = 20;
const NAME = 'fleet';
const ARMS = ['none', 'jobharvest'] as const;
type Arm = (typeof ARMS)[number];
/** A large cluster's controller manager: its client defaults (20 qps, burst 30) and 5 Job workers would be this bench's bottleneck, not the API server. */
const CONTROLLER_MANAGER_FLAGS = ['--kube-api-qps=300', '--kube-api-burst=600', '--concurrent-job-syncs=20', '--concurrent-ttl-after-finished-syncs=20', '--concurrent-gc-syncs=50'];
const SA = { webhook: `jobharvest-${NAME}-webhook`, harvester: `jobharvest-${NAME}-harvester` } as const;
const userOf = (sa: string) => `system:serviceaccount:${WEBHOOK_NAMESPACE}:${sa}`;
const COMPONENTS: Array<[string, string]> = [
  ['webhook', userOf(SA.webhook)],
  ['harvester', userOf(SA.harvester)],
];

const HERE = dirname(fileURLToPath(import.meta.url));
const t0 = Date.now();
const log = (m: string) => console.log(`[fleet ${((Date.now() - t0) / 1000).toFixed(1).padStart(7)} s] ${m}`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const fmt = (n: number, d = 1) => (Number.isFinite(n) ? n.toFixed(d) : 'n/a');
const quantile = (sorted: number[], q: number) => (sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!);
const median = (xs: number[]) => quantile([...xs].sort((a, b) => a - b), 0.5);

/** CPU-seconds and resident memory of a process, from /proc. */
function procStat(pid: number): { cpuSeconds: number; rssMiB: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(f[11]) + Number(f[12]);
  const rss = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return { cpuSeconds: ticks / 100, rssMiB: Number(rss?.[1] ?? 0) / 1024 };
}

/** The API server calls one URL: a TCP round-robin over the replicas (round-robin.ts), as a Service spreads connections. */
async function roundRobin(ports: number[]): Promise<{ port: number; close(): Promise<string> }> {
  const child = spawn(process.execPath, [join(HERE, 'round-robin.ts'), ...ports.map(String)], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => (out += c));
  for (let i = 0; !/^port \d+/m.test(out); i++) {
    if (i > 100 || child.exitCode !== null) throw new Error(`the round-robin did not start: ${out}`);
    await sleep(100);
  }
  const port = Number(/^port (\d+)/m.exec(out)![1]);
  return {
    port,
    close: async () => {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
      return /^connections (\S+)/m.exec(out)?.[1] ?? 'n/a';
    },
  };
}

/** The API server's own metrics (Prometheus text). */
function apiServerMetrics(cluster: Cluster): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request(`${cluster.server}/metrics`, { ca: cluster.caPem, headers: { authorization: `Bearer ${cluster.token}` } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve(body));
    });
    req.on('error', reject);
    req.end();
  });
}

/** One sample a second of the harvester and the webhook replicas. */
interface Sample {
  at: number;
  harvesterRssMiB: number;
  webhookRssMiB: number[];
  tracked: number;
  queue: number;
  records: number;
  /** V8's heap in use and the memory outside it (buffers), as the harvester's default metrics say. */
  heapMiB: number;
  externalMiB: number;
}

interface Phase {
  name: string;
  arm: Arm;
  rate: number | undefined;
  start: number;
  end: number;
  jobs: string[];
  killed: Set<string>;
  pods: number;
  createMs: number[];
  webhookCpu: number;
  harvesterCpu: number;
  /** From the Job's completion to its delivery record, per recorded Job. */
  recordLagMs: number[];
  /** From the Job's completion (its last pod's end) to its deletion, per Job. */
  endToDeleteMs: number[];
  injected: number;
  stored: { jobs: StoredSize; pods: StoredSize };
  /** The API server's calls of the webhook while the phase's Jobs were created. */
  calls: { count: number; meanMs: number; p99UpperMs: number };
  /** The replicas' own mean time per review, from parsed body to response. */
  ownMeanMs: number;
}

async function metric(port: number): Promise<{ tracked: number; queue: number; records: number; heapMiB: number; externalMiB: number }> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text().catch(() => '');
  const one = (name: string) => Number(new RegExp(`^${name} (\\S+)`, 'm').exec(text)?.[1] ?? NaN);
  let records = 0;
  for (const m of text.matchAll(/^jobharvest_harvester_records_total\{[^}]*\} (\S+)/gm)) records += Number(m[1]);
  return { tracked: one('jobharvest_harvester_tracked_jobs'), queue: one('jobharvest_harvester_queue_depth'), records, heapMiB: one('nodejs_heap_size_used_bytes') / 1048576, externalMiB: one('nodejs_external_memory_bytes') / 1048576 };
}

/** The webhook replicas' own admission histogram (count, sum), from parsed body to response. */
async function webhookOwnTime(webhooks: readonly WebhookProcess[]): Promise<{ count: number; sum: number }> {
  let count = 0;
  let sum = 0;
  for (const w of webhooks) {
    const { body } = await get(w.port, '/metrics');
    count += Number(/^jobharvest_admission_duration_seconds_count(?:\{[^}]*\})? (\S+)/m.exec(body)?.[1] ?? 0);
    sum += Number(/^jobharvest_admission_duration_seconds_sum(?:\{[^}]*\})? (\S+)/m.exec(body)?.[1] ?? 0);
  }
  return { count, sum };
}

/** A token of a ServiceAccount bound to cluster-admin: its own name in the audit log; what it may do is the chart's business (test/e2e/chart-policy). */
async function identity(kc: ReturnType<typeof kubeConfigFor>, cluster: Cluster, dir: string, sa: string): Promise<string> {
  const core = kc.makeApiClient(CoreV1Api);
  const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
  await core.createNamespacedServiceAccount({ namespace: WEBHOOK_NAMESPACE, body: { metadata: { name: sa } } });
  await rbac.createClusterRoleBinding({
    body: { metadata: { name: sa }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'cluster-admin' }, subjects: [{ kind: 'ServiceAccount', name: sa, namespace: WEBHOOK_NAMESPACE }] },
  });
  const t = await core.createNamespacedServiceAccountToken({ name: sa, namespace: WEBHOOK_NAMESPACE, body: { spec: { audiences: [], expirationSeconds: 86_400 } } });
  const file = join(dir, `${sa}.kubeconfig`);
  await writeKubeconfig(file, { server: cluster.server, caPem: cluster.caPem, user: userOf(sa), token: t.status!.token! });
  return file;
}

/** A suspended Job of about `bytes` bytes (env values; annotations are capped at 256 KiB). */
function bigSuspendedJob(name: string, bytes: number): V1Job {
  const chunk = 64 * 1024;
  const env = Array.from({ length: Math.ceil(bytes / chunk) }, (_, i) => ({ name: `PAYLOAD_${i}`, value: 'x'.repeat(chunk) }));
  return {
    metadata: { name },
    spec: { suspend: true, template: { spec: { ...Fleet.podSpec(), restartPolicy: 'Never', containers: [{ name: 'main', image: 'registry.example/app:1', env }] } } },
  };
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'jobharvest-fleet-bench-'));
  const logsFile = join(dir, 'main.log');
  const stamps = Array.from({ length: LINES }, (_, i) => `2026-12-04T10:00:${String(i).padStart(2, '0')}.000000001Z`);
  writeFileSync(logsFile, stamps.map((ts, i) => `${ts} stdout F fleet line ${i + 1}\n`).join(''));
  // What a drained sidecar writes (sidecar/termination.ts): complete, its one run done, nothing to resume.
  const drained = encodeTermination({ state: 'complete', mode: 'api', sink: 'loki', shipped: LINES, unsent: 0, dead_lettered: 0 }, [], ['main/0']);
  const auditLog = join(dir, 'audit.log');
  writeFileSync(join(dir, 'audit-policy.yaml'), stringify(auditPolicy(COMPONENTS.map(([, u]) => u))));

  let cluster: Cluster | undefined;
  let fleet: Fleet | undefined;
  let vl: VictoriaLogs | undefined;
  const webhooks: WebhookProcess[] = [];
  let harvester: HarvesterProcess | undefined;
  let rr: Awaited<ReturnType<typeof roundRobin>> | undefined;
  let sampler: NodeJS.Timeout | undefined;
  let watchReq: { abort(): void } | undefined;
  let watching = true;
  try {
    cluster = await startCluster({
      log: () => {},
      apiServerFlags: [`--audit-policy-file=${join(dir, 'audit-policy.yaml')}`, `--audit-log-path=${auditLog}`, '--audit-log-maxbackup=0'],
      controllerManagerFlags: CONTROLLER_MANAGER_FLAGS,
    });
    log(`control plane ${cluster.versions.kubernetes} at ${cluster.server}`);
    fleet = await Fleet.start(cluster, { nodes: NODES, logsFile });
    log(`${NODES} fake nodes Ready`);
    const kc = kubeConfigFor(cluster);
    const core = kc.makeApiClient(CoreV1Api);
    const batch = kc.makeApiClient(BatchV1Api);
    const admission = kc.makeApiClient(AdmissionregistrationV1Api);
    await createLogReaderClusterRole(kc);
    await core.createNamespace({ body: { metadata: { name: WEBHOOK_NAMESPACE } } });
    const kubeconfigs = { webhook: await identity(kc, cluster, dir, SA.webhook), harvester: await identity(kc, cluster, dir, SA.harvester) };
    vl = await VictoriaLogs.start();
    const files = { signingKeyFile: signingKeyFile(cluster, NAME), destinationsFile: destinationsFile(cluster, NAME, Stack.destinations(vl)) };
    const ports = [await freePort(), await freePort()];
    rr = await roundRobin(ports);
    // As the chart installs it: the configuration first, with no CA bundle yet; the replicas write it from their shared certificate Secret.
    const configName = `jobharvest-${NAME}`;
    await registerUrlWebhook(admission, { name: configName, url: `https://127.0.0.1:${rr.port}/mutate`, caBundle: '', config: defaultConfig(), failurePolicy: 'Ignore' });
    for (const port of ports) {
      webhooks.push(
        await startWebhook(cluster, {
          name: configName,
          port,
          bundle: true,
          // As the chart's Deployment sets NODE_OPTIONS.
          nodeArgs: ['--max-semi-space-size=4'],
          register: false,
          args: [...Stack.webhookArgs({ name: NAME }), '--signing-key-file', files.signingKeyFile, '--cert-mode', 'auto', '--extra-ips', '127.0.0.1', '--webhook-config-name', configName, '--kubeconfig', kubeconfigs.webhook],
        }),
      );
    }
    for (let i = 0; ; i++) {
      const mwc = await admission.readMutatingWebhookConfiguration({ name: configName });
      if (mwc.webhooks?.every((w) => (w.clientConfig.caBundle ?? '').length > 0)) break;
      if (i > 60) throw new Error('the webhook replicas did not write the CA bundle in 30 s');
      await sleep(500);
    }
    const metricsPort = await freePort();
    harvester = startHarvester(cluster, { name: configName, ...files, bundle: true, nodeArgs: ['--max-semi-space-size=4'], kubeconfig: kubeconfigs.harvester, args: ['--metrics-port', String(metricsPort), ...HARVESTER_ARGS] });
    await sleep(3000);

    const samples: Sample[] = [];
    sampler = setInterval(() => {
      void metric(metricsPort).then((m) => samples.push({ at: Date.now(), harvesterRssMiB: procStat(harvester!.child.pid!).rssMiB, webhookRssMiB: webhooks.map((w) => procStat(w.child.pid!).rssMiB), ...m }));
    }, 1000);

    // Jobs the harvester and the webhook never touch: suspended, 1 MiB each, in namespaces that never opted in.
    // A quiet window first, as long as the one with the suspended Jobs: what the RSS drifts by on its own.
    await sleep(5000);
    const idleStart = median(samples.slice(-4).map((s) => s.harvesterRssMiB));
    await sleep(15_000 + SUSPENDED * 150);
    const idleBefore = median(samples.slice(-4).map((s) => s.harvesterRssMiB));
    const webhookIdleBefore = median(samples.slice(-4).map((s) => Math.max(...s.webhookRssMiB)));
    const quiet = ['quiet-0', 'quiet-1', 'quiet-2'];
    for (const name of quiet) await core.createNamespace({ body: { metadata: { name } } });
    const suspendedMs: number[] = [];
    let suspendedInjected = 0;
    for (let i = 0; i < SUSPENDED; i++) {
      const s = performance.now();
      const job = await batch.createNamespacedJob({ namespace: quiet[i % quiet.length]!, body: bigSuspendedJob(`big-${i}`, 1024 * 1024) });
      suspendedMs.push(performance.now() - s);
      if (job.metadata?.labels?.[INJECTED_LABEL]) suspendedInjected++;
    }
    await sleep(15_000);
    const idleAfter = median(samples.slice(-4).map((s) => s.harvesterRssMiB));
    const webhookIdleAfter = median(samples.slice(-4).map((s) => Math.max(...s.webhookRssMiB)));
    const suspendedBytes = await storedSize(cluster.etcdUrl, '/registry/jobs/quiet-');
    log(`${SUSPENDED} suspended Jobs (${fmt(suspendedBytes.bytes / 1048576)} MiB in etcd) created in never-opted-in namespaces; create p50 ${fmt(median(suspendedMs))} ms`);

    const namespaces: Record<Arm, string[]> = { none: [], jobharvest: [] };
    for (const arm of ARMS) {
      for (let i = 0; i < NAMESPACES; i++) {
        const name = `${arm === 'none' ? 'plain' : 'jh'}-${i}`;
        const annotations: Record<string, string> =
          arm === 'none' ? {} : { 'jobharvest.io/inject': 'enabled', 'jobharvest.io/sink': 'loki', 'jobharvest.io/endpoint': vl.endpoints.loki, 'jobharvest.io/ttl-seconds-after-finished': String(TTL), 'jobharvest.io/mode': 'api' };
        const labels: Record<string, string> = arm === 'none' ? { 'jobharvest.io/inject': 'disabled' } : {};
        await core.createNamespace({ body: { metadata: { name, annotations, labels } } });
        namespaces[arm].push(name);
      }
    }

    // Every Job's completion and deletion, as the watch sees them.
    const completedAt = new Map<string, number>();
    const deletedAt = new Map<string, number>();
    const recorded = new Map<string, string>();
    const recordedAt = new Map<string, number>();
    // Restarted when it ends (the API server closes watches after a while), from where it was.
    let resourceVersion: string | undefined;
    const watchJobs = async (): Promise<void> => {
      watchReq = await new Watch(kc).watch(
        '/apis/batch/v1/jobs',
        { allowWatchBookmarks: true, ...(resourceVersion ? { resourceVersion } : {}) },
        (type, job: V1Job) => {
          resourceVersion = job.metadata?.resourceVersion ?? resourceVersion;
          if (type === 'BOOKMARK') return;
          const key = `${job.metadata!.namespace}/${job.metadata!.name}`;
          if (type === 'DELETED') deletedAt.set(key, Date.now());
          else if (job.status?.completionTime && !completedAt.has(key)) completedAt.set(key, Date.now());
          const record = job.metadata?.annotations?.[DELIVERY_ANNOTATION];
          if (record && !recorded.has(key)) {
            recorded.set(key, record);
            recordedAt.set(key, Date.now());
          }
        },
        (err) => {
          if (!watching) return;
          if (err) log(`Job watch ended: ${(err as Error).message}; watching again`);
          // 410 Gone: start over from now; the Jobs deleted meanwhile are read back by their absence below.
          if ((err as { statusCode?: number } | undefined)?.statusCode === 410) resourceVersion = undefined;
          void sleep(200).then(watchJobs);
        },
      );
    };
    await watchJobs();

    const allJobs = new Set<string>();
    const phases: Phase[] = [];
    const podAnnotations = (killed: boolean): Record<string, string> =>
      killed ? { [FLEET_ANNOTATIONS.exitCode]: '137', [FLEET_ANNOTATIONS.runFor]: '1s' } : { [FLEET_ANNOTATIONS.message]: drained, [FLEET_ANNOTATIONS.runFor]: '1s' };
    const jobBody = (arm: Arm, name: string, killed: boolean, indexed?: { completions: number; parallelism: number }): V1Job => ({
      metadata: { name },
      spec: {
        backoffLimit: 0,
        ...(indexed ? { completionMode: 'Indexed', completions: indexed.completions, parallelism: indexed.parallelism } : {}),
        ttlSecondsAfterFinished: arm === 'none' ? TTL : undefined,
        template: {
          metadata: { annotations: podAnnotations(killed) },
          spec: { ...Fleet.podSpec(), restartPolicy: 'Never', containers: [{ name: 'main', image: 'registry.example/app:1', command: ['run'] }] },
        },
      },
    });

    /** Creates the phase's Jobs at `rate` (all at once without one), then waits until the TTL has deleted every one. */
    const runPhase = async (phase: Omit<Phase, 'start' | 'end' | 'createMs' | 'webhookCpu' | 'endToDeleteMs' | 'injected' | 'stored' | 'jobs' | 'calls' | 'harvesterCpu' | 'recordLagMs' | 'ownMeanMs'>, bodies: Array<{ ns: string; body: V1Job }>) => {
      const createMs: number[] = [];
      const keys: string[] = [];
      let injected = 0;
      const cpu0 = webhooks.reduce((s, w) => s + procStat(w.child.pid!).cpuSeconds, 0);
      const calls0 = webhookCalls(await apiServerMetrics(cluster!));
      const hcpu0 = procStat(harvester!.child.pid!).cpuSeconds;
      const own0 = await webhookOwnTime(webhooks);
      const start = Date.now();
      const inflight = new Set<Promise<void>>();
      for (const [i, { ns, body }] of bodies.entries()) {
        if (phase.rate) {
          const wait = start + (i * 1000) / phase.rate - Date.now();
          if (wait > 0) await sleep(wait);
        }
        allJobs.add(body.metadata!.name!);
        const p = (async () => {
          const s = performance.now();
          const job = await batch.createNamespacedJob({ namespace: ns, body });
          createMs.push(performance.now() - s);
          if (job.metadata?.labels?.[INJECTED_LABEL]) injected++;
          keys.push(`${ns}/${body.metadata!.name}`);
        })();
        inflight.add(p);
        void p.finally(() => inflight.delete(p));
      }
      await Promise.all(inflight);
      const cpu1 = webhooks.reduce((s, w) => s + procStat(w.child.pid!).cpuSeconds, 0);
      const calls = callsBetween(calls0, webhookCalls(await apiServerMetrics(cluster!)));
      const own1 = await webhookOwnTime(webhooks);
      const ownMeanMs = own1.count > own0.count ? ((own1.sum - own0.sum) / (own1.count - own0.count)) * 1000 : NaN;
      log(`${phase.name}: ${keys.length} Jobs created in ${fmt((Date.now() - start) / 1000)} s (${injected} injected)`);
      // The objects as stored right after creation (a sample of each kind).
      let jobs: StoredSize = { objects: 0, bytes: 0 };
      let pods: StoredSize = { objects: 0, bytes: 0 };
      for (const ns of new Set(bodies.map((b) => b.ns))) {
        jobs = addSizes(jobs, await storedSize(cluster!.etcdUrl, `/registry/jobs/${ns}/`, 200));
        pods = addSizes(pods, await storedSize(cluster!.etcdUrl, `/registry/pods/${ns}/`, 200));
      }
      const deadline = Date.now() + 15 * 60_000;
      for (let i = 1; keys.some((k) => !deletedAt.has(k)) && Date.now() < deadline; i++) {
        await sleep(500);
        // A watch that started over after a 410 misses the deletions in between: a Job no longer listed is gone.
        if (i % 30 === 0) {
          const left = new Set<string>();
          for (const ns of new Set(bodies.map((b) => b.ns))) for (const j of (await batch.listNamespacedJob({ namespace: ns })).items) left.add(`${ns}/${j.metadata!.name}`);
          for (const k of keys) if (!left.has(k) && !deletedAt.has(k)) deletedAt.set(k, Date.now());
        }
      }
      const endToDeleteMs = keys.filter((k) => completedAt.has(k) && deletedAt.has(k)).map((k) => deletedAt.get(k)! - completedAt.get(k)!);
      const recordLagMs = keys.filter((k) => completedAt.has(k) && recordedAt.has(k)).map((k) => recordedAt.get(k)! - completedAt.get(k)!);
      const harvesterCpu = procStat(harvester!.child.pid!).cpuSeconds - hcpu0;
      log(`${phase.name}: ${endToDeleteMs.length} of ${keys.length} Jobs completed and deleted`);
      phases.push({ ...phase, start, end: Date.now(), jobs: keys, createMs: createMs.sort((a, b) => a - b), webhookCpu: cpu1 - cpu0, endToDeleteMs: endToDeleteMs.sort((a, b) => a - b), injected, stored: { jobs, pods }, calls, ownMeanMs, harvesterCpu, recordLagMs: recordLagMs.sort((a, b) => a - b) });
    };

    const perRate = Math.floor(JOBS / RATES.length);
    let seq = 0;
    for (const rate of RATES) {
      for (const arm of ARMS) {
        const killed = new Set<string>();
        const bodies = Array.from({ length: perRate }, (_, i) => {
          const ns = namespaces[arm][i % NAMESPACES]!;
          const name = `j${seq++}`;
          const k = i % KILLED_EVERY === KILLED_EVERY - 1;
          if (k) killed.add(`${ns}/${name}`);
          return { ns, body: jobBody(arm, name, k) };
        });
        await runPhase({ name: `${arm} at ${rate}/s`, arm, rate, killed, pods: perRate }, bodies);
      }
    }
    if (INDEXED_COMPLETIONS > 0) {
      const parallelism = INDEXED_PARALLELISM ?? INDEXED_COMPLETIONS;
      for (const arm of ARMS) {
        const name = `ix-${arm}`;
        await runPhase({ name: `${arm} Indexed ${INDEXED_COMPLETIONS}/${parallelism}`, arm, rate: undefined, killed: new Set(), pods: INDEXED_COMPLETIONS }, [
          { ns: namespaces[arm][0]!, body: jobBody(arm, name, false, { completions: INDEXED_COMPLETIONS, parallelism }) },
        ]);
      }
    }
    clearInterval(sampler);
    sampler = undefined;
    watching = false;
    watchReq?.abort();
    const events = readAuditLog(auditLog, (n) => allJobs.has(n));
    const eventsPerArm: Record<Arm, StoredSize> = { none: { objects: 0, bytes: 0 }, jobharvest: { objects: 0, bytes: 0 } };
    for (const arm of ARMS) for (const ns of namespaces[arm]) eventsPerArm[arm] = addSizes(eventsPerArm[arm], await storedSize(cluster.etcdUrl, `/registry/events/${ns}/`, 1_000_000));
    const perLines = await vl.query('* | stats by (namespace, pod) count() as n, count_uniq(_msg) as u | stats by (n, u) count() as pods');
    const connections = await rr.close();
    rr = undefined;
    report({ phases, samples, events, eventsPerArm, perLines, recorded, idle: { start: idleStart, before: idleBefore, after: idleAfter, webhookBefore: webhookIdleBefore, webhookAfter: webhookIdleAfter, suspendedBytes, suspendedMs, suspendedInjected }, connections });
  } finally {
    if (sampler) clearInterval(sampler);
    watching = false;
    watchReq?.abort();
    await rr?.close();
    await harvester?.stop();
    for (const w of webhooks) await w.stop();
    await fleet?.stop();
    await vl?.dispose();
    await cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

interface Report {
  phases: Phase[];
  samples: Sample[];
  events: AuditEvent[];
  eventsPerArm: Record<Arm, StoredSize>;
  perLines: Record<string, string>[];
  recorded: Map<string, string>;
  idle: { start: number; before: number; after: number; webhookBefore: number; webhookAfter: number; suspendedBytes: StoredSize; suspendedMs: number[]; suspendedInjected: number };
  connections: string;
}

function report(r: Report): void {
  const { phases, samples, events } = r;
  const inPhase = (p: Phase) => samples.filter((s) => s.at >= p.start && s.at <= p.end);
  console.log('');
  console.log('phase                          jobs  pods injected  create p50 ms  p99 ms  max ms  webhook cpu ms/Job  done->deleted p50 s  p99 s   took s  harvester rss peak MiB  queue max  records/s mean  peak(5 s)');
  for (const p of phases) {
    const ss = inPhase(p);
    const secs = (p.end - p.start) / 1000;
    const recs = ss.length > 1 ? ss.at(-1)!.records - ss[0]!.records : 0;
    let peak5 = 0;
    for (let i = 5; i < ss.length; i++) peak5 = Math.max(peak5, (ss[i]!.records - ss[i - 5]!.records) / ((ss[i]!.at - ss[i - 5]!.at) / 1000));
    console.log(
      [
        p.name.padEnd(28),
        String(p.jobs.length).padStart(6),
        String(p.pods).padStart(5),
        String(p.injected).padStart(8),
        fmt(quantile(p.createMs, 0.5)).padStart(14),
        fmt(quantile(p.createMs, 0.99)).padStart(7),
        fmt(p.createMs.at(-1) ?? NaN).padStart(7),
        fmt((p.webhookCpu * 1000) / Math.max(1, p.jobs.length), 2).padStart(19),
        fmt(quantile(p.endToDeleteMs, 0.5) / 1000).padStart(20),
        fmt(quantile(p.endToDeleteMs, 0.99) / 1000).padStart(6),
        fmt(secs).padStart(8),
        fmt(Math.max(...ss.map((s) => s.harvesterRssMiB))).padStart(23),
        String(Math.max(0, ...ss.map((s) => s.queue).filter(Number.isFinite))).padStart(10),
        fmt(recs / secs).padStart(15),
        fmt(peak5).padStart(10),
      ].join(' '),
    );
  }
  console.log('');
  console.log('phase                        recorded  record lag p50 s  p99 s  max s  harvester cpu ms/Job');
  for (const p of phases.filter((x) => x.arm === 'jobharvest')) {
    console.log(
      [
        p.name.padEnd(28),
        `${p.jobs.filter((k) => r.recorded.has(k)).length}/${p.jobs.length}`.padStart(9),
        fmt(quantile(p.recordLagMs, 0.5) / 1000).padStart(17),
        fmt(quantile(p.recordLagMs, 0.99) / 1000).padStart(6),
        fmt((p.recordLagMs.at(-1) ?? NaN) / 1000).padStart(6),
        fmt((p.harvesterCpu * 1000) / Math.max(1, p.jobs.length), 2).padStart(21),
      ].join(' '),
    );
  }
  const ratios: number[] = [];
  for (const rate of new Set(phases.map((p) => p.rate).filter((x) => x !== undefined))) {
    const a = phases.find((p) => p.arm === 'jobharvest' && p.rate === rate);
    const b = phases.find((p) => p.arm === 'none' && p.rate === rate);
    if (!a || !b) continue;
    const ratio = quantile(a.createMs, 0.99) / quantile(b.createMs, 0.99);
    ratios.push(ratio);
    console.log(`webhook calls at ${rate}/s, as the API server timed them: ${a.calls.count}, mean ${fmt(a.calls.meanMs)} ms, 99 % under ${fmt(a.calls.p99UpperMs, 0)} ms; inside the webhook (parsed body to response): mean ${fmt(a.ownMeanMs, 2)} ms`);
    console.log(`ratio create p99 jobharvest/none at ${rate}/s: ${fmt(ratio, 2)}x (p50 ${fmt(quantile(a.createMs, 0.5) / quantile(b.createMs, 0.5), 2)}x, max ${fmt(a.createMs.at(-1)! / b.createMs.at(-1)!, 2)}x)`);
  }

  // etcd: the objects as first stored, and the Events each arm's Jobs left.
  console.log('');
  console.log('etcd bytes      Job (mean)  pod (mean)  Events per Job');
  const perJob: Partial<Record<Arm, number>> = {};
  for (const arm of ARMS) {
    const first = phases.find((p) => p.arm === arm && p.rate !== undefined);
    if (!first) continue;
    const jobs = phases.filter((p) => p.arm === arm).reduce((s, p) => s + p.jobs.length, 0);
    const j = first.stored.jobs.bytes / Math.max(1, first.stored.jobs.objects);
    const pod = first.stored.pods.bytes / Math.max(1, first.stored.pods.objects);
    const ev = r.eventsPerArm[arm].bytes / Math.max(1, jobs);
    perJob[arm] = j + pod + ev;
    console.log(`${arm.padEnd(14)} ${fmt(j, 0).padStart(11)} ${fmt(pod, 0).padStart(11)} ${fmt(ev, 0).padStart(15)}   (${first.stored.jobs.objects} Jobs, ${first.stored.pods.objects} pods sampled; ${r.eventsPerArm[arm].objects} Events)`);
  }
  if (perJob.none && perJob.jobharvest) console.log(`ratio etcd bytes per Job (Job + pod + Events) jobharvest/none: ${fmt(perJob.jobharvest / perJob.none, 2)}x (${fmt(perJob.jobharvest, 0)} / ${fmt(perJob.none, 0)} bytes)`);

  // API requests per component, from the audit log.
  console.log('');
  const phaseOf = (e: AuditEvent) => phases.find((p) => e.at >= p.start && e.at <= p.end);
  for (const [component, user] of COMPONENTS) {
    const mine = events.filter((e) => e.user === user);
    const outside = mine.filter((e) => !phaseOf(e));
    console.log(`${component}: ${mine.length} API requests in all; outside the phases (start-up, the suspended Jobs, between phases): ${outside.length} [${countByRequest(outside).slice(0, 6).map(([k, n]) => `${k} ${n}`).join(', ')}]`);
    for (const p of phases) {
      const ev = mine.filter((e) => phaseOf(e) === p);
      const writes = ev.filter((e) => WRITE_VERBS.has(e.verb)).length;
      const jobs = Math.max(1, p.jobs.length);
      console.log(
        `  ${p.name.padEnd(28)} requests/Job ${fmt(ev.length / jobs, 2).padStart(7)}  writes/Job ${fmt(writes / jobs, 2).padStart(6)}  [${countByRequest(ev)
          .slice(0, 8)
          .map(([k, n]) => `${k} ${fmt(n / jobs, 2)}`)
          .join(', ')}]`,
      );
    }
  }
  // The harvester's writes about each Job, by what its sidecar did.
  const harvesterWrites = events.filter((e) => e.user === userOf(SA.harvester) && WRITE_VERBS.has(e.verb) && e.job !== undefined);
  const writesOf = new Map<string, AuditEvent[]>();
  for (const e of harvesterWrites) writesOf.set(`${e.namespace}/${e.job}`, [...(writesOf.get(`${e.namespace}/${e.job}`) ?? []), e]);
  const byClass = (keys: string[]) => {
    const counts = keys.map((k) => writesOf.get(k)?.length ?? 0);
    const kinds = countByRequest(keys.flatMap((k) => writesOf.get(k) ?? []));
    return { jobs: keys.length, mean: counts.reduce((a, b) => a + b, 0) / Math.max(1, keys.length), max: Math.max(0, ...counts), kinds: kinds.map(([k, n]) => `${k} ${fmt(n / Math.max(1, keys.length), 2)}`).join(', ') };
  };
  const rated = phases.filter((p) => p.arm === 'jobharvest' && p.rate !== undefined);
  const drainedKeys = rated.flatMap((p) => p.jobs.filter((k) => !p.killed.has(k)));
  const killedKeys = rated.flatMap((p) => p.jobs.filter((k) => p.killed.has(k)));
  const d = byClass(drainedKeys);
  const k = byClass(killedKeys);
  console.log(`harvester writes per Job, sidecar drained: mean ${fmt(d.mean, 2)}, max ${d.max} over ${d.jobs} Jobs [${d.kinds}]`);
  console.log(`harvester writes per Job, sidecar killed:  mean ${fmt(k.mean, 2)}, max ${k.max} over ${k.jobs} Jobs [${k.kinds}]`);
  for (const p of phases.filter((x) => x.arm === 'jobharvest' && x.rate === undefined)) {
    const c = byClass(p.jobs);
    console.log(`harvester writes for the ${p.name} Job (${p.pods} pods): ${c.max} [${c.kinds}]`);
  }

  // The harvester's memory and backlog.
  console.log('');
  const rss = samples.map((s) => s.harvesterRssMiB);
  console.log(`harvester rss MiB: start ${fmt(rss[0] ?? NaN)}, idle ${fmt(r.idle.start)} -> ${fmt(r.idle.before)} over a quiet window, -> ${fmt(r.idle.after)} over as long a one with ${SUSPENDED} suspended 1 MiB Jobs it never touches (${fmt(r.idle.suspendedBytes.bytes / 1048576)} MiB in etcd), peak ${fmt(Math.max(...rss))}, end ${fmt(rss.at(-1) ?? NaN)}; heap used peak ${fmt(Math.max(...samples.map((s) => s.heapMiB).filter(Number.isFinite)))}, external peak ${fmt(Math.max(...samples.map((s) => s.externalMiB).filter(Number.isFinite)))}; tracked Jobs peak ${Math.max(0, ...samples.map((s) => s.tracked).filter(Number.isFinite))}`);
  console.log(`webhook rss MiB (larger replica): idle ${fmt(r.idle.webhookBefore)} -> ${fmt(r.idle.webhookAfter)} after the suspended Jobs (${r.idle.suspendedInjected} injected, create p50 ${fmt(median(r.idle.suspendedMs))} ms), peak ${fmt(Math.max(...samples.map((s) => Math.max(...s.webhookRssMiB))))}`);
  for (const p of phases.filter((x) => x.arm === 'jobharvest')) {
    const ss = inPhase(p).filter((_, i) => i % 10 === 0);
    console.log(`queue depth every 10 s, ${p.name}: ${ss.map((s) => s.queue).join(' ')}`);
  }

  // The lines of the killed sidecars, shipped by the harvester: once each.
  const killedJobs = killedKeys.length;
  let pods = 0;
  let exact = 0;
  let duplicated = 0;
  for (const row of r.perLines) {
    const n = Number(row.n);
    const u = Number(row.u);
    const c = Number(row.pods);
    pods += c;
    if (n === LINES && u === LINES) exact += c;
    if (n > u) duplicated += c;
  }
  console.log('');
  console.log(`harvested: ${pods} pods at the log server (${exact} with exactly ${LINES} distinct lines, ${duplicated} with a duplicate) for ${killedJobs} killed sidecars; by lines per pod: ${r.perLines.map((x) => `${x.n} lines (${x.u} distinct) x ${x.pods} pods`).join(', ')}`);
  const jhJobs = phases.filter((p) => p.arm === 'jobharvest').flatMap((p) => p.jobs);
  console.log(`records: ${jhJobs.filter((key) => r.recorded.has(key)).length} of ${jhJobs.length} jobharvest Jobs; webhook connections through the round-robin: ${r.connections}`);

  // Goals (issue 34), as the bench can tell them.
  console.log('');
  const top = phases.filter((p) => p.rate === Math.max(...RATES));
  const topRatio = top.length === 2 ? quantile(top.find((p) => p.arm === 'jobharvest')!.createMs, 0.99) / quantile(top.find((p) => p.arm === 'none')!.createMs, 0.99) : NaN;
  const goal = (ok: boolean, text: string) => console.log(`goal ${ok ? 'met   ' : 'MISSED'} ${text}`);
  goal(topRatio <= 1.5, `admission p99 at ${Math.max(...RATES)} Jobs/s within 1.5x of no webhook: ${fmt(topRatio, 2)}x`);
  const drift = r.idle.before - r.idle.start;
  const idleGrowth = r.idle.after - r.idle.before - Math.max(0, drift);
  goal(idleGrowth <= 0.1 * (r.idle.suspendedBytes.bytes / 1048576), `the harvester's idle RSS does not grow with Jobs it never touches: ${fmt(idleGrowth)} MiB beyond the quiet window's drift (${fmt(drift)} MiB) for ${fmt(r.idle.suspendedBytes.bytes / 1048576)} MiB of them (at most a tenth)`);
  goal(d.max <= 3 && d.mean <= 3, `at most 3 harvester writes per Job on the common path: mean ${fmt(d.mean, 2)}, max ${d.max}`);
  goal(pods === killedJobs && exact === killedJobs && duplicated === 0, `every line of the killed sidecars shipped once: ${exact} of ${killedJobs} pods exactly, ${duplicated} duplicated`);
  console.log(`harvester peak RSS ${fmt(Math.max(...rss))} MiB at ${jhJobs.length} jobharvest Jobs (goal: 10,000 Jobs at most 2x the peak of 1,000; compare the two runs)`);
}

await main();
