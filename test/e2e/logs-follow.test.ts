/**
 * `jobharvest logs -f job/NAME` on the real control plane with the test
 * kubelet and the real sidecar: a Job writes a line every 100 ms for 20 s; the
 * command, started with the Job, prints every line once, in order, most of
 * them while the Job runs, and exits by itself once the Job is done and the
 * delivery report has written its record. Through the loki sink into
 * VictoriaLogs, and through the elasticsearch sink into a real OpenSearch.
 */
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useCluster } from '../harness/cluster/client.ts';
import { shellJob, Stack } from '../harness/kubelet/stack.ts';
import { OpenSearch, openSearchBuildable } from '../harness/servers/opensearch.ts';
import { ensureSidecarBundle } from '../support/sidecar.ts';

const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = join(repo, 'dist', 'jobharvest.mjs');
const cluster = useCluster();
const N = 200;
let stack: Stack;
let opensearch: OpenSearch | undefined;

beforeAll(async () => {
  ensureSidecarBundle();
  stack = await Stack.start({ info: cluster.info, name: 'flw' });
  if (openSearchBuildable()) opensearch = await OpenSearch.start();
}, 600_000);

afterAll(async () => {
  await stack?.stop();
  await opensearch?.dispose();
}, 120_000);

async function scenario(server: 'victorialogs' | 'opensearch'): Promise<void> {
  const ns = await stack.namespace(server === 'opensearch' ? 'os' : 'vl', { ttlSeconds: 600 });
  if (server === 'opensearch') {
    const current = await stack.core.readNamespace({ name: ns });
    current.metadata!.annotations = { ...current.metadata!.annotations, 'jobharvest.io/sink': 'elasticsearch', 'jobharvest.io/endpoint': opensearch!.url };
    await stack.core.replaceNamespace({ name: ns, body: current });
    // The webhook reads namespaces from an informer: give the update time to arrive.
    await new Promise((r) => setTimeout(r, 2000));
  }
  const script = `i=1; while [ $i -le ${N} ]; do echo "line $i"; i=$((i+1)); sleep 0.1; done`;
  await stack.batch.createNamespacedJob({ namespace: ns, body: shellJob('writer', { script }) });
  const started = Date.now();
  const child = spawn(process.execPath, [CLI, 'logs', '-f', 'job/writer', '-n', ns], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, KUBECONFIG: cluster.info.kubeconfigPath } });
  const printed: Array<{ line: string; at: number }> = [];
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  createInterface({ input: child.stdout! }).on('line', (line) => printed.push({ line, at: Date.now() - started }));
  let completeAt: number | undefined;
  const watch = setInterval(() => {
    void stack.batch.readNamespacedJob({ name: 'writer', namespace: ns }).then((j) => {
      if (completeAt === undefined && j.status?.conditions?.some((c) => c.type === 'Complete' && c.status === 'True')) completeAt = Date.now() - started;
    });
  }, 200);
  const code = await new Promise<number | null>((r) => child.on('close', r));
  clearInterval(watch);
  const exitedAt = Date.now() - started;
  const job = await stack.batch.readNamespacedJob({ name: 'writer', namespace: ns });
  console.log(`${server}: ${printed.length} lines followed, ${printed.filter((p) => completeAt !== undefined && p.at < completeAt).length} before the Job was Complete (at ${((completeAt ?? NaN) / 1000).toFixed(1)} s); exited at ${(exitedAt / 1000).toFixed(1)} s`);
  expect(stderr).toBe('');
  expect(code).toBe(0);
  expect(printed.map((p) => p.line)).toEqual(Array.from({ length: N }, (_, i) => `line ${i + 1}`));
  expect(job.metadata?.annotations?.['jobharvest.io/delivery'], 'the command ended once the delivery was recorded').toBeDefined();
  expect(printed.filter((p) => completeAt !== undefined && p.at < completeAt).length, 'lines printed while the Job ran').toBeGreaterThan(N / 2);
}

describe('kubectl jobharvest logs -f', () => {
  it('VictoriaLogs: a Job writing for 20 s, every line once, in order, and the command exits by itself', () => scenario('victorialogs'), 180_000);
  it.skipIf(!openSearchBuildable())('OpenSearch: the same through the elasticsearch sink', () => scenario('opensearch'), 180_000);
});
