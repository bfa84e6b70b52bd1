import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EnvKey, SinkType } from '../../src/contract/env.ts';
import { OtelCollector } from '../harness/servers/otelcol.ts';
import { VictoriaLogs, exact } from '../harness/servers/victorialogs.ts';
import { PodScenario } from '../support/pod-scenario.ts';
import { summaryNumber } from '../support/sidecar.ts';
import { DOCUMENT_HEADERS, fieldsOf } from './sink-fields.ts';

/** Nanoseconds since the epoch of an RFC 3339 time with up to 9 fraction digits. */
function nanos(t: string): bigint {
  const m = /^(.*?)(?:\.(\d+))?Z$/.exec(t);
  if (!m) throw new Error(`not an RFC 3339 UTC time: ${t}`);
  return BigInt(Date.parse(`${m[1]}Z`)) * 1_000_000n + BigInt((m[2] ?? '').padEnd(9, '0') || '0');
}

interface Case {
  name: string;
  sink: SinkType;
  endpoint: () => string;
  settings?: Partial<Record<EnvKey, string>>;
  /** The codec the sidecar starts with, and whether the server makes it fall back to gzip. */
  codec?: 'zstd';
  refused?: boolean;
}

describe('sidecar ships every line to a real VictoriaLogs, with its metadata', () => {
  let vl: VictoriaLogs;
  let collector: OtelCollector;
  /** A collector whose receiver decodes gzip only: it answers a zstd body 400. */
  let gzipOnly: OtelCollector;
  beforeAll(async () => {
    vl = await VictoriaLogs.start();
    collector = await OtelCollector.start(vl.endpoints.otlp);
    gzipOnly = await OtelCollector.start(vl.endpoints.otlp, { compressionAlgorithms: ['gzip'] });
  });
  afterAll(async () => {
    await gzipOnly?.dispose();
    await collector?.dispose();
    await vl?.dispose();
  });

  const cases: Case[] = [
    { name: 'http', sink: 'http', endpoint: () => vl.endpoints.jsonline, settings: { HEADERS: DOCUMENT_HEADERS } },
    { name: 'loki', sink: 'loki', endpoint: () => vl.endpoints.loki },
    { name: 'elasticsearch', sink: 'elasticsearch', endpoint: () => vl.endpoints.elasticsearchBase, settings: { HEADERS: DOCUMENT_HEADERS } },
    { name: 'otlp-protobuf', sink: 'otlp', endpoint: () => vl.endpoints.otlp, settings: { OTLP_ENCODING: 'protobuf' } },
    // VictoriaLogs ingests OTLP protobuf only: JSON goes through a real collector.
    { name: 'otlp-json', sink: 'otlp', endpoint: () => collector.logsUrl, settings: { OTLP_ENCODING: 'json' } },
    // The protobuf the sidecar writes itself, decoded by the collector's own (strict) Go decoder.
    { name: 'otlp-protobuf-collector', sink: 'otlp', endpoint: () => collector.logsUrl, settings: { OTLP_ENCODING: 'protobuf' } },
    // zstd bodies, decoded by each server's own zstd reader.
    { name: 'http-zstd', sink: 'http', endpoint: () => vl.endpoints.jsonline, settings: { HEADERS: DOCUMENT_HEADERS, COMPRESSION: 'zstd' }, codec: 'zstd' },
    { name: 'otlp-zstd', sink: 'otlp', endpoint: () => vl.endpoints.otlp, settings: { COMPRESSION: 'zstd' }, codec: 'zstd' },
    { name: 'otlp-zstd-collector', sink: 'otlp', endpoint: () => collector.logsUrl, settings: { COMPRESSION: 'zstd' }, codec: 'zstd' },
    // A server that does not take zstd: the first batch goes again as gzip, and every later one as gzip.
    { name: 'otlp-zstd-refused', sink: 'otlp', endpoint: () => gzipOnly.logsUrl, settings: { COMPRESSION: 'zstd' }, codec: 'zstd', refused: true },
  ];

  for (const c of cases) {
    it(`${c.name}: N lines written become exactly N records`, async () => {
      const pod = new PodScenario(c.name);
      const f = fieldsOf(c.sink);
      const id = pod.identity;
      try {
        // An init container that finished before the sidecar started.
        pod.writeLines('init', 50, { stream: 'stdout' });
        // The sidecar's own container: never shipped (no feedback loop).
        pod.writeLines('jobharvest', 10);
        const sidecar = pod.startSidecar(c.sink, c.endpoint(), { BATCH_MAX_WAIT_MS: '200', ...c.settings });
        const started = await sidecar.waitForLog('sidecar started');
        expect(started.compression).toBe(c.codec ?? 'gzip');
        const { long, longTs, probe, probeTs } = pod.writeCountWorkload();
        const expected = pod.written(['jobharvest']);
        expect(expected).toBe(50 + 300 + 100 + 1 + 100 + 1);

        // SIGTERM as soon as the writing is done, as when the main containers exit: the sidecar must read to EOF and flush.
        const exit = await sidecar.stop();
        expect(exit.code, `signal ${exit.signal}\n${sidecar.tail()}`).toBe(0);
        expect(exit.summary, sidecar.tail()).toBeDefined();

        const mine = exact(f.uid, id.uid);
        const all = await vl.countWithDistinct(mine, '_msg');
        expect(all, `received/distinct for ${expected} written`).toEqual({ total: expected, distinct: expected });
        expect((await vl.countWithDistinct(mine, f.id)).distinct, 'every record has its own id').toBe(expected);
        expect(summaryNumber(exit.summary, 'lines_shipped')).toBe(expected);
        expect(summaryNumber(exit.summary, 'lines_unsent')).toBe(0);
        expect(summaryNumber(exit.summary, 'lines_dead_lettered')).toBe(0);
        if (c.codec) {
          const fallbacks = sidecar.logEntries().filter((e) => e.msg === 'the log server does not take zstd; falling back to gzip');
          expect(fallbacks.length, sidecar.tail()).toBe(c.refused ? 1 : 0);
          if (c.refused) expect(fallbacks[0]!.status).toBe(400);
        }

        // Metadata: every record carries the pod's identity.
        const identity = [exact(f.namespace, id.namespace), exact(f.pod, id.pod), exact(f.job, id.job!), exact(f.node, id.node!)].join(' ');
        expect(await vl.count(`${mine} ${identity}`)).toBe(expected);
        const by = (container: string, extra: string) => vl.count(`${mine} ${exact(f.container, container)} ${extra}`);
        expect(await by('init', `${exact(f.stream, 'stdout')} ${exact(f.restart, '0')}`)).toBe(50);
        expect(await by('main', `${exact(f.stream, 'stderr')} ${exact(f.restart, '0')}`)).toBe(101);
        expect(await by('main', `${exact(f.stream, 'stdout')} ${exact(f.restart, '0')}`)).toBe(300);
        expect(await by('main', exact(f.restart, '1'))).toBe(101);
        expect(await vl.count(`${mine} ${exact(f.container, 'jobharvest')}`), "the sidecar's own logs").toBe(0);
        const longRows = await vl.query(`${mine} ${JSON.stringify(`LONG-${id.uid}`)} | fields _msg`);
        expect(longRows.map((r) => r._msg === long), 'the 40 KiB line, reassembled').toEqual([true]);
        if (c.sink === 'loki') {
          // Loki labels are VictoriaLogs stream fields.
          expect(await vl.count(`{namespace=${JSON.stringify(id.namespace)},job=${JSON.stringify(id.job)},pod=${JSON.stringify(id.pod)},container="main",stream="stderr"}`)).toBe(101);
        }

        // The original CRI timestamps, to the nanosecond.
        for (const [word, ts] of [[probe, probeTs], [`LONG-${id.uid}`, longTs]] as const) {
          const rows = await vl.query(`${mine} ${JSON.stringify(word)} | fields _time`);
          expect(rows).toHaveLength(1);
          expect(nanos(rows[0]!._time!)).toBe(nanos(ts));
        }
      } finally {
        pod.dispose();
      }
    });
  }
});
