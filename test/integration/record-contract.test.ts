/**
 * The record contract (src/contract/record.ts), round trip: the real sidecar
 * writes one pod's lines through each queryable sink into the real server, and
 * the query client the logs command uses reads every field back unchanged:
 * time to the nanosecond, message, stream, namespace, Job, pod, pod uid,
 * container, restart count, node, record id and flags. Loki itself is not run
 * here (see test/unit/record-contract.test.ts for its recorded responses).
 */
import { rmSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EnvKey, SinkType } from '../../src/contract/env.ts';
import { ElasticsearchClient } from '../../src/query/elasticsearch.ts';
import { parseTimeNs, type LogLine, type QueryClient } from '../../src/query/types.ts';
import { FIELD_MAPS, VictoriaLogsClient, type FieldPreset } from '../../src/query/victorialogs.ts';
import { OpenSearch, openSearchBuildable } from '../harness/servers/opensearch.ts';
import { VictoriaLogs } from '../harness/servers/victorialogs.ts';
import { PodScenario } from '../support/pod-scenario.ts';
import { ensureSidecarBundle } from '../support/sidecar.ts';
import { DOCUMENT_HEADERS } from './sink-fields.ts';

interface Written {
  ns: bigint;
  stream: 'stdout' | 'stderr';
  message: string;
  container: string;
  restart: number;
  truncated: boolean;
}

const MAX_RECORD_BYTES = 2048;

/** Waits until the wall clock is two milliseconds on. */
function nextMillisecond(): void {
  const t = Date.now();
  while (Date.now() < t + 2) {
    // a busy wait of ~2 ms: the writer stamps lines with the wall clock
  }
}

/** One pod: an init container, a main container on both streams that restarts once, and one line over the record cap. */
function workload(pod: PodScenario): Written[] {
  const out: Written[] = [];
  const w = (container: string, stream: 'stdout' | 'stderr', message: string, restart: number) => {
    const ts = pod.writeMessage(container, stream, message);
    out.push({ ns: parseTimeNs(ts)!, stream, message, container, restart, truncated: message.length > MAX_RECORD_BYTES });
  };
  for (let i = 0; i < 5; i++) w('init', 'stdout', `init line ${i}`, 0);
  // Each container run keeps its own clock; lines of two runs in one
  // millisecond would tie, and no contract orders a tie across containers.
  nextMillisecond();
  for (let i = 0; i < 20; i++) w('main', i % 3 ? 'stdout' : 'stderr', `main run 0 line ${i} "quoted" é ✓`, 0);
  w('main', 'stderr', `long ${'L'.repeat(MAX_RECORD_BYTES * 2)}`, 0);
  pod.writer.container('main').restart();
  nextMillisecond();
  for (let i = 0; i < 10; i++) w('main', 'stdout', `main run 1 line ${i}`, 1);
  return out;
}

/** What the client read, with the fields the test knows exactly; ids are compared across sinks. */
function shape(lines: LogLine[]) {
  return lines.map((l) => ({ ns: l.ns, stream: l.stream, message: l.flags?.includes('truncated') ? l.message.slice(0, 40) : l.message, container: l.container, restart: l.restart, pod: l.pod, namespace: l.namespace, job: l.job, podUid: l.podUid, node: l.node, flags: l.flags }));
}

async function collect(c: QueryClient, pod: PodScenario): Promise<LogLine[]> {
  const out: LogLine[] = [];
  for await (const l of c.lines({ namespace: pod.identity.namespace, job: pod.identity.job! }, 7)) out.push(l);
  return out;
}

