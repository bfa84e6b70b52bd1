/**
 * Shaped records (JSON fields, a joined multiline record) of a Job with
 * carried labels, written through the real sink code into the real servers:
 * VictoriaLogs (http / jsonline and Loki push), OpenSearch (elasticsearch
 * _bulk), the OpenTelemetry Collector (OTLP protobuf and JSON, decoded by
 * its own Go decoder; and its Fluentd forward receiver) and rsyslog
 * (octet counting and RELP). The records are built here with their fields and line
 * count, as the shaping stage hands them on; what is checked is what each
 * server stored and lets a user query: the fields under their own name,
 * the tenant's keys that name jobharvest's fields overwriting nothing, the
 * joined message whole, the carried label queryable.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../sidecar/config.ts';
import { Shaper } from '../../sidecar/shape/shaper.ts';
import { parseShaping } from '../../sidecar/shaping-settings.ts';
import { newStats } from '../../sidecar/stats.ts';
import { FileProgress } from '../../sidecar/records/progress.ts';
import { fileKey, idPrefix, recordId, type Fields, type FileMeta, type LogRecord } from '../../sidecar/records/record.ts';
import { HttpClient } from '../../sidecar/sinks/http/client.ts';
import { SINK_MODULES } from '../../sidecar/sinks/registry.ts';
import { createSink as createSyslogSink } from '../../sidecar/sinks/syslog.ts';
import type { SendResult, Sink } from '../../sidecar/delivery/sink.ts';
import type { SinkContext } from '../../sidecar/sinks/types.ts';
import { ForwardReceiver } from '../harness/servers/forward-receiver.ts';
import { RsyslogReceiver, ensureRsyslogReceiver } from '../harness/servers/rsyslog-receiver.ts';
import { OpenSearch, openSearchBuildable } from '../harness/servers/opensearch.ts';
import { OtlpFileReceiver, plainValue, type CollectedLog, type OtlpAnyValue } from '../harness/servers/otlp-file-receiver.ts';
import { VictoriaLogs, exact } from '../harness/servers/victorialogs.ts';
import { PodScenario } from '../support/pod-scenario.ts';
import { ensureSidecarBundle } from '../support/sidecar.ts';
import { waitFor } from '../support/wait.ts';
import { DOCUMENT_HEADERS } from './sink-fields.ts';

const LABELS = { 'app.kubernetes.io/name': 'etl', team: 'data' };
const ANNOTATIONS = { 'example.com/owner': 'night shift' };
const HOSTILE_LINE = '{"k8s.pod.name":"evil","message":"x","@timestamp":"1970","id":"forged","level":"error","user":{"id":7,"tags":["a","b"]},"ratio":0.5}';
const HOSTILE = JSON.parse(HOSTILE_LINE) as Fields;
const INFO_LINE = '{"level":"info","msg":"step done","rows":1200}';
const MULTILINE = 'Traceback (most recent call last):\n  File "etl.py", line 3, in <module>\n    main()\nValueError: bad row';

interface Pod {
  readonly uid: string;
  readonly name: string;
  readonly records: LogRecord[];
  readonly hostile: LogRecord;
  readonly info: LogRecord;
  readonly joined: LogRecord;
  readonly plain: LogRecord;
}

/** One pod's four records, time-stamped now (servers refuse records older than their retention). */
function pod(tag: string): Pod {
  const uid = randomUUID();
  const file: FileMeta = { container: 'main', restart: 0, fingerprint: 'f0', key: fileKey('main', 0, 'f0'), idPrefix: idPrefix(uid, 'main', 0, 'f0'), progress: new FileProgress(0) };
  const t0 = Date.now();
  const ts = (i: number) => new Date(t0 + i).toISOString().replace('Z', '123456Z');
  const rec = (i: number, message: string, over: Partial<LogRecord>): LogRecord => ({ file, offset: i * 1000, ts: ts(i), stream: 'stdout', message, size: message.length + 40, safe: (i + 1) * 1000, flags: 0, ...over });
  const hostile = rec(0, HOSTILE_LINE, { fields: HOSTILE });
  const info = rec(1, INFO_LINE, { fields: JSON.parse(INFO_LINE) as Fields });
  const joined = rec(2, MULTILINE, { stream: 'stderr', lines: 4 });
  const plain = rec(3, 'a plain line', {});
  return { uid, name: `shaped-${tag}-${uid.slice(0, 8)}`, records: [hostile, info, joined, plain], hostile, info, joined, plain };
}

