// `npm run bench:burst`: what jobharvest adds to creating a Job, through a
// real API server (the test control plane: etcd + kube-apiserver, no
// controllers, so nothing but the creations loads it).
//
// Four arms, each a burst of BURST_JOBS Jobs (bench/webhook/job.yaml) into
// an opted-in namespace, at most BURST_CONCURRENCY in flight, as fast as the
// API server admits them (a 429 from priority and fairness is retried):
//   none        no webhook registered;
//   no-op       a webhook that allows every Job unchanged (bench/webhook/noop.ts:
//               the same Fastify app and TLS settings, bundled, on plain node);
//   static      a webhook that answers every Job with the same fixed patch,
//               jobharvest's patch for these Jobs computed once (also
//               bench/webhook/noop.ts): each Job is stored as jobharvest
//               stores it, without jobharvest's work per review;
//   jobharvest  `jobharvest webhook --webhook-url` from the built bundle
//               (dist/jobharvest.mjs, as in the image), which registers itself.
// jobharvest and the reference webhooks run as their own processes on this
// machine for the whole run, and are registered by the same
// MutatingWebhookConfiguration: the one
// jobharvest wrote, read back, with only the name, URL and caBundle changed
// (same rules, failurePolicy Fail, timeoutSeconds, selectors). Switching arms
// deletes one configuration and creates the other, then probes with single
// Jobs until the API server calls the right webhook.
//
// A round runs the four arms, in an order that rotates from round to round
// so that drift in the machine's load does not always hit the same arm; the
// Jobs are deleted between rounds. The figure is jobharvest minus no-op: the
// p50 and p99 of creation latency over every burst of each arm so far. Rounds
// repeat until the p50 figure is stable (the last BURST_STABLE_ROUNDS
// estimates within ±BURST_STABLE_MS of the latest), between BURST_MIN_ROUNDS
// and BURST_MAX_ROUNDS. The static arm splits that figure in two: the cost of
// the mutation itself (static minus no-op) and jobharvest's own work (jobharvest
// minus static). Also printed per arm: the webhook's latency as the API
// server measured it (apiserver_admission_webhook_admission_duration_seconds,
// the difference of two /metrics scrapes around each burst), and the CPU time
// each webhook process used per Job (from /proc, so little moved by the
// machine's load: the part of the cost that is jobharvest's code).
import { Agent, request } from 'node:https';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { loadYaml } from '@kubernetes/client-node';
import { startCluster, type Cluster } from '../../test/harness/cluster/harness.ts';
import { get, startWebhook, type WebhookProcess } from '../../test/support/webhook-process.ts';
import { bundleEntry } from './bundle.ts';
import { histogramQuantile, processCpuMs, quantile, stableWithin } from './stats.ts';

const JOBS = Number(process.env.BURST_JOBS ?? 500);
const CONCURRENCY = Number(process.env.BURST_CONCURRENCY ?? 32);
const MIN_ROUNDS = Number(process.env.BURST_MIN_ROUNDS ?? 3);
const MAX_ROUNDS = Number(process.env.BURST_MAX_ROUNDS ?? 12);
const STABLE_MS = Number(process.env.BURST_STABLE_MS ?? 1);
const STABLE_ROUNDS = Number(process.env.BURST_STABLE_ROUNDS ?? 3);
const WARMUP = 50;
/** A folder: both webhooks run under --cpu-prof and write their profiles there (summarized at the end). */
const CPU_PROF = process.env.BURST_CPU_PROF;
const NAMESPACE = 'team-a';
const CONFIG_NAME = 'jobharvest-burst';
const NOOP_CONFIG_NAME = 'jobharvest-burst-noop';
const STATIC_CONFIG_NAME = 'jobharvest-burst-static';
// Opted in, with a durable sink so the webhook also sets the TTL: the whole patch.
const NAMESPACE_ANNOTATIONS = { 'jobharvest.io/inject': 'enabled', 'jobharvest.io/sink': 'http', 'jobharvest.io/endpoint': 'http://127.0.0.1:9/ingest' };
const WEBHOOK_NAME = 'jobs.jobharvest.io';
const METRIC = 'apiserver_admission_webhook_admission_duration_seconds';
const CONFIGS = '/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations';

