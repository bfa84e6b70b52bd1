// `npm run bench:abuse`: what a caller that is not the API server can cost
// the webhook. Any pod that reaches the webhook's Service can connect, so the
// bench server (bench/webhook/server.ts, bundled, plain node, production
// logger and the server limits of timeoutSeconds 10) is driven by:
//
// 1. slow and half-sent bodies from ABUSE_CLIENTS clients for ABUSE_SECONDS
//    (past the 10 s request timeout): half of them declare a body just under
//    the limit and send 1 MiB of it, then nothing; the other half declare
//    the same and trickle 1 KiB every 200 ms. Each reconnects as soon as the
//    server closes it, as an attacker would. Printed: RSS before, the peak
//    (VmHWM) during, the budget it is held to (RSS before + ABUSE_RSS_BUDGET_MIB),
//    and the latency of genuine reviews sent meanwhile against before.
// 2. a review of a 3 MiB Job (a podFailurePolicy whose values fill it: the
//    case that once cost one scan per candidate exit code) against one of a
//    10 KiB Job, and against the same 3 MiB body on the baseline route, which
//    only receives and parses it. Printed as ratios.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { Agent, request } from 'node:https';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { connect } from 'node:tls';
import { fileURLToPath } from 'node:url';
import { bundleEntry } from './bundle.ts';
import { reviewBody } from './review.ts';

const here = fileURLToPath(new URL('.', import.meta.url));
const CLIENTS = Number(process.env.ABUSE_CLIENTS ?? 100);
const SECONDS = Number(process.env.ABUSE_SECONDS ?? 15);
const RSS_BUDGET_MIB = Number(process.env.ABUSE_RSS_BUDGET_MIB ?? 64);
const SIZE_ROUNDS = Number(process.env.ABUSE_SIZE_ROUNDS ?? 20);
const DECLARED = 4 * 1024 * 1024 - 1024;

const bundle = await bundleEntry(join(here, 'server.ts'));
// ABUSE_NODE_ARGS: V8 flags for the server; by default the chart's NODE_OPTIONS (charts/jobharvest/templates/deployment.yaml).
const nodeArgs = (process.env.ABUSE_NODE_ARGS ?? '--max-semi-space-size=4').split(' ').filter(Boolean);
const server = spawn(process.execPath, [...nodeArgs, bundle], { stdio: ['ignore', 'pipe', 'inherit'] });
const port = await new Promise<number>((resolve, reject) => {
  createInterface({ input: server.stdout! }).once('line', (l) => resolve(Number(l)));
  server.once('exit', (c) => reject(new Error(`bench server exited ${c}`)));
});
const status = () => readFileSync(`/proc/${server.pid}/status`, 'utf8');
const mib = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status())![1]) / 1024;