/**
 * Sends one batch through the sink module the sidecar would load for `sink`,
 * configured from the environment as in a pod (the stream sinks read their
 * own settings from it too).
 */
async function ship(p: Pod, env: Record<string, string>): Promise<SendResult> {
  const all = {
    POD_NAME: p.name,
    POD_NAMESPACE: 'team-shaped',
    POD_UID: p.uid,
    NODE_NAME: 'node-1',
    JOBHARVEST_JOB_NAME: 'etl-nightly',
    JOBHARVEST_JOB_LABELS: JSON.stringify(LABELS),
    JOBHARVEST_JOB_ANNOTATIONS: JSON.stringify(ANNOTATIONS),
    ...env,
  };
  const config = loadConfig(all);
  let client: HttpClient | undefined;
  const ctx: SinkContext = { config, http: () => (client ??= new HttpClient(config)) };
  const sink: Sink = config.sink === 'syslog' ? createSyslogSink(ctx, all) : await (await SINK_MODULES[config.sink]!()).createSink(ctx);
  try {
    return await sink.send(p.records, AbortSignal.timeout(30_000));
  } finally {
    await sink.close?.();
    client?.close();
  }
}

describe('shaped records in a real VictoriaLogs', () => {
  let vl: VictoriaLogs;
  beforeAll(async () => {
    vl = await VictoriaLogs.start();
  });
  afterAll(async () => {
    await vl?.dispose();
  });

  it('http (jsonline): JSON fields queryable as json.<key>, the carried label too, the joined record whole', async () => {
    const p = pod('vl-http');
    expect(await ship(p, { JOBHARVEST_SINK: 'http', JOBHARVEST_ENDPOINT: vl.endpoints.jsonline, JOBHARVEST_HEADERS: DOCUMENT_HEADERS })).toEqual({ kind: 'ok' });
    const mine = exact('k8s.pod.uid', p.uid);
    expect(await vl.count(mine)).toBe(4);
    // LogsQL on the tenant's fields, under json.
    const errors = await vl.query(`${mine} json.level:=error`);
    expect(errors).toHaveLength(1);
    const e = errors[0]!;
    expect(e._msg).toBe(HOSTILE_LINE);
    expect(e['k8s.pod.name']).toBe(p.name);
    expect(e.id).toBe(recordId(p.hostile));
    expect(e['json.k8s.pod.name']).toBe('evil');
    expect(e['json.id']).toBe('forged');
    expect(e['json.user.id']).toBe('7');
    expect(await vl.count(`${mine} json.rows:>1000`)).toBe(1);
    // The carried label and annotation, on every record.
    expect(await vl.count(`${mine} ${exact('k8s.job.label.team', 'data')} ${exact('k8s.job.label.app.kubernetes.io/name', 'etl')}`)).toBe(4);
    expect(await vl.count(`${mine} ${exact('k8s.job.annotation.example.com/owner', 'night shift')}`)).toBe(4);
    const [joined] = await vl.query(`${mine} ${exact('jobharvest.lines', '4')}`);
    expect(joined?._msg).toBe(MULTILINE);
    expect(joined?.stream).toBe('stderr');
  });

  it('the sidecar itself: the carried labels and annotations from its environment on every record it ships', async () => {
    ensureSidecarBundle();
    const scenario = new PodScenario('carried');
    try {
      scenario.writeLines('main', 20);
      const sidecar = scenario.startSidecar('http', vl.endpoints.jsonline, { HEADERS: DOCUMENT_HEADERS, BATCH_MAX_WAIT_MS: '100', JOB_LABELS: JSON.stringify(LABELS), JOB_ANNOTATIONS: JSON.stringify(ANNOTATIONS) });
      await sidecar.waitForLog('sidecar started');
      const exit = await sidecar.stop();
      expect(exit.code, sidecar.tail()).toBe(0);
      const mine = exact('k8s.pod.uid', scenario.identity.uid);
      expect(await vl.count(mine)).toBe(20);
      expect(await vl.count(`${mine} ${exact('k8s.job.label.app.kubernetes.io/name', 'etl')} ${exact('k8s.job.label.team', 'data')} ${exact('k8s.job.annotation.example.com/owner', 'night shift')}`)).toBe(20);
    } finally {
      scenario.dispose();
    }
  });

  it('loki: json_<key> and label_<key> structured metadata, a stream label only for the key named', async () => {
    const p = pod('vl-loki');
    // VictoriaLogs' Loki endpoint would parse a JSON line into top-level fields of its own (the tenant's "id" over jobharvest's);
    // Loki keeps the line as it is, and this header asks VictoriaLogs to do the same (docs/sinks.md).
    const headers = 'VL-Loki-Disable-Message-Parsing=true';
    expect(await ship(p, { JOBHARVEST_SINK: 'loki', JOBHARVEST_ENDPOINT: vl.endpoints.loki, JOBHARVEST_LOKI_STREAM_LABELS: 'team', JOBHARVEST_HEADERS: headers })).toEqual({ kind: 'ok' });
    const mine = exact('pod_uid', p.uid);
    expect(await vl.count(mine)).toBe(4);
    const [e] = await vl.query(`${mine} json_level:=error`);
    expect(e?._msg).toBe(HOSTILE_LINE);
    expect(e?.pod).toBe(p.name);
    expect(e?.id).toBe(recordId(p.hostile));
    expect(e?.json_k8s_pod_name).toBe('evil');
    expect(e?.json_id).toBe('forged');
    // Nested values stay in the line only.
    expect(e).not.toHaveProperty('json_user');
    expect(await vl.count(`${mine} _stream:{label_team="data"}`)).toBe(4);
    expect(await vl.count(`${mine} ${exact('label_app_kubernetes_io_name', 'etl')} ${exact('annotation_example_com_owner', 'night shift')}`)).toBe(4);
    const [joined] = await vl.query(`${mine} ${exact('lines', '4')}`);
    expect(joined?._msg).toBe(MULTILINE);
  });
});

