/**
 * The elasticsearch sink and `jobharvest logs` against a real OpenSearch node
 * (test/harness/servers/opensearch/, built with Maven). VictoriaLogs ignores
 * `_id`, so against it the sink's exactly-once claim is only inferred; here the
 * index itself refuses a re-sent record with 409 and must end with every line
 * exactly once. Skipped, saying why, where Java 17 or Maven is missing.
 */
import { spawn } from 'node:child_process';
import { readdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { OpenSearch, openSearchBuildable } from '../harness/servers/opensearch.ts';
import { FaultProxy } from '../support/fault-proxy.ts';
import { PodScenario, waitForCount } from '../support/pod-scenario.ts';
import { ensureSidecarBundle, summaryNumber, type SidecarProcess } from '../support/sidecar.ts';

const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = join(repo, 'dist', 'jobharvest.mjs');
const INDEX = 'jobharvest';
const buildable = openSearchBuildable();
if (!buildable) console.log('opensearch tests skipped: java (17) and mvn are needed to build the node');

async function cli(args: string[]): Promise<{ code: number; stdout: string[]; stderr: string }> {
  const child = spawn(process.execPath, [CLI, 'logs', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, KUBECONFIG: '/nonexistent' } });
  const stdout: string[] = [];
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  createInterface({ input: child.stdout! }).on('line', (l) => stdout.push(l));
  const code = await new Promise<number>((r) => child.on('close', (c) => r(c ?? -1)));
  return { code, stdout, stderr };
}

