// `npm run bench:memory`: the webhook's resident memory under steady load.
// The bench server (bench/webhook/server.ts, bundled, plain node, production
// logger) takes MEMORY_REVIEWS AdmissionReviews on /mutate at MEMORY_RATE
// per second, open loop, each with its own uid and Job name; its RSS (from
// /proc) is read after the first 1,000 and every 10,000 after that. Prints
// the ratio of the RSS after all of them to the RSS after 1,000 (the goal:
// within 10%).
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { bundleEntry } from './bundle.ts';
import { paced } from './paced.ts';
import { reviewBody } from './review.ts';

const here = fileURLToPath(new URL('.', import.meta.url));
const REVIEWS = Number(process.env.MEMORY_REVIEWS ?? 100_000);
const RATE = Number(process.env.MEMORY_RATE ?? 500);
const FIRST = 1000;
const EVERY = 10_000;

const template = reviewBody('00000000-0000-4000-8000-000000000000');
const body = (i: number) => template.replace('00000000-0000-4000-8000-000000000000', `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`).replace('nightly-report-29412345-', `nightly-report-${i}-`);

const bundle = await bundleEntry(join(here, 'server.ts'));
const server = spawn(process.execPath, [bundle], { stdio: ['ignore', 'pipe', 'inherit'] });
const port = await new Promise<number>((resolve, reject) => {
  createInterface({ input: server.stdout! }).once('line', (l) => resolve(Number(l)));
  server.once('exit', (c) => reject(new Error(`bench server exited ${c}`)));
});
const rssMiB = () => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${server.pid}/status`, 'utf8'))![1]) / 1024;

try {
  const samples: Array<[number, number]> = [];
  const at = (n: number) => {
    if (n === FIRST || n % EVERY === 0 || n === REVIEWS) {
      const r = rssMiB();
      samples.push([n, r]);
      console.log(`after ${String(n).padStart(7)} reviews: RSS ${r.toFixed(1)} MiB`);
    }
  };
  const result = await paced({ port, path: '/mutate', body, rate: RATE, seconds: REVIEWS / RATE, progress: { every: FIRST, at } });
  if (result.errors) throw new Error(`${result.errors} errors`);
  const first = samples.find(([n]) => n === FIRST)![1];
  const last = samples.at(-1)![1];
  console.log(`${result.sent} reviews at ${RATE}/s: p50_ms=${result.p50.toFixed(2)} p99_ms=${result.p99.toFixed(2)} max_ms=${result.max.toFixed(2)}`);
  console.log(`rss_1k_mib=${first.toFixed(1)} rss_${REVIEWS / 1000}k_mib=${last.toFixed(1)} ratio=${(last / first).toFixed(3)}`);
} finally {
  server.kill('SIGTERM');
}