const buildable = openSearchBuildable();
describe.skipIf(!buildable)('shaped records in a real OpenSearch', () => {
  const INDEX = 'jobharvest-shaped';
  let os: OpenSearch;
  beforeAll(async () => {
    os = await OpenSearch.start();
  }, 600_000);
  afterAll(async () => {
    await os?.dispose();
  });

  async function search(query: object): Promise<Array<Record<string, unknown>>> {
    await os.refresh(INDEX);
    const res = await fetch(`${os.url}/${INDEX}/_search`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ size: 100, query }) });
    const body = (await res.json()) as { hits: { hits: Array<{ _source: Record<string, unknown> }> } };
    if (!res.ok) throw new Error(`_search: HTTP ${res.status} ${JSON.stringify(body)}`);
    return body.hits.hits.map((h) => h._source);
  }

  it('elasticsearch: the fields as the json object of _source, searchable as json.<key>; the carried label searchable', async () => {
    const p = pod('os');
    expect(await ship(p, { JOBHARVEST_SINK: 'elasticsearch', JOBHARVEST_ENDPOINT: os.url, JOBHARVEST_ES_INDEX: INDEX })).toEqual({ kind: 'ok' });
    const mine = { term: { 'k8s.pod.uid.keyword': p.uid } };
    expect(await search(mine)).toHaveLength(4);
    const errors = await search({ bool: { filter: [mine, { term: { 'json.level.keyword': 'error' } }] } });
    expect(errors).toHaveLength(1);
    const doc = errors[0]!;
    expect(doc.json).toEqual(HOSTILE);
    expect(doc.message).toBe(HOSTILE_LINE);
    expect(doc['k8s.pod.name']).toBe(p.name);
    expect(doc.id).toBe(recordId(p.hostile));
    expect(doc['@timestamp']).toBe(p.hostile.ts);
    expect(await search({ bool: { filter: [mine, { range: { 'json.rows': { gt: 1000 } } }] } })).toHaveLength(1);
    expect(await search({ bool: { filter: [mine, { term: { 'json.user.id': 7 } }] } })).toHaveLength(1);
    expect(await search({ bool: { filter: [mine, { term: { 'k8s.job.label.team.keyword': 'data' } }, { term: { 'k8s.job.annotation.example.com/owner.keyword': 'night shift' } }] } })).toHaveLength(4);
    const joined = await search({ bool: { filter: [mine, { term: { 'jobharvest.lines': 4 } }] } });
    expect(joined.map((d) => d.message)).toEqual([MULTILINE]);
  });
});

