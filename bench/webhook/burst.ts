// `npm run bench:burst`: the webhook under a burst of Job creations through a
// real API server (the test control plane: etcd + kube-apiserver, no
// controllers, so nothing but the creations loads it).
//
// Each burst creates BURST_JOBS Jobs (bench/webhook/job.yaml) into an
// opted-in namespace, at most BURST_CONCURRENCY in flight, as fast as the API
// server admits them (a 429 from priority and fairness is retried). Bursts:
//   1. without the webhook registered (baseline)
//   2. with the webhook registered (`jobharvest webhook --webhook-url`, as a
//      developer runs it out of cluster), after a warm-up
//   3. without it again, so drift in the machine's load shows
// Reported per burst: creation latency as the client sees it (p50/p99) and the
// burst's wall time; for the webhook burst, the webhook's latency as the API
// server measured it: the apiserver_admission_webhook_admission_duration_seconds
// histogram, the difference of two /metrics scrapes around the burst.
// The control plane, the webhook and their folders are removed at the end,
// on failure too.
import { Agent, request } from 'node:https';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadYaml } from '@kubernetes/client-node';
import { startCluster, type Cluster } from '../../test/harness/cluster/harness.ts';
import { startWebhook, type WebhookProcess } from '../../test/support/webhook-process.ts';

const JOBS = Number(process.env.BURST_JOBS ?? 500);
const CONCURRENCY = Number(process.env.BURST_CONCURRENCY ?? 32);
const WARMUP = 50;
const NAMESPACE = 'team-a';
const CONFIG_NAME = 'jobharvest-burst';
const WEBHOOK_NAME = 'jobs.jobharvest.io';
const METRIC = 'apiserver_admission_webhook_admission_duration_seconds';

const here = fileURLToPath(new URL('.', import.meta.url));
const log = (m: string) => console.log(`[burst] ${m}`);
const fmt = (n: number, d = 1) => (Number.isFinite(n) ? n.toFixed(d) : 'n/a');

type Json = Record<string, unknown>;

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
  name: string;
  jobs: number;
  wallMs: number;
  latenciesMs: number[];
  throttled: number;
  mutated: number;
}

function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
}

