// Metric label cardinality under hostile input: 3,000 AdmissionReviews whose
// `operation` and `kind.kind` are unique 4 KB strings (anyone who can reach
// /mutate can send them). Prints the size of /metrics, the live heap and the
// process RSS before and after. With labels mapped to fixed sets the first two
// stay flat; RSS still grows by memory V8 and malloc keep after the requests.
import { build } from '../../src/http/app.ts';
import { createMetrics } from '../../src/http/metrics.ts';
import { defaultConfig } from '../../src/core/config.ts';

const REQUESTS = Number(process.env.REQUESTS ?? 3000);
const VALUE_BYTES = 4096;

const app = build({
  metrics: createMetrics({ defaultMetrics: true }),
  deps: {
    config: defaultConfig(),
    namespace: (name) => ({ name, annotations: { 'jobharvest.io/inject': 'enabled' } }),
    serverVersion: () => ({ major: 1, minor: 34 }),
  },
});

const unique = (i: number) => `${i}-`.padEnd(VALUE_BYTES, 'x');
const gc = (globalThis as { gc?: () => void }).gc;

async function sample(): Promise<{ metricsBytes: number; rssMiB: number; heapMiB: number }> {
  gc?.();
  const res = await app.inject({ method: 'GET', url: '/metrics' });
  const m = process.memoryUsage();
  return { metricsBytes: Buffer.byteLength(res.body), rssMiB: m.rss / 2 ** 20, heapMiB: m.heapUsed / 2 ** 20 };
}

// Warm up with one ordinary admission so the baseline already holds every normal series.
const job = { apiVersion: 'batch/v1', kind: 'Job', metadata: { name: 'j', namespace: 'team-a' }, spec: { template: { spec: { containers: [{ name: 'main', image: 'busybox' }] } } } };
const review = (operation: string, kind: string, i: number) => ({
  apiVersion: 'admission.k8s.io/v1',
  kind: 'AdmissionReview',
  request: { uid: `uid-${i}`, kind: { group: 'batch', version: 'v1', kind }, operation, namespace: 'team-a', object: job },
});
await app.inject({ method: 'POST', url: '/mutate', payload: review('CREATE', 'Job', -1) });
const before = await sample();
for (let i = 0; i < REQUESTS; i++) {
  const res = await app.inject({ method: 'POST', url: '/mutate', payload: review(unique(i), unique(i), i) });
  if (res.statusCode !== 200) throw new Error(`request ${i}: HTTP ${res.statusCode}`);
}
const after = await sample();
await app.close();

const kb = (n: number) => `${(n / 1024).toFixed(1)} KiB`;
process.stdout.write(`requests with unique ${VALUE_BYTES}-byte operation and kind: ${REQUESTS}${gc ? '' : ' (run with --expose-gc for steadier RSS)'}\n`);
process.stdout.write(`| | before | after | ratio |\n|---|---|---|---|\n`);
process.stdout.write(`| /metrics bytes | ${kb(before.metricsBytes)} | ${kb(after.metricsBytes)} | ${(after.metricsBytes / before.metricsBytes).toFixed(2)} |\n`);
process.stdout.write(`| heap used | ${before.heapMiB.toFixed(0)} MiB | ${after.heapMiB.toFixed(0)} MiB | ${(after.heapMiB / before.heapMiB).toFixed(2)} |\n`);
process.stdout.write(`| RSS | ${before.rssMiB.toFixed(0)} MiB | ${after.rssMiB.toFixed(0)} MiB | ${(after.rssMiB / before.rssMiB).toFixed(2)} |\n`);