describe.skipIf(!buildable)('elasticsearch sink and jobharvest logs on a real OpenSearch', () => {
  let os: OpenSearch;
  let proxy: FaultProxy | undefined;
  let pod: PodScenario | undefined;
  let sidecar: SidecarProcess | undefined;

  beforeAll(async () => {
    ensureSidecarBundle();
    os = await OpenSearch.start();
  }, 600_000);
  afterEach(async () => {
    if (sidecar && sidecar.child.exitCode === null) await sidecar.kill();
    sidecar = undefined;
    await proxy?.close();
    proxy = undefined;
    pod?.dispose();
    pod = undefined;
  });
  afterAll(async () => {
    await os?.dispose();
  });

  const mine = (p: PodScenario) => ({ term: { 'k8s.pod.uid.keyword': p.identity.uid } });
  const stored = (p: PodScenario) => os.countWithDistinct(INDEX, 'id.keyword', mine(p)).then((c) => c.total);
  /** Messages stored more than once for the pod: exact (a terms aggregation on one shard), unlike a cardinality estimate. */
  async function repeatedMessages(p: PodScenario): Promise<string[]> {
    const res = await fetch(`${os.url}/${INDEX}/_search`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ size: 0, query: mine(p), aggs: { m: { terms: { field: 'message.keyword', min_doc_count: 2, size: 10 } } } }),
    });
    const body = (await res.json()) as { aggregations: { m: { buckets: Array<{ key: string }> } } };
    return body.aggregations.m.buckets.map((b) => b.key);
  }

  it('SIGKILL mid-stream and a restart: the re-sent records come back 409, the index holds every line exactly once', async () => {
    const batch = 500;
    proxy = await FaultProxy.start({ upstream: os.url });
    await proxy.setFault({ kind: 'slow', delayMs: 300 });
    pod = new PodScenario('os-kill');
    pod.writeLines('main', 20_000);
    const settings = { BATCH_MAX_RECORDS: String(batch), MAX_IN_FLIGHT: '1', BATCH_MAX_WAIT_MS: '200' };
    const first = (sidecar = pod.startSidecar('elasticsearch', proxy.url, settings));
    await waitForCount(() => stored(pod!), 4000, 120_000);
    await first.kill();
    const atKill = await stored(pod);
    expect(atKill, 'the kill landed mid-stream').toBeLessThan(20_000);
    await proxy.setFault({ kind: 'pass' });
    const second = (sidecar = pod.startSidecar('elasticsearch', proxy.url, settings));
    pod.writeLines('main', 1000);
    const written = pod.written();
    await waitForCount(() => stored(pod!), written, 120_000);
    const exit = await second.stop();
    expect(exit.code, second.tail()).toBe(0);
    expect(summaryNumber(exit.summary, 'lines_unsent'), second.tail()).toBe(0);
    const total = await stored(pod);
    const shippedAfterRestart = summaryNumber(exit.summary, 'lines_shipped');
    expect(total, 'documents in the index: every line exactly once').toBe(written);
    expect(await repeatedMessages(pod), 'lines stored twice').toEqual([]);

    // The checkpoint lost as well (a new state volume): a third sidecar re-sends
    // every line. Each comes back 409, counts as delivered, and stores nothing.
    for (const f of readdirSync(pod.stateDir)) rmSync(join(pod.stateDir, f), { recursive: true, force: true });
    const third = (sidecar = pod.startSidecar('elasticsearch', os.url, { BATCH_MAX_RECORDS: String(batch) }));
    // SIGTERM makes it read every file to the end and wait for every answer before it exits.
    await new Promise((r) => setTimeout(r, 3000));
    const again = await third.stop();
    expect(again.code, third.tail()).toBe(0);
    const resent = summaryNumber(again.summary, 'lines_shipped');
    const after = await stored(pod);
    console.log(
      `opensearch, SIGKILL + restart: written ${written}, stored at kill ${atKill}, shipped after restart ${shippedAfterRestart}, in the index ${total}; ` +
        `every line re-sent without a checkpoint: ${resent} acknowledged (409), in the index ${after}, duplicates ${after - written}`,
    );
    expect(resent, 'every line re-sent and acknowledged').toBe(written);
    expect(summaryNumber(again.summary, 'lines_dead_lettered')).toBe(0);
    expect(after, 'the index refused every re-sent record').toBe(written);
    expect(await repeatedMessages(pod)).toEqual([]);
  }, 300_000);

  it('jobharvest logs prints the pod\'s lines from the index in the order they were written, paging with search_after', async () => {
    pod = new PodScenario('os-logs');
    pod.writeLines('main', 3000, { stream: 'both', size: 60 });
    const s = (sidecar = pod.startSidecar('elasticsearch', os.url, { BATCH_MAX_RECORDS: '700', BATCH_MAX_WAIT_MS: '200' }));
    await waitForCount(() => stored(pod!), 3000, 120_000);
    const exit = await s.stop();
    expect(exit.code, s.tail()).toBe(0);
    await os.refresh(INDEX);
    const { namespace, job, uid } = pod.identity;
    const r = await cli([`job/${job}`, '-n', namespace, '--query-endpoint', os.url, '--query-type', 'elasticsearch', '--page-size', '250']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toHaveLength(3000);
    expect(r.stdout.map((l) => Number(/ #(\d+) /.exec(l)![1]))).toEqual(Array.from({ length: 3000 }, (_, i) => i + 1));
    expect(r.stdout.every((l) => l.startsWith(uid.slice(0, 8)))).toBe(true);
    // Derived from the sink endpoint alone, as a namespace annotation would give it.
    const tail = await cli([`job/${job}`, '-n', namespace, '--tail', '2', '--query-endpoint', os.url, '--query-type', 'elasticsearch']);
    expect(tail.stdout).toEqual(r.stdout.slice(-2));
  }, 300_000);

  it('jobharvest logs reads more lines of one millisecond than max_result_window allows, in pages that never grow', async () => {
    // 12,000 lines in one millisecond at distinct nanoseconds, written by two files whose ids sort differently as text.
    const ms = Date.parse('2025-12-01T07:40:00.123Z');
    const n = 12_000;
    const docs = Array.from({ length: n }, (_, i) => {
      const ns = BigInt(ms) * 1_000_000n + BigInt(i * 50);
      const iso = `${new Date(ms).toISOString().slice(0, 19)}.${(ns % 1_000_000_000n).toString().padStart(9, '0')}Z`;
      return { '@timestamp': iso, 'k8s.namespace.name': 'burst', 'k8s.job.name': 'burst', 'k8s.pod.name': 'burst-x', 'k8s.container.name': 'main', 'k8s.container.restart_count': 0, stream: 'stdout', id: `${i % 2 ? 'z' : 'a'}-${i * 7}`, message: `line ${i}` };
    });
    for (let at = 0; at < n; at += 3000) {
      const body = docs.slice(at, at + 3000).map((d) => `${JSON.stringify({ create: { _index: INDEX, _id: `burst-${d.id}` } })}\n${JSON.stringify(d)}\n`).join('');
      const res = await fetch(`${os.url}/_bulk`, { method: 'POST', headers: { 'content-type': 'application/x-ndjson' }, body });
      expect(res.status).toBe(200);
      expect(((await res.json()) as { errors: boolean }).errors).toBe(false);
    }
    await os.refresh(INDEX);
    const r = await cli(['job/burst', '-n', 'burst', '--query-endpoint', os.url, '--query-type', 'elasticsearch']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toEqual(docs.map((d) => d.message));
  }, 300_000);
});