/** Creates `n` Jobs with at most CONCURRENCY in flight; a 429 is retried after the time the server asks for. */
async function burst(api: Api, job: Json, name: string, n: number): Promise<BurstResult> {
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
          await new Promise((res) => setTimeout(res, 100));
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
  return { name, jobs: n, wallMs, latenciesMs: latencies, throttled, mutated };
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

/** The q-quantile of a cumulative histogram, interpolated within its bucket as PromQL's histogram_quantile does. */
function histogramQuantile(q: number, cumulative: Array<[number, number]>): number {
  const sorted = cumulative.toSorted((a, b) => a[0] - b[0]);
  const total = sorted.at(-1)?.[1] ?? 0;
  if (total === 0) return NaN;
  const rank = q * total;
  let prevBound = 0;
  let prevCount = 0;
  for (const [bound, count] of sorted) {
    if (count >= rank) {
      if (bound === Infinity) return prevBound;
      return prevBound + ((bound - prevBound) * (rank - prevCount)) / (count - prevCount);
    }
    prevBound = bound;
    prevCount = count;
  }
  return NaN;
}

function printRow(r: BurstResult): void {
  const l = r.latenciesMs;
  console.log(
    `${r.name.padEnd(30)} ${String(r.jobs).padStart(5)} ${fmt(r.wallMs / 1000, 2).padStart(7)} ${fmt((r.jobs * 1000) / r.wallMs).padStart(8)} ${fmt(quantile(l, 0.5)).padStart(7)} ${fmt(quantile(l, 0.99)).padStart(7)} ${fmt(l.at(-1) ?? NaN).padStart(7)} ${String(r.throttled).padStart(5)} ${String(r.mutated).padStart(7)}`,
  );
}

async function main(): Promise<void> {
  const job = loadYaml<Json>(readFileSync(join(here, 'job.yaml'), 'utf8'));
  // No CronJob owns these Jobs in this cluster.
  delete (job.metadata as Json).ownerReferences;

  const started = Date.now();
  const cluster = await startCluster({ controllers: [], log });
  log(`control plane: Kubernetes ${cluster.versions.kubernetes} at ${cluster.server} (up in ${((Date.now() - started) / 1000).toFixed(1)} s)`);
  const api = new Api(cluster);
  let webhook: WebhookProcess | undefined;
  let failed = false;
  try {
    // Opted in, with a durable sink so the webhook also sets the TTL: the whole patch.
    await api.must('POST', '/api/v1/namespaces', {
      metadata: { name: NAMESPACE, annotations: { 'jobharvest.io/inject': 'enabled', 'jobharvest.io/sink': 'http', 'jobharvest.io/endpoint': 'http://127.0.0.1:9/ingest' } },
    });
    log(`${JOBS} Jobs per burst, ${CONCURRENCY} in flight; warm-up ${WARMUP}`);
    await burst(api, job, 'warm-up', WARMUP);
    const rows: BurstResult[] = [];
    rows.push(await burst(api, job, 'without webhook', JOBS));

    webhook = await startWebhook(cluster, { name: CONFIG_NAME, failurePolicy: 'Fail' });
    // The API server picks up a new webhook configuration from its informer: wait until a Job comes back mutated.
    for (let i = 0; ; i++) {
      if ((await burst(api, job, 'probe', 1)).mutated === 1) break;
      if (i > 100) throw new Error('the API server never called the webhook');
      await new Promise((res) => setTimeout(res, 100));
    }
    await burst(api, job, 'warm-up', WARMUP);
    const before = await scrape(api);
    const withWebhook = await burst(api, job, 'with webhook', JOBS);
    const after = await scrape(api);
    rows.push(withWebhook);

    await api.must('DELETE', `/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/${CONFIG_NAME}`);
    for (let i = 0; ; i++) {
      if ((await burst(api, job, 'probe', 1)).mutated === 0) break;
      if (i > 100) throw new Error('the API server kept calling the webhook after its configuration was deleted');
      await new Promise((res) => setTimeout(res, 100));
    }
    rows.push(await burst(api, job, 'without webhook (again)', JOBS));

    const delta: Array<[number, number]> = [...after].map(([bound, count]) => [bound, count - (before.get(bound) ?? 0)]);
    const calls = delta.find(([b]) => b === Infinity)?.[1] ?? 0;
    const p50 = histogramQuantile(0.5, delta);
    const p99 = histogramQuantile(0.99, delta);
    const bucketOf = (v: number) => delta.map(([b]) => b).sort((a, b) => a - b).find((b) => b >= v);

    console.log('');
    console.log('burst                           jobs  wall_s  jobs/s  p50_ms  p99_ms  max_ms   429 mutated');
    for (const r of rows) printRow(r);
    const base = [rows[0]!, rows[2]!];
    const baseP50 = base.reduce((s, r) => s + quantile(r.latenciesMs, 0.5), 0) / 2;
    const baseP99 = base.reduce((s, r) => s + quantile(r.latenciesMs, 0.99), 0) / 2;
    const baseWall = base.reduce((s, r) => s + r.wallMs, 0) / 2;
    console.log('');
    console.log(`webhook calls during the burst (API server): ${calls}; buckets (le s: count) ${delta.toSorted((a, b) => a[0] - b[0]).filter(([, c]) => c > 0).map(([b, c]) => `${b}: ${c}`).join(', ')}`);
    console.log(`webhook latency as the API server sees it: p50 ${fmt(p50 * 1000)} ms, p99 ${fmt(p99 * 1000)} ms (interpolated in the histogram's bucket up to ${bucketOf(p99)} s)`);
    console.log(
      `added creation latency with the webhook (vs the mean of the two bursts without): p50 +${fmt(quantile(withWebhook.latenciesMs, 0.5) - baseP50)} ms, p99 +${fmt(quantile(withWebhook.latenciesMs, 0.99) - baseP99)} ms, burst wall +${fmt((withWebhook.wallMs - baseWall) / 1000, 2)} s`,
    );
    console.log(`webhook_p99_ms=${fmt(p99 * 1000)} added_p50_ms=${fmt(quantile(withWebhook.latenciesMs, 0.5) - baseP50)} added_p99_ms=${fmt(quantile(withWebhook.latenciesMs, 0.99) - baseP99)} mutated=${withWebhook.mutated}/${withWebhook.jobs}`);
  } catch (err) {
    failed = true;
    throw err;
  } finally {
    await webhook?.stop();
    api.close();
    const { keptDir } = await cluster.stop({ failed });
    if (keptDir) log(`kept ${keptDir} (logs of the failed run)`);
  }
}

await main();
