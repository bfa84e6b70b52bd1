// `npm run bench:harvester`: the harvester against a hostile log server
// (scenario 5 of the harvester's design): 200 Jobs need a harvest at once and
// the approved destination answers every request with 503 and a 30 MiB body.
//
// On this machine, as processes: a real control plane (etcd, kube-apiserver,
// kube-controller-manager), the webhook, one harvester (its own program,
// default settings: concurrency 4, one request in flight per harvest) and the
// test kubelet running the real sidecar. The 503 server runs in this process.
//
//   - The sidecars ship to the same server (its endpoint is the harvester's
//     approved destination, allow ['loopback']) with a 1 s drain budget, so
//     each ends with unsent lines and its Job is held and harvested. They get
//     a short 503 body: only the harvester's requests (told apart by their
//     User-Agent, `jobharvest-harvester (...)`) get the 30 MiB one, which keeps
//     the run cheap on two cores.
//   - The harvester runs with `--max-hold-seconds 1` (everything else is its
//     default), so each harvest gives up after about 3 s and every Job is held,
//     harvested and released within the run; the Jobs' own TTL (15 min) keeps
//     the ones still queued.
//   - Concurrency is observed from outside, at the server: a harvest is the
//     span from the first to the end of the last of the harvester's requests
//     for one pod (the pod named in the records of the body), and the figure
//     is the most such spans overlapping at once. The most requests open at
//     once (arrival to the end of the answer, sampled every 100 ms too) is
//     logged beside it: one request in flight per harvest, but short ones
//     rarely meet.
//   - Memory: VmHWM (peak RSS) of the harvester's node process, from
//     /proc/<pid>/status. It runs the bundle, `node dist/harvester.mjs`, as the
//     image does; HARVESTER_TSX=1 runs harvester/entry.ts under tsx instead (the
//     e2e tests' way), whose node child (pgrep -P) carries the transpiler too:
//     about 90 MiB more at idle.
//   - Admission: N Job creations through the API server with the webhook, one
//     at a time, before the 200 Jobs (baseline) and again while the harvests
//     run (after every Job has finished, so the kubelet's pods do not weigh on
//     it); the Jobs are suspended, in a namespace no kubelet schedules.
//
//   - Jobs never touched: UNTOUCHED_JOBS (60) suspended Jobs of ~1 MiB each
//     in a namespace that never opted in, created while the harvester idles;
//     its RSS before and 10 s after, against their size.
//
//   - A namespace per CI run (issue 41): HARVEST_NAMESPACES (200) namespaces,
//     created 20 at a time with one injected Job each (pending: no kubelet
//     takes their pods), left alone for a minute, then deleted, and a minute
//     after they are gone. The namespaced pod watches and list calls are
//     counted at the API server (its apiserver_longrunning_requests and
//     apiserver_request_total, namespace scope: nothing else here lists or
//     watches pods per namespace), beside the harvester's own gauge
//     (jobharvest_harvester_pod_watches, --metrics-port; HARVESTER_METRICS=0
//     leaves the flag out, for a harvester that has none); warnings are its log
//     lines at warn naming one of those namespaces. The admission namespace's
//     suspended Jobs keep its watch: pod_watches_before (1) stays after.
//
//   - Memory per kept pod report and per watched Job: bench/harvester/memory.ts
//     in a child, first (HARVESTER_MEMORY=0 leaves it out; HARVESTER_MEMORY_ONLY=1
//     prints only these rows, without a cluster).
//
// Prints `kept_pod message_bytes=… heap_bytes_per_pod=… estimate_bytes_per_pod=… fit_in_default_budget=…`
// (three rows), `watched_job heap_bytes_per_job=… namespaces=…`, `uninjected_pods=300 kept=0 heap_growth_MiB=…`,
// `untouched_jobs=… untouched_MiB=… rss_growth_MiB=… ratio_growth_to_size=…`,
// `namespaces_created=… namespaces_deleted=… pod_watches_before=… pod_watches_peak=… pod_watches_after=… pod_lists_per_min_alive=… pod_lists_per_min_after=… warnings=… rss_start_MiB=… rss_peak_MiB=… rss_after_MiB=…`,
// `harvests=… concurrency=… peak_rss_MiB=… limit_MiB=256` and
// `admission_p50_ms=… admission_p99_ms=… baseline_p50_ms=… baseline_p99_ms=… ratio_p99=…`.
// HARVEST_JOBS=0, UNTOUCHED_JOBS=0 or HARVEST_NAMESPACES=0 leaves that part out.
// Bounded (RUN_LIMIT_MS); everything it started is stopped, on failure too.
import { BatchV1Api, CoreV1Api, Watch, type V1Job } from '@kubernetes/client-node';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';
import { DELIVERY_ANNOTATION, HOLD_ANNOTATION } from '../../src/contract/harvest.ts';
import { startCluster, type Cluster } from '../../test/harness/cluster/harness.ts';
import { createLogReaderClusterRole, kubeConfigFor, shellJob, Stack, WEBHOOK_NAMESPACE } from '../../test/harness/kubelet/stack.ts';
import { TestKubelet } from '../../test/harness/kubelet/kubelet.ts';
import { destinationsFile, signingKeyFile, startHarvester, type HarvesterProcess } from '../../test/support/harvester-process.ts';
import { freePort } from '../../test/support/ports.ts';
import { ensureSidecarBundle } from '../../test/support/sidecar.ts';
import { startWebhook, type WebhookProcess } from '../../test/support/webhook-process.ts';