const here = fileURLToPath(new URL('.', import.meta.url));
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const log = (m: string) => console.log(`[burst] ${m}`);
const fmt = (n: number, d = 1) => (Number.isFinite(n) ? n.toFixed(d) : 'n/a');
const sleep = (ms: number) => new Promise((res) => setTimeout(res, ms));

type Json = Record<string, unknown>;
type Arm = 'none' | 'no-op' | 'static' | 'jobharvest';
const ARMS: Arm[] = ['none', 'no-op', 'static', 'jobharvest'];

class Api {
  private readonly agent: Agent;
  constructor(private readonly cluster: Cluster) {
    this.agent = new Agent({ keepAlive: true, maxSockets: CONCURRENCY, ca: cluster.caPem });
  }

  call(method: string, path: string, body?: unknown): Promise<{ status: number; body: string }> {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const headers: Record<string, string> = { authorization: `Bearer ${this.cluster.token}`, accept: 'application/json' };
    if (payload !== undefined) {
      headers['content-type'] = 'application/json';
      headers['content-length'] = String(Buffer.byteLength(payload));
    }
    return new Promise((resolve, reject) => {
      const req = request(new URL(path, this.cluster.server), { method, headers, agent: this.agent, timeout: 60_000 }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      });
      req.on('timeout', () => req.destroy(new Error(`${method} ${path} timed out`)));
      req.on('error', reject);
      req.end(payload);
    });
  }

  async must(method: string, path: string, body?: unknown): Promise<Json> {
    const r = await this.call(method, path, body);
    if (r.status >= 300) throw new Error(`${method} ${path}: ${r.status} ${r.body.slice(0, 300)}`);
    return JSON.parse(r.body) as Json;
  }

  close(): void {
    this.agent.destroy();
  }
}

interface BurstResult {
  jobs: number;
  wallMs: number;
  latenciesMs: number[];
  throttled: number;
  mutated: number;
}

/** Creates `n` Jobs with at most CONCURRENCY in flight; a 429 is retried after the time the server asks for. */
async function burst(api: Api, job: Json, n: number): Promise<BurstResult> {
  const latencies: number[] = [];
  let next = 0;
  let throttled = 0;
  let mutated = 0;
  const started = performance.now();
  const worker = async () => {
    while (next < n) {
      next++;
      for (;;) {
        const t0 = performance.now();
        const r = await api.call('POST', `/apis/batch/v1/namespaces/${NAMESPACE}/jobs`, job);
        if (r.status === 429) {
          throttled++;
          await sleep(100);
          continue;
        }
        if (r.status !== 201) throw new Error(`create Job: ${r.status} ${r.body.slice(0, 300)}`);
        latencies.push(performance.now() - t0);
        // The webhook adds a native sidecar: an init container with restartPolicy Always.
        const created = JSON.parse(r.body) as { spec: { template: { spec: { initContainers?: Array<{ restartPolicy?: string }> } } } };
        if ((created.spec.template.spec.initContainers ?? []).some((c) => c.restartPolicy === 'Always')) mutated++;
        break;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(CONCURRENCY, n) }, worker));
  const wallMs = performance.now() - started;
  latencies.sort((a, b) => a - b);
  return { jobs: n, wallMs, latenciesMs: latencies, throttled, mutated };
}

/** Cumulative bucket counts of the webhook's admission-latency histogram, by upper bound (seconds). */
async function scrape(api: Api): Promise<Map<number, number>> {
  const r = await api.call('GET', '/metrics');
  if (r.status !== 200) throw new Error(`/metrics: ${r.status}`);
  const buckets = new Map<number, number>();
  for (const line of r.body.split('\n')) {
    if (!line.startsWith(`${METRIC}_bucket{`)) continue;
    if (!line.includes(`name="${WEBHOOK_NAME}"`) || !line.includes('operation="CREATE"') || !line.includes('type="admit"')) continue;
    const le = /le="([^"]+)"/.exec(line)?.[1];
    const value = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (le === undefined) continue;
    const bound = le === '+Inf' ? Infinity : Number(le);
    // rejected="true" and "false" are separate series: add them up.
    buckets.set(bound, (buckets.get(bound) ?? 0) + value);
  }
  return buckets;
}

