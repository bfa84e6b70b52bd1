import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EnvKey } from '../../src/contract/env.ts';
import { ForwardReceiver, type ReceivedForward } from '../harness/servers/forward-receiver.ts';
import { PodScenario, waitForCount } from '../support/pod-scenario.ts';
import { summaryNumber } from '../support/sidecar.ts';

const tally: string[] = [];

/** Nanoseconds since the epoch of an RFC 3339 UTC time with up to 9 fraction digits. */
function nanos(t: string): bigint {
  const m = /^(.*?)(?:\.(\d+))?Z$/.exec(t);
  if (!m) throw new Error(`not an RFC 3339 UTC time: ${t}`);
  return BigInt(Date.parse(`${m[1]}Z`)) * 1_000_000n + BigInt((m[2] ?? '').padEnd(9, '0') || '0');
}

const mineOf = (r: ForwardReceiver, uid: string) => r.received().filter((x) => x.attributes['k8s.pod.uid'] === uid);

function counts(recs: ReceivedForward[]) {
  const distinct = new Set(recs.map((r) => r.attributes['jobharvest.id'])).size;
  return { received: recs.length, distinct, duplicated: recs.length - distinct };
}

describe('forward sink against a real forward receiver (collector fluentforward, acks after the file write)', () => {
  let rx: ForwardReceiver;
  beforeAll(async () => {
    rx = await ForwardReceiver.start();
  });
  afterAll(async () => {
    await rx?.dispose();
    console.log('forward tally (written/received/distinct/duplicated):');
    for (const t of tally) console.log(`  ${t}`);
  });

  const modes: Array<{ name: string; settings: Partial<Record<EnvKey, string>> }> = [
    { name: 'PackedForward, gzip-compressed', settings: {} },
    { name: 'Forward', settings: { FORWARD_MODE: 'forward', GZIP: 'false' } },
  ];

  for (const mode of modes) {
    it(`${mode.name}: N lines written arrive as exactly N records with their metadata and tag`, async () => {
      const pod = new PodScenario('forward');
      const id = pod.identity;
      try {
        pod.writeLines('init', 50, { stream: 'stdout' });
        pod.writeLines('jobharvest', 10);
        const sidecar = pod.startSidecar('forward', rx.endpoint, { BATCH_MAX_WAIT_MS: '200', FORWARD_TAG: 'kube.${namespace}.${job}.${container}.${stream}', ...mode.settings });
        await sidecar.waitForLog('sidecar started');
        const { long, probeTs } = pod.writeCountWorkload();
        const written = pod.written(['jobharvest']);

        const exit = await sidecar.stop();
        expect(exit.code, sidecar.tail()).toBe(0);
        expect(summaryNumber(exit.summary, 'lines_shipped')).toBe(written);
        expect(summaryNumber(exit.summary, 'lines_unsent')).toBe(0);
        expect(summaryNumber(exit.summary, 'lines_dead_lettered')).toBe(0);

        // Acked means written: no waiting needed, but allow the file flush interval.
        await waitForCount(async () => mineOf(rx, id.uid).length, written, 5000);
        const recs = mineOf(rx, id.uid);
        const c = counts(recs);
        tally.push(`count ${mode.name}: ${written}/${c.received}/${c.distinct}/${c.duplicated}`);
        expect(c, rx.logTail()).toEqual({ received: written, distinct: written, duplicated: 0 });

        for (const r of recs) {
          expect(r.attributes).toMatchObject({ 'k8s.namespace.name': id.namespace, 'k8s.pod.name': id.pod, 'k8s.job.name': id.job, 'k8s.node.name': id.node });
          expect(r.attributes['fluent.tag']).toBe(`kube.${id.namespace}.${id.job}.${r.attributes['k8s.container.name']}.${r.attributes.stream}`);
        }
        const by = (container: string, stream: string, restart: number) =>
          recs.filter((r) => r.attributes['k8s.container.name'] === container && r.attributes.stream === stream && r.attributes['k8s.container.restart_count'] === restart).length;
        expect([by('init', 'stdout', 0), by('main', 'stdout', 0), by('main', 'stderr', 0), by('main', 'stdout', 1)]).toEqual([50, 300, 101, 101]);
        expect(recs.filter((r) => r.attributes['k8s.container.name'] === 'jobharvest')).toHaveLength(0);
        expect(recs.filter((r) => r.body === long), 'the 40 KiB line, reassembled').toHaveLength(1);
        // EventTime carries the CRI timestamp to the nanosecond.
        const probe = recs.find((r) => r.body === `PROBE-${id.uid}`)!;
        expect(BigInt(probe.timeUnixNano)).toBe(nanos(probeTs));
      } finally {
        pod.dispose();
      }
    });
  }

  it('a receiver restart mid-stream loses nothing; duplicates stay within one chunk', async () => {
    const pod = new PodScenario('forward-restart');
    const batch = 200;
    try {
      // One chunk in flight at a time, so "within one chunk" is measurable.
      const sidecar = pod.startSidecar('forward', rx.endpoint, { BATCH_MAX_WAIT_MS: '100', BATCH_MAX_RECORDS: String(batch), MAX_IN_FLIGHT: '1', REQUEST_TIMEOUT_MS: '3000' });
      await sidecar.waitForLog('sidecar started');
      const writing = pod.writeOver('main', 6000, 3000, { stream: 'both', size: 120 });
      await new Promise((r) => setTimeout(r, 1200));
      await rx.restart(300);
      await writing;
      const written = pod.written();
      await waitForCount(async () => new Set(mineOf(rx, pod.identity.uid).map((r) => r.attributes['jobharvest.id'])).size, written, 60_000);
      const exit = await sidecar.stop();
      expect(exit.code, sidecar.tail()).toBe(0);
      expect(summaryNumber(exit.summary, 'lines_unsent')).toBe(0);
      await new Promise((r) => setTimeout(r, 300));
      const c = counts(mineOf(rx, pod.identity.uid));
      tally.push(`restart: ${written}/${c.received}/${c.distinct}/${c.duplicated} (retries ${summaryNumber(exit.summary, 'retries')})`);
      expect(c.distinct, rx.logTail()).toBe(written);
      expect(c.duplicated).toBeLessThanOrEqual(batch);
    } finally {
      pod.dispose();
    }
  });
});
