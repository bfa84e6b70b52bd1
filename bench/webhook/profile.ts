// `npm run bench:profile`: where /mutate spends its CPU. Runs the bench
// server (bench/webhook/server.ts, bundled, plain node) under --cpu-prof,
// loads the baseline route /allow and then /mutate for PROFILE_SECONDS each,
// and prints each window's CPU per request and /mutate's top self-time
// functions and modules: the text of the flame graph's widest leaves. With
// PROFILE_KEEP=1 the .cpuprofile is kept (its path is printed) for a flame
// graph viewer; otherwise its folder is removed at exit.
import autocannon from 'autocannon';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { bundleEntry } from './bundle.ts';
import { reviewBody } from './review.ts';
import { formatSummary, perRequestDelta, sourceMapResolver, summarize, type CpuProfile, type Window } from './profile-summary.ts';

const here = fileURLToPath(new URL('.', import.meta.url));
const SECONDS = Number(process.env.PROFILE_SECONDS ?? 10);
const TOP = Number(process.env.PROFILE_TOP ?? 20);
const body = reviewBody();
const nowUs = () => Number(process.hrtime.bigint() / 1000n);

const bundle = await bundleEntry(join(here, 'server.ts'));
const profDir = mkdtempSync(join(tmpdir(), 'jobharvest-prof-'));
const KEEP = process.env.PROFILE_KEEP === '1';
if (!KEEP) process.once('exit', () => rmSync(profDir, { recursive: true, force: true }));
const server = spawn(process.execPath, ['--cpu-prof', `--cpu-prof-dir=${profDir}`, bundle], { stdio: ['ignore', 'pipe', 'inherit'] });
const port = await new Promise<number>((resolve, reject) => {
  createInterface({ input: server.stdout! }).once('line', (l) => resolve(Number(l)));
  server.once('exit', (c) => reject(new Error(`bench server exited ${c}`)));
});

async function load(path: string, seconds: number): Promise<{ requests: number; window: Window }> {
  const fromUs = nowUs();
  const r = await autocannon({ url: `https://127.0.0.1:${port}${path}`, method: 'POST', headers: { 'content-type': 'application/json' }, body, connections: 16, duration: seconds });
  if (r.non2xx || r.errors || r.timeouts) throw new Error(`${path}: ${r.non2xx} non-2xx, ${r.errors} errors, ${r.timeouts} timeouts`);
  return { requests: r.requests.total, window: { fromUs, toUs: nowUs() } };
}

await load('/mutate', 2);
await load('/allow', 2);
const allow = await load('/allow', SECONDS);
const mutate = await load('/mutate', SECONDS);
await new Promise<void>((resolve) => {
  server.once('exit', () => resolve());
  server.kill('SIGTERM');
});
const file = readdirSync(profDir).find((f) => f.endsWith('.cpuprofile'));
if (!file) throw new Error(`no profile written in ${profDir}`);
const profile = JSON.parse(readFileSync(join(profDir, file), 'utf8')) as CpuProfile;
// Frames of the bundle are named by their source file, through its source map.
const resolve = sourceMapResolver();
const a = summarize(profile, TOP, allow.window, resolve);
const m = summarize(profile, TOP, mutate.window, resolve);
const perReq = (busyMs: number, n: number) => (busyMs * 1000) / n;
console.log(KEEP ? `profile: ${join(profDir, file)}` : 'profile: removed at exit (PROFILE_KEEP=1 keeps it)');
console.log(`/allow:  ${allow.requests} requests, ${perReq(a.busyMs, allow.requests).toFixed(1)} µs CPU per request`);
console.log(`/mutate: ${mutate.requests} requests, ${perReq(m.busyMs, mutate.requests).toFixed(1)} µs CPU per request`);
console.log('');
console.log('/mutate ' + formatSummary(m, mutate.requests));
console.log('');
console.log('/allow ' + formatSummary(summarize(profile, 8, allow.window, resolve), allow.requests));
console.log('');
console.log('what /mutate adds to /allow, by function (µs CPU per request):');
console.log('  /mutate   /allow    added  function');
for (const d of perRequestDelta(profile, mutate, allow, TOP, resolve)) {
  console.log(`  ${d.aUs.toFixed(1).padStart(7)}  ${d.bUs.toFixed(1).padStart(7)}  ${d.deltaUs.toFixed(1).padStart(7)}  ${d.name}`);
}
console.log(`mutate_us_per_req=${perReq(m.busyMs, mutate.requests).toFixed(1)} allow_us_per_req=${perReq(a.busyMs, allow.requests).toFixed(1)}`);