const JOBS = Number(process.env.HARVEST_JOBS ?? 200);
const ADMISSION_N = Number(process.env.ADMISSION_JOBS ?? 50);
/** Jobs whose pods may run on the test kubelet at once while the 200 are created. */
const RUNNING_AT_ONCE = 25;
/** The 503 body for the harvester; HOSTILE_BODY_MIB=0 gives a control run with empty answers. */
const BODY_MIB = Number(process.env.HOSTILE_BODY_MIB ?? 30);
const LIMIT_MIB = 320;
const RUN_LIMIT_MS = 14 * 60_000;
const NAME = 'hvbench';
const WORK_NS = `${NAME}-work`;
const ADMIT_NS = 'hvbench-admission';
/** Jobs in a namespace that never opted in: the harvester must not hold them. */
const UNTOUCHED = Number(process.env.UNTOUCHED_JOBS ?? 60);
const UNTOUCHED_NS = 'hvbench-untouched';
/** Namespaces made, one injected Job each, and deleted (a namespace per CI run). */
const NAMESPACES = Number(process.env.HARVEST_NAMESPACES ?? 200);
const NS_BATCH = 20;
/** How long the namespaces stand with their Jobs pending, and how long the harvester is watched once they are gone. */
const NS_ALIVE_MS = 60_000;
const NS_AFTER_MS = 60_000;
const HARVESTER_METRICS = process.env.HARVESTER_METRICS !== '0';

const TSX = process.env.HARVESTER_TSX === '1';