describe('shaped records through a real OpenTelemetry Collector', () => {
  let rx: OtlpFileReceiver;
  beforeAll(async () => {
    rx = await OtlpFileReceiver.start();
  });
  afterAll(async () => {
    await rx?.dispose();
  });

  for (const encoding of ['protobuf', 'json'] as const) {
    it(`otlp ${encoding}: the body is the fields' map, the line log.record.original, the severity from level, the labels resource attributes`, async () => {
      const p = pod(`otlp-${encoding}`);
      expect(await ship(p, { JOBHARVEST_SINK: 'otlp', JOBHARVEST_ENDPOINT: rx.logsUrl.replace(/\/v1\/logs$/, ''), JOBHARVEST_OTLP_ENCODING: encoding })).toEqual({ kind: 'ok' });
      const mine = (): CollectedLog[] => rx.received().filter((l) => l.resource['k8s.pod.uid'] === p.uid);
      await waitFor("the collector's file to hold the pod's 4 records", () => (mine().length === 4 ? true : undefined), { timeoutMs: 20_000 });
      const byId = new Map(mine().map((l) => [l.attributes['log.record.uid'], l]));
      const h = byId.get(recordId(p.hostile))!;
      expect(h.resource).toMatchObject({ 'k8s.pod.name': p.name, 'k8s.job.name': 'etl-nightly', 'k8s.job.label.team': 'data', 'k8s.job.label.app.kubernetes.io/name': 'etl', 'k8s.job.annotation.example.com/owner': 'night shift' });
      expect(h.body).toEqual(HOSTILE);
      expect(h.attributes).toEqual({ 'log.record.uid': recordId(p.hostile), 'log.iostream': 'stdout', 'log.record.original': HOSTILE_LINE });
      expect(h.severityNumber).toBe(17);
      expect(h.severityText).toBe('error');
      const i = byId.get(recordId(p.info))!;
      expect(i.body).toEqual({ level: 'info', msg: 'step done', rows: 1200 });
      expect(i.severityNumber).toBe(9);
      const j = byId.get(recordId(p.joined))!;
      expect(j.body).toBe(MULTILINE);
      expect(j.attributes).toMatchObject({ 'jobharvest.lines': 4, 'log.iostream': 'stderr' });
      expect(j.severityNumber ?? 0).toBe(0);
      expect(byId.get(recordId(p.plain))!.body).toBe('a plain line');
    });

    it(`otlp ${encoding}: from the shaping stage at its defaults, the line goes beside the fields only when they do not hold it exactly`, async () => {
      const p = pod(`otlp-shaper-${encoding}`);
      // The lines as the source hands them on (no fields yet), one of them with an id a double cannot carry.
      // Numbers past int64 and a double's range, which the JSON encoding must still send as doubles (not refuse the batch over).
      const lossyLine = '{"level":"warn","id":12345678901234567890,"big":-1e21,"inf":1e400,"ninf":[-1e999]}';
      const lines = [...p.records.slice(0, 2).map((r) => ({ ...r, fields: undefined })), { ...p.plain, offset: 9000, message: lossyLine, size: lossyLine.length + 40, safe: 10_000 }];
      const shaped: LogRecord[] = [];
      const { settings, problems } = parseShaping({ JOBHARVEST_PARSE: 'json' }, 262_144);
      expect(problems).toEqual([]);
      const shaper = new Shaper(settings, newStats(), async (rs) => {
        shaped.push(...rs);
      });
      await shaper.push(lines);
      await shaper.flush();
      expect(shaped).toHaveLength(3);
      const shipped = { ...p, records: shaped };
      expect(await ship(shipped, { JOBHARVEST_SINK: 'otlp', JOBHARVEST_ENDPOINT: rx.logsUrl.replace(/\/v1\/logs$/, ''), JOBHARVEST_OTLP_ENCODING: encoding })).toEqual({ kind: 'ok' });
      const mine = (): CollectedLog[] => rx.received().filter((l) => l.resource['k8s.pod.uid'] === p.uid);
      await waitFor("the collector's file to hold the pod's 3 records", () => (mine().length === 3 ? true : undefined), { timeoutMs: 20_000 });
      const byId = new Map(mine().map((l) => [l.attributes['log.record.uid'], l]));
      const h = byId.get(recordId(p.hostile))!;
      expect(h.body).toEqual(HOSTILE);
      expect(h.attributes).toEqual({ 'log.record.uid': recordId(p.hostile), 'log.iostream': 'stdout' });
      expect(h.severityNumber).toBe(17);
      expect(byId.get(recordId(p.info))!.attributes).toEqual({ 'log.record.uid': recordId(p.info), 'log.iostream': 'stdout' });
      const l = byId.get(recordId(shaped[2]!))!;
      expect(l.attributes).toEqual({ 'log.record.uid': recordId(shaped[2]!), 'log.iostream': 'stdout', 'log.record.original': lossyLine });
      expect(l.severityNumber).toBe(13);
      // Doubles, as the Collector stored them (its file exporter writes an infinite double as proto3's JSON mapping does).
      expect(l.body).toEqual({ level: 'warn', id: Number('12345678901234567890'), big: -1e21, inf: 'Infinity', ninf: ['-Infinity'] });
    });
  }
});