async function ship(pod: PodScenario, sink: SinkType, endpoint: string, settings: Partial<Record<EnvKey, string>> = {}): Promise<void> {
  // A fresh state volume: every sink ships the same files from byte 0, so the record ids must agree.
  for (const f of readdirSync(pod.stateDir)) rmSync(join(pod.stateDir, f), { recursive: true, force: true });
  const sidecar = pod.startSidecar(sink, endpoint, { BATCH_MAX_WAIT_MS: '200', MAX_RECORD_BYTES: String(MAX_RECORD_BYTES), ...settings });
  await sidecar.waitForLog('sidecar started');
  // SIGTERM at once, as when the main containers exit: the sidecar reads every file to the end and flushes.
  const exit = await sidecar.stop();
  expect(exit.code, `signal ${exit.signal}\n${sidecar.tail()}`).toBe(0);
}

describe('the record contract, written by the sidecar and read back by the query clients', () => {
  let pod: PodScenario;
  let written: Written[];
  const ids = new Map<string, string[]>();

  beforeAll(() => {
    ensureSidecarBundle();
    pod = new PodScenario('contract');
    written = workload(pod);
  });
  afterAll(() => {
    pod?.dispose();
  });

  const expected = () =>
    [...written]
      .sort((a, b) => (a.ns < b.ns ? -1 : a.ns > b.ns ? 1 : 0))
      .map((w) => ({
        ns: w.ns,
        stream: w.stream,
        message: w.truncated ? w.message.slice(0, 40) : w.message,
        container: w.container,
        restart: w.restart,
        pod: pod.identity.pod,
        namespace: pod.identity.namespace,
        job: pod.identity.job,
        podUid: pod.identity.uid,
        node: pod.identity.node,
        flags: w.truncated ? ['truncated'] : undefined,
      }));

  const vlCases: Array<{ name: string; sink: SinkType; fields: FieldPreset; endpoint: (vl: VictoriaLogs) => string; settings?: Partial<Record<EnvKey, string>> }> = [
    { name: 'loki', sink: 'loki', fields: 'loki', endpoint: (vl) => vl.endpoints.loki },
    { name: 'http (JSON lines)', sink: 'http', fields: 'document', endpoint: (vl) => vl.endpoints.jsonline, settings: { HEADERS: DOCUMENT_HEADERS } },
    { name: 'elasticsearch (_bulk)', sink: 'elasticsearch', fields: 'document', endpoint: (vl) => vl.endpoints.elasticsearchBase, settings: { HEADERS: DOCUMENT_HEADERS } },
    { name: 'otlp (protobuf)', sink: 'otlp', fields: 'otlp', endpoint: (vl) => vl.endpoints.otlp, settings: { OTLP_ENCODING: 'protobuf' } },
  ];

  for (const c of vlCases) {
    it(`VictoriaLogs, ${c.name} sink: every field read back unchanged`, async () => {
      // One server per sink: the http and elasticsearch sinks write the same document.
      const vl = await VictoriaLogs.start();
      try {
        await ship(pod, c.sink, c.endpoint(vl), c.settings);
        await vl.flush();
        const lines = await collect(new VictoriaLogsClient(vl.url, FIELD_MAPS[c.fields]), pod);
        expect(shape(lines)).toEqual(expected());
        expect(lines.find((l) => l.flags)?.message.startsWith(`long ${'L'.repeat(100)}`)).toBe(true);
        ids.set(c.name, lines.map((l) => l.id));
      } finally {
        await vl.dispose();
      }
    });
  }

  it.skipIf(!openSearchBuildable())('OpenSearch, elasticsearch sink: every field read back unchanged', async () => {
    const os = await OpenSearch.start();
    try {
      await ship(pod, 'elasticsearch', os.url, { ES_INDEX: 'contract' });
      await os.refresh('contract');
      const lines = await collect(new ElasticsearchClient(os.url, 'contract'), pod);
      expect(shape(lines)).toEqual(expected());
      ids.set('opensearch', lines.map((l) => l.id));
    } finally {
      await os.dispose();
    }
  }, 600_000);

  it('every sink gave each line the same record id, one per line', () => {
    const all = [...ids.values()];
    expect(all.length).toBeGreaterThanOrEqual(vlCases.length);
    expect(new Set(all[0]).size).toBe(written.length);
    for (const x of all) expect(x).toEqual(all[0]);
  });
});