const t0 = Date.now();
const log = (m: string) => console.log(`[harvester-bench ${((Date.now() - t0) / 1000).toFixed(1).padStart(6)} s] ${m}`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const fmt = (n: number, d = 1) => (Number.isFinite(n) ? n.toFixed(d) : 'n/a');

function checkTime(what: string): void {
  if (Date.now() - t0 > RUN_LIMIT_MS) throw new Error(`run limit (${RUN_LIMIT_MS / 1000} s) reached while ${what}`);
}

function quantile(sorted: number[], q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
}

/** The 503 server: a 30 MiB answer to the harvester, a short one to everyone else. */
class HostileServer {
  active = 0;
  peak = 0;
  harvesterRequests = 0;
  otherRequests = 0;
  /** Peak of the count sampled every 100 ms, as a cross-check of the exact peak. */
  sampledPeak = 0;
  /** Per pod: when its first harvest request arrived and its last answer ended. */
  readonly harvests = new Map<string, { first: number; last: number }>();
  private readonly chunk = Buffer.alloc(1024 * 1024, 'x');
  private readonly server = createServer((req, res) => this.handle(req, res));
  private sampler: NodeJS.Timeout | undefined;

  async start(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.sampler = setInterval(() => (this.sampledPeak = Math.max(this.sampledPeak, this.active)), 100);
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/ingest`;
  }

  /** The most harvests whose spans overlap. */
  peakHarvests(): number {
    const edges: Array<[number, number]> = [];
    for (const h of this.harvests.values()) edges.push([h.first, 1], [h.last, -1]);
    edges.sort((a, b) => a[0] - b[0] || b[1] - a[1]);
    let open = 0;
    let peak = 0;
    for (const [, d] of edges) peak = Math.max(peak, (open += d));
    return peak;
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const ua = String(req.headers['user-agent'] ?? '');
    if (!ua.startsWith('jobharvest-harvester')) {
      req.resume();
      this.otherRequests++;
      res.writeHead(503, { 'content-type': 'text/plain' }).end('unavailable');
      return;
    }
    const arrived = performance.now();
    this.harvesterRequests++;
    this.active++;
    this.peak = Math.max(this.peak, this.active);
    const body: Buffer[] = [];
    req.on('data', (c: Buffer) => body.push(c));
    let open = true;
    const done = () => {
      if (!open) return;
      open = false;
      this.active--;
      let pod = '?';
      try {
        const raw = Buffer.concat(body);
        const text = (req.headers['content-encoding'] === 'gzip' ? gunzipSync(raw) : raw).toString('utf8');
        const doc = JSON.parse(text.slice(0, text.indexOf('\n') >>> 0)) as Record<string, unknown>;
        pod = String(doc['k8s.pod.uid'] ?? doc['k8s.pod.name'] ?? '?');
      } catch {
        // not a body of records
      }
      const h = this.harvests.get(pod);
      if (h) h.last = performance.now();
      else this.harvests.set(pod, { first: arrived, last: performance.now() });
    };
    res.on('close', done);
    res.writeHead(503, { 'content-type': 'text/plain', 'content-length': String(BODY_MIB * this.chunk.length) });
    let sent = 0;
    const pump = () => {
      while (sent < BODY_MIB) {
        sent++;
        if (!res.write(this.chunk)) return void res.once('drain', pump);
      }
      res.end();
    };
    pump();
  }

  async stop(): Promise<void> {
    clearInterval(this.sampler);
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** The harvester as the image runs it: `node dist/harvester.mjs`, the same flags as test/support/harvester-process.ts gives. */
/** The harvester's node process: the bundle's is the child itself; tsx runs harvester/entry.ts as its child. */
function harvesterPid(h: HarvesterProcess): number {
  if (!TSX) return h.child.pid!;
  const tsx = h.child.pid!;
  try {
    const kids = execFileSync('pgrep', ['-P', String(tsx)], { encoding: 'utf8' }).split('\n').filter(Boolean).map(Number);
    const node = kids.find((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('harvester/entry.ts');
      } catch {
        return false;
      }
    });
    if (node) return node;
  } catch {
    // no child (yet)
  }
  throw new Error(`no node child of tsx (${tsx}) running harvester/entry.ts`);
}

function statusKiB(pid: number, field: 'VmHWM' | 'VmRSS'): number | undefined {
  try {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

type Samples = Map<string, number>;

/** Prometheus text: the sum of the samples of `name` whose labels include all of `labels`. */
function sumOf(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (!Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

/** The API server's /metrics, as the cluster's admin. */
function apiserverMetrics(info: { server: string; token: string; caPem: string }): Promise<string> {
  return new Promise((resolve, reject) => {
    const url = new URL('/metrics', info.server);
    const req = httpsRequest({ host: url.hostname, port: url.port, path: url.pathname, ca: info.caPem, headers: { authorization: `Bearer ${info.token}` }, timeout: 10_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => (res.statusCode === 200 ? resolve(body) : reject(new Error(`apiserver /metrics: ${res.statusCode}`))));
    });
    req.on('timeout', () => req.destroy(new Error('apiserver /metrics: timeout')));
    req.on('error', reject);
    req.end();
  });
}

/** Namespaced pod watches open at the API server, and its namespaced pod LIST calls so far. */
async function podCalls(info: { server: string; token: string; caPem: string }): Promise<{ watches: number; lists: number }> {
  const text = await apiserverMetrics(info);
  const pods = { resource: 'pods', scope: 'namespace', subresource: '' };
  return { watches: sumOf(text, 'apiserver_longrunning_requests', { ...pods, verb: 'WATCH' }), lists: sumOf(text, 'apiserver_request_total', { ...pods, verb: 'LIST' }) };
}

async function harvesterMetrics(port: number): Promise<Samples | undefined> {
  if (!port) return undefined;
  try {
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    return new Map([['pod_watches', sumOf(text, 'jobharvest_harvester_pod_watches')], ['pod_lists', sumOf(text, 'jobharvest_harvester_list_requests_total', { resource: 'pods' })]]);
  } catch {
    return undefined;
  }
}

/** Creates Jobs one at a time through the API server (the webhook mutating each); latency per creation. */
async function admission(batch: BatchV1Api, tag: string, n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const body = shellJob(`${tag}-${i}`, { script: 'true' });
    body.spec!.suspend = true;
    const started = performance.now();
    const job = await batch.createNamespacedJob({ namespace: ADMIT_NS, body });
    out.push(performance.now() - started);
    if (!(job.spec?.template.spec?.initContainers ?? []).some((c) => c.restartPolicy === 'Always')) throw new Error(`${tag}-${i} was not mutated by the webhook`);
    await sleep(100);
  }
  return out.sort((a, b) => a - b);
}

const finished = (j: V1Job) => (j.status?.conditions ?? []).some((c) => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True');

/** A namespace per CI run: NAMESPACES namespaces with one injected Job each, created, left a minute, deleted. */
async function namespacesPhase(o: { info: { server: string; token: string; caPem: string }; core: CoreV1Api; batch: BatchV1Api; pid: number; logPath: string; metricsPort: number; annotations: Record<string, string> }): Promise<void> {
  const names = Array.from({ length: NAMESPACES }, (_, i) => `${NAME}-ci-${i}`);
  const inBatches = async (f: (name: string) => Promise<unknown>) => {
    for (let i = 0; i < names.length; i += NS_BATCH) {
      checkTime('creating or deleting the CI namespaces');
      await Promise.all(names.slice(i, i + NS_BATCH).map(f));
    }
  };
  const rss = () => (statusKiB(o.pid, 'VmRSS') ?? 0) / 1024;
  const logLines = () => readFileSync(o.logPath, 'utf8').split('\n').filter((l) => l.startsWith('{'));
  const warnedBefore = logLines().length;
  let peakWatches = 0;
  let peakHarvesterWatches = 0;
  let peakRss = 0;
  const sampler = setInterval(() => {
    peakRss = Math.max(peakRss, rss());
    void podCalls(o.info).then((c) => (peakWatches = Math.max(peakWatches, c.watches)), () => undefined);
    void harvesterMetrics(o.metricsPort).then((m) => (peakHarvesterWatches = Math.max(peakHarvesterWatches, m?.get('pod_watches') ?? 0)));
  }, 500);
  try {
    const rssStart = rss();
    // The admission namespace's suspended Jobs are live Jobs: its watch is there before and after.
    const before = await podCalls(o.info);
    const t0ns = Date.now();
    await inBatches(async (name) => {
      await o.core.createNamespace({ body: { metadata: { name, annotations: o.annotations } } });
      await o.batch.createNamespacedJob({ namespace: name, body: shellJob('build', { script: 'echo "ci run"' }) });
    });
    log(`${NAMESPACES} namespaces with one injected Job each created in ${fmt((Date.now() - t0ns) / 1000)} s`);
    // Every namespace's watch open, then a minute with nothing happening in them.
    await sleep(5000);
    const aliveFrom = await podCalls(o.info);
    const aliveFromH = await harvesterMetrics(o.metricsPort);
    await sleep(NS_ALIVE_MS);
    const aliveTo = await podCalls(o.info);
    const aliveToH = await harvesterMetrics(o.metricsPort);
    const rssAlive = rss();
    log(`alive: ${aliveTo.watches} namespaced pod watches at the API server, harvester gauge ${aliveToH?.get('pod_watches') ?? 'n/a'}; pod lists in ${NS_ALIVE_MS / 1000} s: ${aliveTo.lists - aliveFrom.lists} (harvester ${aliveToH && aliveFromH ? aliveToH.get('pod_lists')! - aliveFromH.get('pod_lists')! : 'n/a'}); RSS ${fmt(rssAlive)} MiB`);
    const t0del = Date.now();
    await inBatches((name) => o.core.deleteNamespace({ name }));
    for (;;) {
      checkTime('waiting for the CI namespaces to go');
      const left = (await Promise.all(names.map((name) => o.core.readNamespace({ name }).then(() => 1, () => 0)))).reduce((a: number, b: number) => a + b, 0);
      if (left === 0) break;
      await sleep(1000);
    }
    log(`${NAMESPACES} namespaces deleted and gone in ${fmt((Date.now() - t0del) / 1000)} s`);
    const afterFrom = await podCalls(o.info);
    const afterFromH = await harvesterMetrics(o.metricsPort);
    await sleep(NS_AFTER_MS);
    const afterTo = await podCalls(o.info);
    const afterToH = await harvesterMetrics(o.metricsPort);
    const rssAfter = rss();
    const warnings = logLines()
      .slice(warnedBefore)
      .filter((l) => /"level":"(warn|error)"/.test(l) && names.some((n) => l.includes(`${n}`)));
    const perMin = (n: number, ms: number) => fmt((n * 60_000) / ms);
    log(`after: ${afterTo.watches} namespaced pod watches at the API server, harvester gauge ${afterToH?.get('pod_watches') ?? 'n/a'}; pod lists in ${NS_AFTER_MS / 1000} s: ${afterTo.lists - afterFrom.lists} (harvester ${afterToH && afterFromH ? afterToH.get('pod_lists')! - afterFromH.get('pod_lists')! : 'n/a'}); ${warnings.length} warnings about them${warnings[0] ? `, e.g. ${warnings[0].slice(0, 200)}` : ''}`);
    console.log(
      `namespaces_created=${NAMESPACES} namespaces_deleted=${NAMESPACES} pod_watches_before=${before.watches} pod_watches_peak=${peakWatches} pod_watches_after=${afterTo.watches} ` +
        `harvester_gauge_peak=${o.metricsPort ? peakHarvesterWatches : 'n/a'} harvester_gauge_after=${afterToH?.get('pod_watches') ?? 'n/a'} ` +
        `pod_lists_per_min_alive=${perMin(aliveTo.lists - aliveFrom.lists, NS_ALIVE_MS)} pod_lists_per_min_after=${perMin(afterTo.lists - afterFrom.lists, NS_AFTER_MS)} warnings=${warnings.length} ` +
        `rss_start_MiB=${fmt(rssStart)} rss_peak_MiB=${fmt(Math.max(peakRss, rssAlive))} rss_after_MiB=${fmt(rssAfter)}`,
    );
  } finally {
    clearInterval(sampler);
  }
}

/**
 * The leader's memory per kept pod report and per watched Job
 * (bench/harvester/memory.ts), measured in a child with --expose-gc, before the
 * cluster starts: heap figures need a full collection, and no cluster.
 */
function memoryRows(): void {
  const out = execFileSync(process.execPath, ['--expose-gc', '--import', 'tsx', 'bench/harvester/memory.ts'], { encoding: 'utf8', timeout: 120_000 });
  for (const line of out.trim().split('\n')) console.log(line);
}

async function main(): Promise<void> {
  if (process.env.HARVESTER_MEMORY !== '0') memoryRows();
  if (process.env.HARVESTER_MEMORY_ONLY === '1') return;
  ensureSidecarBundle();
  const server = new HostileServer();
  const endpoint = await server.start();
  let cluster: Cluster | undefined;
  let webhook: WebhookProcess | undefined;
  let harvester: HarvesterProcess | undefined;
  let kubelet: TestKubelet | undefined;
  let watchReq: { abort(): void } | undefined;
  let rssTimer: NodeJS.Timeout | undefined;
  let failed = false;
  try {
    cluster = await startCluster({ log: () => {} });
    const { processes: _p, stop: _s, ...info } = cluster;
    log(`control plane: Kubernetes ${cluster.versions.kubernetes}; 503 server (${BODY_MIB} MiB answers to the harvester) at ${endpoint}`);
    const kc = kubeConfigFor(info);
    const core = kc.makeApiClient(CoreV1Api);
    const batch = kc.makeApiClient(BatchV1Api);
    await createLogReaderClusterRole(kc);
    await core.createNamespace({ body: { metadata: { name: WEBHOOK_NAMESPACE } } });
    const files = {
      signingKeyFile: signingKeyFile(info, NAME),
      destinationsFile: destinationsFile(info, NAME, [{ name: 'hostile', sink: 'http', endpoint, allow: ['loopback'] }]),
    };
    webhook = await startWebhook(info, { name: `jobharvest-${NAME}`, failurePolicy: 'Fail', args: [...Stack.webhookArgs({ name: NAME }), '--signing-key-file', files.signingKeyFile] });
    const metricsPort = HARVESTER_METRICS ? await freePort() : 0;
    const hargs = { name: `jobharvest-${NAME}`, ...files, args: ['--max-hold-seconds', '1', ...(metricsPort ? ['--metrics-port', String(metricsPort)] : [])] };
    harvester = startHarvester(info, { ...hargs, bundle: !TSX });
    kubelet = await TestKubelet.start({ cluster: info, namespaces: (ns) => ns === WORK_NS, restartBackoffMs: 300 });
    const annotations = {
      'jobharvest.io/inject': 'enabled',
      'jobharvest.io/sink': 'http',
      'jobharvest.io/endpoint': endpoint,
      'jobharvest.io/drain-seconds': '1',
      'jobharvest.io/ttl-seconds-after-finished': '900',
    };
    for (const name of [WORK_NS, ADMIT_NS]) await core.createNamespace({ body: { metadata: { name, annotations } } });
    for (const name of [WORK_NS, ADMIT_NS]) {
      for (;;) {
        checkTime('waiting for the default ServiceAccounts');
        if (await core.readNamespacedServiceAccount({ name: 'default', namespace: name }).then(() => true, () => false)) break;
        await sleep(200);
      }
    }
    let pid = 0;
    while (!pid) {
      checkTime('waiting for the harvester process');
      try {
        pid = harvesterPid(harvester);
      } catch {
        await sleep(200);
      }
    }
    let hwmKiB = 0;
    rssTimer = setInterval(() => (hwmKiB = Math.max(hwmKiB, statusKiB(pid, 'VmHWM') ?? 0)), 500);
    log(`harvester: node process ${pid} (${TSX ? 'harvester/entry.ts under tsx' : 'dist/harvester.mjs'}); webhook at ${webhook.url}`);

    // The API server picks the webhook configuration up from an informer: wait until a Job comes back mutated.
    for (let i = 0; ; i++) {
      checkTime('waiting for the webhook');
      try {
        await admission(batch, `probe${i}`, 1);
        break;
      } catch {
        await sleep(200);
      }
    }
    await admission(batch, 'warmup', 10);
    const baseline = await admission(batch, 'baseline', ADMISSION_N);
    log(`baseline admission: ${ADMISSION_N} Jobs, p50 ${fmt(quantile(baseline, 0.5))} ms, p99 ${fmt(quantile(baseline, 0.99))} ms; RSS of the idle harvester ${fmt((statusKiB(pid, 'VmRSS') ?? 0) / 1024)} MiB`);

    // Defect 9 of the first harvester: its informer cached every Job of the
    // cluster in full. Jobs of a namespace that never opted in, ~1 MiB each,
    // must not grow the harvester: it lists and watches only the Jobs the
    // webhook labelled, and keeps their keys only.
    if (UNTOUCHED > 0) {
      await core.createNamespace({ body: { metadata: { name: UNTOUCHED_NS } } });
      for (;;) {
        checkTime('waiting for the default ServiceAccount');
        if (await core.readNamespacedServiceAccount({ name: 'default', namespace: UNTOUCHED_NS }).then(() => true, () => false)) break;
        await sleep(200);
      }
      const rssBefore = statusKiB(pid, 'VmRSS') ?? 0;
      const pad = 'x'.repeat(1024 * 1024 - 200);
      let untouchedBytes = 0;
      for (let i = 0; i < UNTOUCHED; i++) {
        const body = shellJob(`untouched-${i}`, { script: `true # ${pad}` });
        body.spec!.suspend = true;
        untouchedBytes += JSON.stringify(body).length;
        await batch.createNamespacedJob({ namespace: UNTOUCHED_NS, body });
      }
      // Long enough for a watch to have delivered them all, and for a cache to hold them.
      await sleep(10_000);
      const rssAfter = statusKiB(pid, 'VmRSS') ?? 0;
      const growthMiB = (rssAfter - rssBefore) / 1024;
      const untouchedMiB = untouchedBytes / 1024 / 1024;
      log(`${UNTOUCHED} Jobs of ${fmt(untouchedMiB / Math.max(1, UNTOUCHED), 2)} MiB each in ${UNTOUCHED_NS} (not opted in): harvester RSS ${fmt(rssBefore / 1024)} -> ${fmt(rssAfter / 1024)} MiB`);
      console.log(`untouched_jobs=${UNTOUCHED} untouched_MiB=${fmt(untouchedMiB)} rss_growth_MiB=${fmt(growthMiB)} ratio_growth_to_size=${fmt(growthMiB / untouchedMiB, 3)}`);
    }

    if (NAMESPACES > 0) await namespacesPhase({ info, core, batch, pid, logPath: harvester.logPath, metricsPort, annotations });
    if (JOBS === 0) return;

    // Held and released Jobs, as the watch delivers them.
    const heldSeen = new Set<string>();
    const released = new Set<string>();
    const lost = { lines: 0, harvested: 0 };
    watchReq = await new Watch(kc).watch(
      `/apis/batch/v1/namespaces/${WORK_NS}/jobs`,
      {},
      (type, job: V1Job) => {
        const name = job.metadata?.name ?? '';
        const a = job.metadata?.annotations ?? {};
        if (a[HOLD_ANNOTATION]) heldSeen.add(name);
        if (a[DELIVERY_ANNOTATION] && !released.has(name)) {
          released.add(name);
          const d = JSON.parse(a[DELIVERY_ANNOTATION]) as { lost?: number; harvested?: number };
          lost.lines += d.lost ?? 0;
          lost.harvested += d.harvested ?? 0;
        }
        void type;
      },
      (err) => err && log(`watch ended: ${(err as Error).message}`),
    );

    // The 200 Jobs, a few lines each; at most RUNNING_AT_ONCE unfinished at a time, so the kubelet's pods stay cheap.
    const script = 'for i in 1 2 3 4 5; do echo "harvest bench line $i"; done';
    let created = 0;
    let done: V1Job[] = [];
    while (created < JOBS || done.length < JOBS) {
      checkTime(`running the Jobs (${created} created, ${done.length} finished)`);
      const list = await batch.listNamespacedJob({ namespace: WORK_NS });
      done = list.items.filter(finished);
      const unfinished = list.items.length - done.length;
      const room = Math.min(JOBS - created, RUNNING_AT_ONCE - unfinished);
      for (let i = 0; i < room; i++) {
        await batch.createNamespacedJob({ namespace: WORK_NS, body: shellJob(`job-${created}`, { script, terminationGracePeriodSeconds: 5 }) });
        created++;
      }
      await sleep(500);
    }
    log(`all ${JOBS} Jobs finished; held so far ${heldSeen.size}, released ${released.size}, harvester requests at the 503 server ${server.harvesterRequests}, sidecar requests ${server.otherRequests}`);

    // Admission while the harvests run.
    const before = released.size;
    const during = await admission(batch, 'during', ADMISSION_N);
    const overlapped = released.size - before;
    log(`admission during the harvests: p50 ${fmt(quantile(during, 0.5))} ms, p99 ${fmt(quantile(during, 0.99))} ms; ${overlapped} Jobs released meanwhile, ${server.active} harvester requests open at its end`);
    if (overlapped === 0) log('warning: no harvest finished while admission was measured');

    while (released.size < JOBS) {
      checkTime(`waiting for the releases (${released.size} of ${JOBS})`);
      if (harvester.exited()) throw new Error('the harvester exited');
      await sleep(1000);
    }
    hwmKiB = Math.max(hwmKiB, statusKiB(pid, 'VmHWM') ?? 0);
    log(`all ${JOBS} Jobs released: ${lost.lines} lines lost, ${lost.harvested} harvested; ${server.harvesterRequests} harvester requests (${((server.harvesterRequests * BODY_MIB) / 1024).toFixed(1)} GiB of 503 bodies offered), ${server.harvests.size} pods harvested at the server, at most ${server.peakHarvests()} at once; at most ${server.peak} requests open at once (sampled every 100 ms: ${server.sampledPeak})`);
    console.log(`harvests=${heldSeen.size} concurrency=${server.peakHarvests()} peak_rss_MiB=${fmt(hwmKiB / 1024)} limit_MiB=${LIMIT_MIB}`);
    const p50 = quantile(during, 0.5);
    const p99 = quantile(during, 0.99);
    const b50 = quantile(baseline, 0.5);
    const b99 = quantile(baseline, 0.99);
    console.log(`admission_p50_ms=${fmt(p50)} admission_p99_ms=${fmt(p99)} baseline_p50_ms=${fmt(b50)} baseline_p99_ms=${fmt(b99)} ratio_p99=${fmt(p99 / b99, 2)}`);
  } catch (err) {
    failed = true;
    throw err;
  } finally {
    clearInterval(rssTimer);
    watchReq?.abort();
    await kubelet?.stop().catch(() => undefined);
    await harvester?.stop().catch(() => undefined);
    await webhook?.stop().catch(() => undefined);
    await server.stop();
    if (cluster) {
      const { keptDir } = await cluster.stop({ failed });
      if (keptDir) log(`kept ${keptDir} (logs of the failed run)`);
    }
  }
}

await main();