const agent = new Agent({ keepAlive: true, maxSockets: 4, rejectUnauthorized: false });
function post(path: string, body: string): Promise<{ status: number; ms: number }> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, ms: performance.now() - t0 }));
    });
    req.on('error', reject);
    req.end(body);
  });
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function genuine(n: number): Promise<{ p50: number; failed: number }> {
  const ms: number[] = [];
  let failed = 0;
  const body = reviewBody();
  for (let i = 0; i < n; i++) {
    try {
      const r = await post('/mutate', body);
      if (r.status === 200) ms.push(r.ms);
      else failed++;
    } catch {
      failed++;
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  return { p50: ms.length ? median(ms) : NaN, failed };
}

/** One abusive client: connects, declares DECLARED bytes, sends some, then stalls or trickles; reconnects when closed. */
function abuser(kind: 'half' | 'slow', until: number, counts: { connections: number; refused503: number; closedByServer: number }): Promise<void> {
  return new Promise((done) => {
    const once = () => {
      if (Date.now() >= until) return done();
      counts.connections++;
      const s = connect({ host: '127.0.0.1', port, rejectUnauthorized: false });
      let timer: NodeJS.Timeout | undefined;
      let got = '';
      s.on('secureConnect', () => {
        s.write(`POST /mutate HTTP/1.1\r\nhost: jobharvest\r\ncontent-type: application/json\r\ncontent-length: ${DECLARED}\r\n\r\n{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","object":{"x":"`);
        if (kind === 'half') s.write('a'.repeat(1024 * 1024));
        else timer = setInterval(() => s.write('a'.repeat(1024)), 200);
      });
      s.on('data', (c) => (got += c.toString('latin1')));
      s.on('error', () => {});
      s.on('close', () => {
        clearInterval(timer);
        if (/^HTTP\/1.1 503/.test(got)) counts.refused503++;
        else counts.closedByServer++;
        setTimeout(once, 50);
      });
      // The client never ends on its own before `until`; the server must close it.
      setTimeout(() => s.destroy(), Math.max(0, until - Date.now()));
    };
    once();
  });
}

function job3MiB(): string {
  const base = JSON.parse(reviewBody()) as { request: { object: { spec: Record<string, unknown> } } };
  const values: number[] = [];
  // Every code 1-255 but the default (3) and a spread of others, then repeats: the rule matches most candidates.
  const pool = Array.from({ length: 255 }, (_, i) => i + 1).filter((c) => c !== 3 && c % 7 !== 0);
  let size = 0;
  for (let i = 0; size < 3 * 1024 * 1024 - 4096; i++) {
    const v = pool[i % pool.length]!;
    values.push(v);
    size += String(v).length + 1;
  }
  base.request.object.spec.podFailurePolicy = { rules: [{ action: 'FailJob', onExitCodes: { operator: 'In', values } }] };
  return JSON.stringify(base);
}

function job10KiB(): string {
  const base = JSON.parse(reviewBody()) as { request: { object: { metadata: { annotations?: Record<string, string> } } } };
  let body = JSON.stringify(base);
  const pad = 10 * 1024 - body.length;
  if (pad > 0) base.request.object.metadata.annotations = { ...(base.request.object.metadata.annotations ?? {}), 'example.com/pad': 'p'.repeat(pad - 40) };
  body = JSON.stringify(base);
  return body;
}

try {
  // Warm up: JIT, TLS, the first allocations.
  await genuine(200);
  const before = await genuine(100);
  const rssBefore = mib('VmRSS');
  const counts = { connections: 0, refused503: 0, closedByServer: 0 };
  const until = Date.now() + SECONDS * 1000;
  const clients = Array.from({ length: CLIENTS }, (_, i) => abuser(i % 2 ? 'slow' : 'half', until, counts));
  await new Promise((r) => setTimeout(r, 1000));
  const during = await genuine(Math.max(10, Math.floor((SECONDS - 3) * 1000 / 40)));
  await Promise.all(clients);
  const peak = mib('VmHWM');
  console.log(`abuse: ${CLIENTS} clients (half-sent and slow bodies of ${(DECLARED / 1048576).toFixed(2)} MiB declared) for ${SECONDS} s: ${counts.connections} connections, ${counts.refused503} answered 503, ${counts.closedByServer} closed by the server`);
  console.log(`rss_before_mib=${rssBefore.toFixed(1)} rss_peak_mib=${peak.toFixed(1)} growth_mib=${(peak - rssBefore).toFixed(1)} budget_mib=${RSS_BUDGET_MIB} ${peak - rssBefore <= RSS_BUDGET_MIB ? 'within' : 'OVER'}`);
  console.log(`genuine reviews meanwhile: p50_ms=${during.p50.toFixed(2)} (before ${before.p50.toFixed(2)}, ratio ${(during.p50 / before.p50).toFixed(2)}), failed ${during.failed}`);

  const big = job3MiB();
  const small = job10KiB();
  const t = { big: [] as number[], small: [] as number[], allowBig: [] as number[] };
  for (let i = 0; i < SIZE_ROUNDS; i++) {
    const a = await post('/allow', big);
    const m = await post('/mutate', big);
    const s = await post('/mutate', small);
    if (a.status !== 200 || m.status !== 200 || s.status !== 200) throw new Error(`status ${a.status} ${m.status} ${s.status}`);
    t.allowBig.push(a.ms);
    t.big.push(m.ms);
    t.small.push(s.ms);
  }
  const [b, s, ab] = [median(t.big), median(t.small), median(t.allowBig)];
  console.log(
    `size: mutate_10KiB_ms=${s.toFixed(2)} mutate_3MiB_ms=${b.toFixed(2)} allow_3MiB_ms=${ab.toFixed(2)} (bodies ${(Buffer.byteLength(small) / 1024).toFixed(1)} KiB, ${(Buffer.byteLength(big) / 1048576).toFixed(2)} MiB)`,
  );
  console.log(`ratio_3MiB_to_10KiB=${(b / s).toFixed(1)} bytes_ratio=${(Buffer.byteLength(big) / Buffer.byteLength(small)).toFixed(0)} ratio_mutate_to_allow_3MiB=${(b / ab).toFixed(2)}`);
} finally {
  agent.destroy();
  server.kill('SIGTERM');
}
