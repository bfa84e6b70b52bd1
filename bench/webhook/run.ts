// npm run bench:webhook — HTTPS keep-alive load on /mutate against a baseline
// route of the same server that answers allowed: true without work. Ratios, not
// absolute numbers, are the result: this machine is shared and noisy. Besides
// the throughput ratio, the server's own CPU time per request (from /proc)
// gives cpu_ratio: baseline CPU per request over /mutate's, the throughput
// ratio the server would reach were it alone on a core, and much less moved
// by other work on the machine.
import autocannon from 'autocannon';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { bundleEntry } from './bundle.ts';
import { paced } from './paced.ts';
import { reviewBody } from './review.ts';
import { processCpuMs } from './stats.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const DURATION = Number(process.env.BENCH_SECONDS ?? 8);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);

const body = reviewBody();
// The server runs bundled on plain node, as the image runs the webhook.
const bundle = await bundleEntry(`${ROOT}bench/webhook/server.ts`);

// BENCH_NODE_ARGS: V8 flags for the server, as the chart's args give them.
const nodeArgs = (process.env.BENCH_NODE_ARGS ?? '').split(' ').filter(Boolean);
const server = spawn(process.execPath, [...nodeArgs, bundle], { stdio: ['ignore', 'pipe', 'inherit'], cwd: ROOT });
const port = await new Promise<number>((resolve, reject) => {
  createInterface({ input: server.stdout! }).once('line', (l) => resolve(Number(l)));
  server.once('exit', (c) => reject(new Error(`bench server exited ${c}`)));
});

async function load(path: string) {
  const cpu0 = processCpuMs(server.pid);
  const r = await autocannon({
    url: `https://127.0.0.1:${port}${path}`,
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
    connections: 16,
    pipelining: 1,
    duration: DURATION,
  });
  if (r.non2xx || r.errors || r.timeouts) throw new Error(`${path}: ${r.non2xx} non-2xx, ${r.errors} errors, ${r.timeouts} timeouts`);
  return { rps: r.requests.average, requests: r.requests.total, cpuMs: processCpuMs(server.pid) - cpu0 };
}

try {
  // Warm both routes up (JIT, TLS sessions) before measuring.
  await autocannon({ url: `https://127.0.0.1:${port}/mutate`, method: 'POST', body, headers: { 'content-type': 'application/json' }, duration: 2, connections: 8 });
  await autocannon({ url: `https://127.0.0.1:${port}/allow`, method: 'POST', body, headers: { 'content-type': 'application/json' }, duration: 2, connections: 8 });
  let base = 0;
  let mut = 0;
  const cpu = { base: 0, baseN: 0, mut: 0, mutN: 0 };
  const us = (ms: number, n: number) => ((ms * 1000) / n).toFixed(1);
  // Interleaved rounds so drift in machine load hits both routes alike.
  for (let i = 0; i < ROUNDS; i++) {
    const b = await load('/allow');
    const m = await load('/mutate');
    console.log(
      `round ${i + 1}: baseline_rps=${b.rps.toFixed(0)} mutate_rps=${m.rps.toFixed(0)} ratio=${(m.rps / b.rps).toFixed(3)}; server CPU per request: baseline ${us(b.cpuMs, b.requests)} µs, mutate ${us(m.cpuMs, m.requests)} µs`,
    );
    cpu.base += b.cpuMs;
    cpu.baseN += b.requests;
    cpu.mut += m.cpuMs;
    cpu.mutN += m.requests;
    base += b.rps;
    mut += m.rps;
  }
  // Latency at a fixed 500 req/s, open loop, measured from each request's send.
  const fixedBase = await paced({ port, path: '/allow', body, rate: 500, seconds: DURATION });
  const fixed = await paced({ port, path: '/mutate', body, rate: 500, seconds: DURATION });
  if (fixed.errors || fixedBase.errors) throw new Error(`errors at 500 req/s: baseline ${fixedBase.errors}, mutate ${fixed.errors}`);
  const ms = (x: number) => x.toFixed(2);
  console.log(`fixed 500 req/s, ${fixed.sent} requests: baseline p50_ms=${ms(fixedBase.p50)} p99_ms=${ms(fixedBase.p99)}; mutate p50_ms=${ms(fixed.p50)} p99_ms=${ms(fixed.p99)} max_ms=${ms(fixed.max)}`);
  console.log(`baseline_rps=${(base / ROUNDS).toFixed(0)} mutate_rps=${(mut / ROUNDS).toFixed(0)}`);
  console.log(`server CPU per request: baseline ${us(cpu.base, cpu.baseN)} µs, mutate ${us(cpu.mut, cpu.mutN)} µs`);
  console.log(`ratio=${(mut / base).toFixed(3)} cpu_ratio=${(cpu.base / cpu.baseN / (cpu.mut / cpu.mutN)).toFixed(3)} p99_ms=${ms(fixed.p99)}`);
} finally {
  server.kill('SIGTERM');
}