describe('shaped records through a real rsyslog', () => {
  beforeAll(() => {
    ensureRsyslogReceiver();
  });

  for (const protocol of ['octet-counting', 'relp'] as const) {
    it(`syslog ${protocol}: the joined record arrives with its newlines, the fields and carried labels as elements of their own`, async () => {
      const rs = await RsyslogReceiver.start({ input: { kind: protocol === 'relp' ? 'relp' : 'tcp' }, escapeControlCharacters: false });
      try {
        const p = pod(`syslog-${protocol}`);
        expect(await ship(p, { JOBHARVEST_SINK: 'syslog', JOBHARVEST_ENDPOINT: rs.endpoint, JOBHARVEST_SYSLOG_PROTOCOL: protocol })).toEqual({ kind: 'ok' });
        const mine = () => rs.received().filter((m) => m.sd['k8s@32473']?.['k8s.pod.uid'] === p.uid);
        await waitFor("rsyslog's file to hold the pod's 4 messages", () => (mine().length === 4 ? true : undefined), { timeoutMs: 20_000 });
        const byId = new Map(mine().map((m) => [m.sd['k8s@32473']!['jobharvest.id'], m]));
        const h = byId.get(recordId(p.hostile))!;
        expect(h.msg).toBe(HOSTILE_LINE);
        expect(h.sd['k8s@32473']).toMatchObject({ 'k8s.pod.name': p.name, 'jobharvest.id': recordId(p.hostile) });
        expect(h.sd['json@32473']).toEqual({ 'k8s.pod.name': 'evil', message: 'x', '@timestamp': '1970', id: 'forged', level: 'error', user: '{"id":7,"tags":["a","b"]}', ratio: '0.5' });
        expect(h.sd['label@32473']).toEqual(LABELS);
        expect(h.sd['annotation@32473']).toEqual(ANNOTATIONS);
        const j = byId.get(recordId(p.joined))!;
        expect(j.msg).toBe(MULTILINE);
        expect(j.sd['k8s@32473']!['jobharvest.lines']).toBe('4');
        expect(j.sd).not.toHaveProperty('json@32473');
      } finally {
        await rs.dispose();
      }
    });
  }
});

describe('shaped records through a real Fluentd forward receiver', () => {
  let rx: ForwardReceiver;
  beforeAll(async () => {
    rx = await ForwardReceiver.start();
  });
  afterAll(async () => {
    await rx?.dispose();
  });

  it('forward: the message and the jobharvest fields as sent, the tenant\'s fields under json, the joined record whole', async () => {
    const p = pod('forward');
    expect(await ship(p, { JOBHARVEST_SINK: 'forward', JOBHARVEST_ENDPOINT: rx.endpoint })).toEqual({ kind: 'ok' });
    const mine = () => rx.received().filter((m) => m.attributes['k8s.pod.uid'] === p.uid);
    await waitFor("the receiver's file to hold the pod's 4 records", () => (mine().length === 4 ? true : undefined), { timeoutMs: 20_000 });
    const byId = new Map(mine().map((m) => [m.attributes['jobharvest.id'], m]));
    const h = byId.get(recordId(p.hostile))!;
    // The collector's fluentforward receiver makes the record's `message` the body and every other key an attribute.
    expect(h.body).toBe(HOSTILE_LINE);
    expect(h.attributes).toMatchObject({ 'k8s.pod.name': p.name, 'k8s.job.label.team': 'data', 'k8s.job.annotation.example.com/owner': 'night shift', stream: 'stdout' });
    // ForwardReceiver keeps a map attribute as its OTLP JSON text.
    expect(plainValue(JSON.parse(String(h.attributes.json)) as OtlpAnyValue)).toEqual(HOSTILE);
    const j = byId.get(recordId(p.joined))!;
    expect(j.body).toBe(MULTILINE);
    expect(j.attributes['jobharvest.lines']).toBe(4);
  });
});