/** The no-op webhook as a process of its own: bundled, plain node. */
async function startNoop(bundle: string, logsDir: string, nodeArgs: string[]): Promise<{ port: number; ca: string; child: ChildProcess; calls(): Promise<{ allow: number; static: number }>; stop(): Promise<void> }> {
  const child = spawn(process.execPath, [...nodeArgs, bundle], { stdio: ['ignore', 'pipe', 'inherit'], cwd: logsDir, env: { ...process.env, NAMESPACE_ANNOTATIONS: JSON.stringify(NAMESPACE_ANNOTATIONS) } });
  const first = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', resolve);
    child.once('exit', (c) => reject(new Error(`the no-op webhook exited with ${c}`)));
  });
  const { port, ca } = JSON.parse(first) as { port: number; ca: string };
  return {
    port,
    ca,
    child,
    calls: async () => JSON.parse((await get(port, '/calls')).body) as { allow: number; static: number },
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

/** A configuration as read back, ready to create again: server-set metadata dropped. */
function recreatable(cfg: Json): Json {
  const m = cfg.metadata as Json;
  return { apiVersion: cfg.apiVersion, kind: cfg.kind, metadata: { name: m.name, labels: m.labels }, webhooks: cfg.webhooks };
}

interface ArmStats {
  bursts: BurstResult[];
  /** CPU ms the arm's webhook process used during its bursts. */
  webhookCpuMs: number;
  /** When its bursts ran, on the clock of --cpu-prof's timestamps (µs, CLOCK_MONOTONIC). */
  windows: Array<{ fromUs: number; toUs: number }>;
  /** Per-burst deltas of the API server's histogram of the webhook's latency (webhook arms). */
  histogram: Map<number, number>;
}

async function main(): Promise<void> {
  const bundled = join(ROOT, 'dist/jobharvest.mjs');
  if (!existsSync(bundled)) throw new Error(`${bundled} is missing: run npm run build first`);
  const job = loadYaml<Json>(readFileSync(join(here, 'job.yaml'), 'utf8'));
  // No CronJob owns these Jobs in this cluster.
  delete (job.metadata as Json).ownerReferences;
  const noopBundle = await bundleEntry(join(here, 'noop.ts'));

  const started = Date.now();
  const cluster = await startCluster({ controllers: [], log });
  log(`control plane: Kubernetes ${cluster.versions.kubernetes} at ${cluster.server} (up in ${((Date.now() - started) / 1000).toFixed(1)} s)`);
  const api = new Api(cluster);
  let webhook: WebhookProcess | undefined;
  let noop: Awaited<ReturnType<typeof startNoop>> | undefined;
  let failed = false;
  try {
    await api.must('POST', '/api/v1/namespaces', { metadata: { name: NAMESPACE, annotations: NAMESPACE_ANNOTATIONS } });
    log(`${JOBS} Jobs per burst, ${CONCURRENCY} in flight; rounds ${MIN_ROUNDS}-${MAX_ROUNDS} until added p50 is stable within ±${STABLE_MS} ms over ${STABLE_ROUNDS} rounds`);

    const nodeArgs = CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${CPU_PROF}`] : [];
    webhook = await startWebhook(cluster, { name: CONFIG_NAME, failurePolicy: 'Fail', bundle: true, nodeArgs });
    noop = await startNoop(noopBundle, cluster.logsDir, nodeArgs);
    const jhConfig = recreatable(await api.must('GET', `${CONFIGS}/${CONFIG_NAME}`));
    const referenceConfig = (name: string, path: string) => {
      const cfg = structuredClone(jhConfig);
      (cfg.metadata as Json).name = name;
      for (const w of cfg.webhooks as Array<{ clientConfig: Json }>) {
        w.clientConfig = { url: `https://127.0.0.1:${noop!.port}${path}`, caBundle: Buffer.from(noop!.ca).toString('base64') };
      }
      return cfg;
    };
    const configs: Record<Arm, Json | undefined> = { none: undefined, 'no-op': referenceConfig(NOOP_CONFIG_NAME, '/allow'), static: referenceConfig(STATIC_CONFIG_NAME, '/static'), jobharvest: jhConfig };
    const nameOf = (cfg: Json) => (cfg.metadata as Json).name as string;
    const wh = (jhConfig.webhooks as Json[])[0]!;
    log(`the three webhooks registered as: failurePolicy ${String(wh.failurePolicy)}, timeoutSeconds ${String(wh.timeoutSeconds)}, matchPolicy ${String(wh.matchPolicy)}, reinvocationPolicy ${String(wh.reinvocationPolicy)}, sideEffects ${String(wh.sideEffects)}`);

    const n = noop;
    const present = new Set<string>([CONFIG_NAME]);
    /** Registers the arm's webhook alone, and returns once a probe Job shows the API server calls it (and only it). */
    const activate = async (arm: Arm) => {
      const wanted = configs[arm];
      const want = wanted ? nameOf(wanted) : undefined;
      for (const name of [CONFIG_NAME, NOOP_CONFIG_NAME, STATIC_CONFIG_NAME]) {
        if (name !== want && present.has(name)) {
          await api.must('DELETE', `${CONFIGS}/${name}`);
          present.delete(name);
        }
      }
      if (wanted && want && !present.has(want)) {
        await api.must('POST', CONFIGS, wanted);
        present.add(want);
      }
      for (let i = 0; ; i++) {
        const before = await n.calls();
        const probe = await burst(api, job, 1);
        const after = await n.calls();
        const allowCalled = after.allow > before.allow;
        const staticCalled = after.static > before.static;
        const ok =
          arm === 'jobharvest'
            ? probe.mutated === 1 && !allowCalled && !staticCalled
            : arm === 'static'
              ? probe.mutated === 1 && staticCalled && !allowCalled
              : arm === 'no-op'
                ? probe.mutated === 0 && allowCalled && !staticCalled
                : probe.mutated === 0 && !allowCalled && !staticCalled;
        if (ok) return;
        if (i > 200) throw new Error(`the API server did not switch to the ${arm} arm`);
        await sleep(100);
      }
    };

    const stats = new Map<Arm, ArmStats>(ARMS.map((a) => [a, { bursts: [], webhookCpuMs: 0, windows: [], histogram: new Map() }]));
    const pidOf = (arm: Arm) => (arm === 'jobharvest' ? webhook!.child.pid : arm === 'none' ? undefined : n.child.pid);
    // Warm-up: JIT, TLS sessions and connection pools of each arm.
    for (const arm of ARMS) {
      await activate(arm);
      await burst(api, job, WARMUP);
    }

    const pooled = (arm: Arm) => stats.get(arm)!.bursts.flatMap((b) => b.latenciesMs).sort((a, b) => a - b);
    const estimates: number[] = [];
    let rounds = 0;
    let stable = false;
    console.log('');
    console.log('round  order                               none p50/p99     no-op p50/p99    static p50/p99   jobharvest p50/p99   added p50/p99 (round)   added p50/p99 (pooled)');
    while (rounds < MAX_ROUNDS) {
      rounds++;
      const order = ARMS.map((_, i) => ARMS[(i + rounds - 1) % ARMS.length]!);
      const thisRound = new Map<Arm, BurstResult>();
      for (const arm of order) {
        await activate(arm);
        const before = arm === 'none' ? undefined : await scrape(api);
        const cpuBefore = processCpuMs(pidOf(arm));
        const fromUs = Number(process.hrtime.bigint() / 1000n);
        const r = await burst(api, job, JOBS);
        stats.get(arm)!.webhookCpuMs += processCpuMs(pidOf(arm)) - cpuBefore;
        stats.get(arm)!.windows.push({ fromUs, toUs: Number(process.hrtime.bigint() / 1000n) });
        if (before) {
          const h = stats.get(arm)!.histogram;
          for (const [bound, count] of await scrape(api)) h.set(bound, (h.get(bound) ?? 0) + count - (before.get(bound) ?? 0));
        }
        const expectMutated = arm === 'jobharvest' || arm === 'static' ? JOBS : 0;
        if (r.mutated !== expectMutated) throw new Error(`${arm} burst: ${r.mutated}/${JOBS} Jobs mutated, expected ${expectMutated}`);
        stats.get(arm)!.bursts.push(r);
        thisRound.set(arm, r);
      }
      // Keep etcd's size the same from round to round.
      await api.must('DELETE', `/apis/batch/v1/namespaces/${NAMESPACE}/jobs?propagationPolicy=Background`);

      const q = (l: number[], p: number) => quantile(l, p);
      const pair = (l: number[]) => `${fmt(q(l, 0.5))}/${fmt(q(l, 0.99))}`.padEnd(17);
      const jh = thisRound.get('jobharvest')!.latenciesMs;
      const no = thisRound.get('no-op')!.latenciesMs;
      const pj = pooled('jobharvest');
      const pn = pooled('no-op');
      const est = q(pj, 0.5) - q(pn, 0.5);
      estimates.push(est);
      console.log(
        `${String(rounds).padStart(5)}  ${order.join(', ').padEnd(35)} ${pair(thisRound.get('none')!.latenciesMs)}${pair(no)}${pair(thisRound.get('static')!.latenciesMs)}${pair(jh).padEnd(21)}${`${fmt(q(jh, 0.5) - q(no, 0.5))}/${fmt(q(jh, 0.99) - q(no, 0.99))}`.padEnd(24)}${fmt(est)}/${fmt(q(pj, 0.99) - q(pn, 0.99))}`,
      );
      if (rounds >= MIN_ROUNDS && stableWithin(estimates, STABLE_ROUNDS, STABLE_MS)) {
        stable = true;
        break;
      }
    }

    console.log('');
    console.log('arm          bursts   jobs  jobs/s  p50_ms  p99_ms  max_ms   429   webhook p50/p99 ms (API server)   webhook CPU µs/Job');
    for (const arm of ARMS) {
      const s = stats.get(arm)!;
      const l = pooled(arm);
      const wall = s.bursts.reduce((t, b) => t + b.wallMs, 0);
      const delta = [...s.histogram];
      const seen = arm === 'none' ? '' : `${fmt(histogramQuantile(0.5, delta) * 1000)}/${fmt(histogramQuantile(0.99, delta) * 1000)}`.padEnd(33) + fmt((s.webhookCpuMs * 1000) / l.length, 0);
      console.log(
        `${arm.padEnd(12)} ${String(s.bursts.length).padStart(6)} ${String(l.length).padStart(6)} ${fmt((l.length * 1000) / wall).padStart(7)} ${fmt(quantile(l, 0.5)).padStart(7)} ${fmt(quantile(l, 0.99)).padStart(7)} ${fmt(l.at(-1) ?? NaN).padStart(7)} ${String(s.bursts.reduce((t, b) => t + b.throttled, 0)).padStart(5)}   ${seen}`,
      );
    }
    const [none, no, st, jh] = ARMS.map(pooled) as [number[], number[], number[], number[]];
    console.log('');
    const diff = (a: number[], b: number[]) => `p50 ${fmt(quantile(a, 0.5) - quantile(b, 0.5))} ms, p99 ${fmt(quantile(a, 0.99) - quantile(b, 0.99))} ms`;
    console.log(`any webhook (no-op minus none): ${diff(no, none)}`);
    console.log(`the mutation itself: API server, etcd, client (static patch minus no-op): ${diff(st, no)}`);
    console.log(`jobharvest's own work per review (jobharvest minus static patch): ${diff(jh, st)}`);
    console.log(`rounds=${rounds} stable=${stable ? 'yes' : 'no'} (added p50 of the last ${STABLE_ROUNDS} rounds: ${estimates.slice(-STABLE_ROUNDS).map((e) => fmt(e)).join(', ')} ms)`);
    if (CPU_PROF) {
      // For profile-file.ts --windows: each webhook's profile restricted to its own bursts.
      // The no-op and static arms share a process: its windows are both arms'.
      const byPid = Object.fromEntries(
        (['no-op', 'jobharvest'] as const).map((a) => {
          const arms: Arm[] = a === 'no-op' ? ['no-op', 'static'] : [a];
          return [String(pidOf(a)), { arm: arms.join(' + '), jobs: arms.reduce((t, x) => t + pooled(x).length, 0), windows: arms.flatMap((x) => stats.get(x)!.windows) }];
        }),
      );
      writeFileSync(join(CPU_PROF, 'windows.json'), JSON.stringify(byPid));
      log(`profiles in ${CPU_PROF}; windows.json holds each webhook's burst windows by pid`);
    }
    console.log(`added_p50_ms=${fmt(quantile(jh, 0.5) - quantile(no, 0.5))} added_p99_ms=${fmt(quantile(jh, 0.99) - quantile(no, 0.99))}   (jobharvest minus no-op, per Job, same run)`);
  } catch (err) {
    failed = true;
    throw err;
  } finally {
    await webhook?.stop();
    await noop?.stop();
    api.close();
    const { keptDir } = await cluster.stop({ failed });
    if (keptDir) log(`kept ${keptDir} (logs of the failed run)`);
  }
}

await main();
