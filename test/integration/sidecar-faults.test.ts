import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { SinkType } from '../../src/contract/env.ts';
import { VictoriaLogs, exact } from '../harness/servers/victorialogs.ts';
import { FaultProxy } from '../support/fault-proxy.ts';
import { PodScenario, waitForCount } from '../support/pod-scenario.ts';
import { summaryNumber, type SidecarProcess } from '../support/sidecar.ts';
import { DOCUMENT_HEADERS, fieldsOf } from './sink-fields.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Written / received / duplicated per case, printed at the end for the record. */
const tally: { case: string; written: number; received: number; distinct: number; duplicated: number; note?: string }[] = [];

describe('sidecar under faults: every line is delivered', () => {
  let vl: VictoriaLogs;
  let proxy: FaultProxy | undefined;
  let pod: PodScenario | undefined;
  let sidecar: SidecarProcess | undefined;

  beforeAll(async () => {
    vl = await VictoriaLogs.start();
  });
  afterEach(async () => {
    if (sidecar && sidecar.child.exitCode === null) await sidecar.kill();
    sidecar = undefined;
    await proxy?.close();
    proxy = undefined;
    pod?.dispose();
    pod = undefined;
    // A test that failed while the server was down must not leave it down.
    if (!vl.running) await vl.start();
  });
  afterAll(async () => {
    await vl?.dispose();
    console.log('fault-test tally (written/received/distinct/duplicated):');
    for (const t of tally) console.log(`  ${t.case}: ${t.written}/${t.received}/${t.distinct}/${t.duplicated}${t.note ? ` (${t.note})` : ''}`);
  });

  const endpointOf = (sink: SinkType, origin: string) => (sink === 'elasticsearch' ? `${origin}/insert/elasticsearch` : `${origin}/insert/jsonline`);

  function start(p: PodScenario, sink: SinkType, origin: string, settings: Record<string, string> = {}): SidecarProcess {
    sidecar = p.startSidecar(sink, endpointOf(sink, origin), { HEADERS: DOCUMENT_HEADERS, BATCH_MAX_WAIT_MS: '200', ...settings });
    return sidecar;
  }

  const mine = (p: PodScenario, sink: SinkType = 'http') => exact(fieldsOf(sink).uid, p.identity.uid);
  const received = (p: PodScenario, sink: SinkType = 'http') => vl.count(mine(p, sink));

  /** Stops the sidecar, checks a clean exit, and returns what the server holds for the pod. */
  async function finish(name: string, p: PodScenario, s: SidecarProcess, sink: SinkType = 'http', note?: string) {
    const written = p.written();
    // Wait for delivery first, so a slow drain can't be mistaken for a loss.
    await waitForCount(() => received(p, sink), written, 60_000);
    const exit = await s.stop();
    expect(exit.code, s.tail()).toBe(0);
    expect(summaryNumber(exit.summary, 'lines_unsent'), s.tail()).toBe(0);
    const { total, distinct } = await vl.countWithDistinct(mine(p, sink), '_msg');
    tally.push({ case: name, written, received: total, distinct, duplicated: total - distinct, note });
    expect(distinct, `distinct lines received of ${written} written`).toBe(written);
    return { written, total, distinct, summary: exit.summary };
  }

  it('the server is down for 10 s mid-stream', async () => {
    pod = new PodScenario('down10');
    const s = start(pod, 'http', vl.url);
    await pod.writeOver('main', 1000, 1000);
    expect(await waitForCount(() => received(pod!), 1000, 30_000)).toBe(1000);
    await vl.stop();
    const downAt = Date.now();
    await pod.writeOver('main', 2000, 3000);
    await sleep(10_000 - (Date.now() - downAt));
    await vl.start();
    const r = await finish('http, server down 10 s', pod, s);
    expect(r.total, 'duplicates').toBe(r.written);
    expect(summaryNumber(r.summary, 'retries'), 'retries in the summary').toBeGreaterThan(0);
  });

  it('429 with Retry-After is honoured', async () => {
    const answers: number[] = [];
    const arrivals: number[] = [];
    proxy = await FaultProxy.start({ upstream: vl.url, onRequest: () => arrivals.push(Date.now()) });
    await proxy.setFault({ kind: 'status', status: 429, retryAfter: '3' });
    pod = new PodScenario('r429');
    // One request in flight, so each request after a 429 is that batch's retry.
    const s = start(pod, 'http', proxy.url, { MAX_IN_FLIGHT: '1' });
    pod.writeLines('main', 500);
    await sleep(7000);
    answers.push(...arrivals);
    await proxy.setFault({ kind: 'pass' });
    const r = await finish('http, 429 + Retry-After: 3', pod, s);
    expect(r.total, 'duplicates').toBe(r.written);
    expect(proxy.count(429)).toBeGreaterThanOrEqual(2);
    // Every 429 was answered on arrival; the next request may come only 3 s later.
    const gaps = answers.slice(1).map((t, i) => t - answers[i]!);
    expect(Math.min(...gaps), `gaps between requests while throttled: ${gaps.join(', ')} ms`).toBeGreaterThanOrEqual(2900);
  });

  it('a 503 storm', async () => {
    let n = 0;
    // Deterministic "random": 4 of every 5 requests fail while the storm lasts.
    proxy = await FaultProxy.start({ upstream: vl.url, random: () => (n++ % 5) / 5 });
    await proxy.setFault({ kind: 'status', status: 503, probability: 0.8 });
    pod = new PodScenario('s503');
    const s = start(pod, 'http', proxy.url, { BATCH_MAX_RECORDS: '200' });
    await pod.writeOver('main', 3000, 4000);
    await sleep(2000);
    await proxy.setFault({ kind: 'pass' });
    const r = await finish('http, 503 storm', pod, s);
    expect(r.total, 'duplicates').toBe(r.written);
    expect(proxy.count(503)).toBeGreaterThanOrEqual(10);
    expect(summaryNumber(r.summary, 'retries')).toBeGreaterThanOrEqual(proxy.count(503));
  });

  it('413 makes the sidecar split batches', async () => {
    const limit = 32 * 1024;
    const accepted: number[] = [];
    proxy = await FaultProxy.start({
      upstream: vl.url,
      onRequest: (req) => {
        if (req.body.length <= limit) accepted.push(req.body.length);
      },
    });
    await proxy.setFault({ kind: 'tooLarge', maxBytes: limit });
    pod = new PodScenario('r413');
    pod.writeLines('main', 2000);
    const s = start(pod, 'http', proxy.url);
    const r = await finish('http, 413 above 32 KiB', pod, s);
    expect(r.total, 'duplicates').toBe(r.written);
    expect(proxy.count(413), 'batches rejected as too large').toBeGreaterThan(0);
    expect(summaryNumber(r.summary, 'lines_dead_lettered')).toBe(0);
    expect(accepted.length).toBeGreaterThan(2000 * 200 / limit);
  });

  it('a slow server (2 s per request), drained after SIGTERM', async () => {
    proxy = await FaultProxy.start({ upstream: vl.url });
    await proxy.setFault({ kind: 'slow', delayMs: 2000 });
    pod = new PodScenario('slow');
    const s = start(pod, 'http', proxy.url, { BATCH_MAX_RECORDS: '250' });
    await pod.writeOver('main', 2000, 1000);
    // SIGTERM while requests are still waiting on the server.
    const exit = await s.stop();
    expect(exit.code, s.tail()).toBe(0);
    const { total, distinct } = await vl.countWithDistinct(mine(pod), '_msg');
    tally.push({ case: 'http, slow server 2 s/request', written: pod.written(), received: total, distinct, duplicated: total - distinct });
    expect(distinct).toBe(pod.written());
    expect(total, 'duplicates').toBe(pod.written());
    expect(proxy.stats.forwarded).toBeGreaterThanOrEqual(8);
  });

  for (const sink of ['http', 'elasticsearch'] as const) {
    it(`${sink}: SIGKILL mid-stream, restart resumes from the checkpoint`, async () => {
      const batch = 500;
      proxy = await FaultProxy.start({ upstream: vl.url });
      // Slow enough that the kill lands mid-stream, fast enough to finish soon.
      await proxy.setFault({ kind: 'slow', delayMs: 300 });
      pod = new PodScenario(`kill-${sink === 'http' ? 'http' : 'es'}`);
      pod.writeLines('main', 20_000);
      // One request in flight: a batch the server stored but whose answer the kill
      // swallowed is the one duplicate no sender can avoid. With N in flight that
      // floor would be N batches, so the claim "at most one batch" presumes one.
      const settings = { BATCH_MAX_RECORDS: String(batch), MAX_IN_FLIGHT: '1' };
      const first = start(pod, sink, proxy.url, settings);
      const before = await waitForCount(() => received(pod!, sink), 4000, 60_000);
      expect(before).toBeGreaterThanOrEqual(4000);
      await first.kill();
      const atKill = await received(pod, sink);
      expect(atKill, 'the kill landed mid-stream').toBeLessThan(20_000);
      await proxy.setFault({ kind: 'pass' });
      const second = start(pod, sink, proxy.url, settings);
      pod.writeLines('main', 1000);
      const r = await finish(`${sink}, SIGKILL + restart`, pod, second, sink, `killed at ${atKill} received, batch ${batch}`);
      if (sink === 'elasticsearch') {
        // VictoriaLogs ignores _id, so it can't dedupe as Elasticsearch would. Prove
        // that Elasticsearch would: every line has one id, and every re-sent line had the same id.
        const f = fieldsOf(sink);
        expect((await vl.countWithDistinct(mine(pod, sink), f.id)).distinct, 'distinct _id').toBe(r.written);
        const split = await vl.query(`${mine(pod, sink)} | stats by (${f.id}) count_uniq(_msg) as m | filter m:>1 | stats count() as n`);
        expect(Number(split[0]?.n ?? 0), 'ids that name two different lines').toBe(0);
      }
      const dup = r.total - r.written;
      expect(dup, 'duplicates after SIGKILL: at most one batch').toBeLessThanOrEqual(batch);
    });
  }

  it('five rotations (gzip and deletion included) while the server is down', async () => {
    pod = new PodScenario('rot5', { maxSizeBytes: 40 * 1024, maxFiles: 5 });
    const s = start(pod, 'http', vl.url);
    pod.writeLines('main', 100);
    expect(await waitForCount(() => received(pod!), 100, 30_000)).toBe(100);
    await vl.stop();
    const c = pod.writer.container('main');
    const dir = join(pod.logDir, 'main');
    let sawGzip = false;
    while (c.rotations < 6) {
      // About one file's worth at a time, a little over a second apart.
      pod.writeLines('main', 60);
      await sleep(300);
      sawGzip ||= readdirSync(dir).some((f) => f.endsWith('.gz'));
    }
    pod.writeLines('main', 50);
    expect(c.rotations).toBeGreaterThanOrEqual(5);
    expect(sawGzip, 'older rotations were gzipped').toBe(true);
    // maxFiles=5 keeps 4 rotations: the earliest ones are gone from the directory.
    expect(readdirSync(dir).length).toBe(5);
    await sleep(2000);
    await vl.start();
    const r = await finish(`http, ${c.rotations} rotations while down`, pod, s);
    expect(r.total, 'duplicates').toBe(r.written);
  });
});
