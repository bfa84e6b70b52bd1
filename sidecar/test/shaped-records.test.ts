// Records the shaping stage touched (JSON fields, joined lines) and a Job
// with carried labels, through every encoder: the fields land under their own
// name, a tenant key that names a jobharvest field overwrites nothing, and a
// joined message keeps its newlines.
import { decode, decodeMulti, type ExtData } from '@msgpack/msgpack';
import { JsonLogsSerializer } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { describe, expect, it } from 'vitest';
import { DOCUMENT_FIELDS, JOB_ANNOTATION_PREFIX, JOB_LABEL_PREFIX, LOKI_FIELDS, OTLP_ATTRIBUTES, SHAPED_FIELDS, lokiName } from '../../src/contract/record.ts';
import { ConfigError, type Identity } from '../config.ts';
import { DocumentEncoder } from '../encode/document.ts';
import { OtlpEncoder } from '../encode/otlp.ts';
import { severityOf } from '../encode/severity.ts';
import { CriRecord, FLAG_TRUNCATED, recordId, type Fields, type LogRecord } from '../records/record.ts';
import { encodeBulk } from '../sinks/elasticsearch.ts';
import { ForwardEncoder, TagTemplate } from '../sinks/forward/protocol.ts';
import { encodeLokiPush } from '../sinks/loki.ts';
import { OtlpRecordBuilder } from '../sinks/otlp.ts';
import { SyslogEncoder, paramName, sdIdLike } from '../sinks/syslog/format.ts';
import { octetFrames } from '../sinks/syslog/octet.ts';
import { RelpParser, relpFrame } from '../sinks/syslog/relp.ts';
import { makeMeta, makeRecord, testConfig } from '../../test/support/sidecar-helpers.ts';
import { anyOf, otlpRoot, type KV } from './otlp-proto.ts';

const LABELS = { 'app.kubernetes.io/name': 'etl', team: 'data' };
const ANNOTATIONS = { 'example.com/owner': 'ops "night" team' };
const cfg = testConfig({ JOBHARVEST_JOB_LABELS: JSON.stringify(LABELS), JOBHARVEST_JOB_ANNOTATIONS: JSON.stringify(ANNOTATIONS) });
const id: Identity = cfg.identity;
const file = makeMeta('main', 1, 'cccccccccccccccc');

/** A tenant's line that names jobharvest's own fields: it must overwrite none of them. */
const HOSTILE_LINE = '{"k8s.pod.name":"evil","message":"x","@timestamp":"1970","id":"forged","level":"error","stream":"stdin","json":{"a":1},"user":{"id":7,"tags":["a","b"]},"ratio":0.5,"neg":-3,"none":null}';
const HOSTILE = JSON.parse(HOSTILE_LINE) as Fields;
const MULTILINE = 'Traceback (most recent call last):\n  File "job.py", line 3, in <module>\n    main()\nValueError: "bad" ] \\ value';

const jsonRecord = makeRecord(HOSTILE_LINE, { file, offset: 10, fields: HOSTILE });
const joined = makeRecord(MULTILINE, { file, offset: 500, stream: 'stderr', lines: 4 });
const plain = makeRecord('plain line', { file, offset: 900 });
const records: LogRecord[] = [jsonRecord, joined, plain];

describe('contract: the shaped names take no name jobharvest already uses', () => {
  it('per format', () => {
    const doc = Object.values(DOCUMENT_FIELDS) as string[];
    expect(doc).not.toContain(SHAPED_FIELDS.document.json);
    expect(doc).not.toContain(SHAPED_FIELDS.document.lines);
    expect(Object.values(OTLP_ATTRIBUTES)).not.toContain(SHAPED_FIELDS.otlp.original);
    expect(Object.values(OTLP_ATTRIBUTES)).not.toContain(SHAPED_FIELDS.otlp.lines);
    for (const name of Object.values(LOKI_FIELDS)) {
      expect(name).not.toBe(SHAPED_FIELDS.loki.lines);
      for (const prefix of [SHAPED_FIELDS.loki.json, SHAPED_FIELDS.loki.label, SHAPED_FIELDS.loki.annotation]) expect(name.startsWith(prefix)).toBe(false);
    }
    for (const name of doc) expect(name.startsWith(JOB_LABEL_PREFIX) || name.startsWith(JOB_ANNOTATION_PREFIX)).toBe(false);
    expect(lokiName('json_', 'a.b/c-d é')).toBe('json_a_b_c_d__');
  });
});

describe('config: carried labels and annotations', () => {
  it('parses the JSON objects into the identity, and the Loki options', () => {
    expect(id.labels).toEqual(LABELS);
    expect(id.annotations).toEqual(ANNOTATIONS);
    const c = testConfig({ JOBHARVEST_LOKI_STREAM_LABELS: ' team , app.kubernetes.io/name,', JOBHARVEST_LOKI_MAX_METADATA: '5' });
    expect(c.lokiStreamLabels).toEqual(['team', 'app.kubernetes.io/name']);
    expect(c.lokiMaxMetadata).toBe(5);
    expect(testConfig().identity).toEqual({ namespace: 'team-a', pod: 'job-abc-xyz', podUid: 'uid-1', node: 'node-1', job: 'job-abc' });
    expect(testConfig().lokiMaxMetadata).toBe(32);
  });

  it('refuses JSON that is no object of strings', () => {
    const bad = (env: Record<string, string>) => {
      try {
        testConfig(env);
      } catch (e) {
        expect(e).toBeInstanceOf(ConfigError);
        return (e as ConfigError).problems;
      }
      throw new Error('accepted');
    };
    expect(bad({ JOBHARVEST_JOB_LABELS: '{"a":' })).toEqual(['JOBHARVEST_JOB_LABELS is not valid JSON']);
    expect(bad({ JOBHARVEST_JOB_LABELS: '["a"]' })).toEqual(['JOBHARVEST_JOB_LABELS must be a JSON object of key to value']);
    expect(bad({ JOBHARVEST_JOB_ANNOTATIONS: '{"a":1,"b":"ok","c":{"d":"e"}}' })).toEqual(["JOBHARVEST_JOB_ANNOTATIONS: the value of 'a' must be a string", "JOBHARVEST_JOB_ANNOTATIONS: the value of 'c' must be a string"]);
    expect(bad({ JOBHARVEST_LOKI_MAX_METADATA: '-1' })[0]).toContain('JOBHARVEST_LOKI_MAX_METADATA');
  });
});

/** What every document must say of itself, whatever the tenant's line said. */
function expectOwnFields(doc: Record<string, unknown>, r: LogRecord): void {
  expect(doc['k8s.pod.name']).toBe('job-abc-xyz');
  expect(doc['@timestamp']).toBe(r.ts);
  expect(doc.message).toBe(r.message);
  expect(doc.id).toBe(recordId(r));
  expect(doc.stream).toBe(r.stream);
}

describe('document (http / VictoriaLogs / elasticsearch / stdout / dead-letter)', () => {
  const carried = {
    [`${JOB_LABEL_PREFIX}app.kubernetes.io/name`]: 'etl',
    [`${JOB_LABEL_PREFIX}team`]: 'data',
    [`${JOB_ANNOTATION_PREFIX}example.com/owner`]: 'ops "night" team',
  };

  it('nests the fields under json, counts joined lines, carries the labels, and keeps its own fields', () => {
    const docs = new DocumentEncoder(id)
      .lines(records)
      .toString('utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(docs).toHaveLength(3);
    expectOwnFields(docs[0]!, jsonRecord);
    expect(docs[0]![SHAPED_FIELDS.document.json]).toEqual(HOSTILE);
    expect(docs[0]).toMatchObject(carried);
    expect(docs[0]).not.toHaveProperty(SHAPED_FIELDS.document.lines);
    expectOwnFields(docs[1]!, joined);
    expect(docs[1]!.message).toBe(MULTILINE);
    expect(docs[1]![SHAPED_FIELDS.document.lines]).toBe(4);
    expect(docs[1]).not.toHaveProperty('json');
    expect(docs[2]).toEqual({
      '@timestamp': plain.ts,
      message: 'plain line',
      stream: 'stdout',
      id: recordId(plain),
      'k8s.namespace.name': 'team-a',
      'k8s.pod.name': 'job-abc-xyz',
      'k8s.pod.uid': 'uid-1',
      'k8s.container.name': 'main',
      'k8s.container.restart_count': 1,
      'k8s.job.name': 'job-abc',
      'k8s.node.name': 'node-1',
      ...carried,
    });
  });

  it('writeLine and encode write the same bytes, flags, fields and parsed records alike', () => {
    const src = Buffer.from(`2024-05-06T07:08:09.5Z stdout F ${HOSTILE_LINE}`);
    const parsed = CriRecord.of(file, 0, 'stdout', src, 0, 22, 33, src.length, src.length + 1, src.length + 1, 0);
    // The shaping stage hands on a plain object; a CriRecord never has fields, so this one is only checked unshaped.
    const cases: LogRecord[] = [...records, makeRecord('cut', { file, flags: FLAG_TRUNCATED, fields: { a: 'é' }, lines: 2 }), parsed];
    const enc = new DocumentEncoder(id);
    expect(enc.lines(cases).toString('utf8')).toBe(cases.map((r) => new DocumentEncoder(id).encode(r) + '\n').join(''));
    const cut = JSON.parse(enc.encode(cases[3]!)) as Record<string, unknown>;
    expect(cut).toMatchObject({ 'jobharvest.truncated': true, 'jobharvest.lines': 2, json: { a: 'é' } });
  });

  it('an Elasticsearch _bulk document carries the same, and its _id stays the record id', () => {
    const lines = encodeBulk(new DocumentEncoder(id), 'logs', records)
      .toString()
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines[0]).toEqual({ create: { _index: 'logs', _id: recordId(jsonRecord) } });
    expectOwnFields(lines[1]!, jsonRecord);
    expect(lines[1]!.json).toEqual(HOSTILE);
    expect(lines[3]!.message).toBe(MULTILINE);
  });
});

interface DecodedLog {
  severityNumber?: number;
  severityText?: string;
  body: Record<string, unknown>;
  attributes: KV;
}

const attrs = (list: KV) => Object.fromEntries(list.map((a) => [a.key, anyOf(a.value)]));

describe('OTLP', () => {
  function decodeProto(bytes: Uint8Array): { resource: Record<string, unknown>; logs: DecodedLog[] } {
    const Req = otlpRoot.lookupType('otlp.ExportLogsServiceRequest');
    const req = Req.toObject(Req.decode(bytes), { longs: String, defaults: false }) as { resourceLogs: Array<{ resource: { attributes: KV }; scopeLogs: Array<{ logRecords: DecodedLog[] }> }> };
    expect(req.resourceLogs).toHaveLength(1);
    return { resource: attrs(req.resourceLogs[0]!.resource.attributes), logs: req.resourceLogs[0]!.scopeLogs[0]!.logRecords };
  }

  function expectShaped(resource: Record<string, unknown>, logs: DecodedLog[]): void {
    expect(resource).toMatchObject({ 'k8s.pod.name': 'job-abc-xyz', 'k8s.job.label.team': 'data', 'k8s.job.label.app.kubernetes.io/name': 'etl', 'k8s.job.annotation.example.com/owner': 'ops "night" team' });
    const [j, m, p] = logs;
    // The fields are the body; the line as written is an attribute; the attributes that say which record this is are jobharvest's.
    expect(anyOf(j!.body)).toEqual(HOSTILE);
    expect(attrs(j!.attributes)).toEqual({ 'log.record.uid': recordId(jsonRecord), 'log.iostream': 'stdout', 'log.record.original': HOSTILE_LINE });
    expect(j!.severityNumber).toBe(17);
    expect(j!.severityText).toBe('error');
    expect(anyOf(m!.body)).toBe(MULTILINE);
    expect(attrs(m!.attributes)).toEqual({ 'log.record.uid': recordId(joined), 'log.iostream': 'stderr', 'jobharvest.lines': 4 });
    expect(m!.severityNumber ?? 0).toBe(0);
    expect(anyOf(p!.body)).toBe('plain line');
    expect(attrs(p!.attributes)).toEqual({ 'log.record.uid': recordId(plain), 'log.iostream': 'stdout' });
  }

  it('protobuf: the body is the fields map, the line is log.record.original, the severity comes from level', () => {
    const { resource, logs } = decodeProto(new OtlpEncoder(id, 'jobharvest', '1').request(records));
    expectShaped(resource, logs);
  });

  it('JSON: the same record through the OpenTelemetry serializer', () => {
    const builder = new OtlpRecordBuilder(id, (a) => resourceFromAttributes(a));
    const req = JSON.parse(Buffer.from(JsonLogsSerializer.serializeRequest(builder.build(records))!).toString()) as { resourceLogs: Array<{ resource: { attributes: KV }; scopeLogs: Array<{ logRecords: DecodedLog[] }> }> };
    const rl = req.resourceLogs[0]!;
    expectShaped(attrs(rl.resource.attributes), rl.scopeLogs[0]!.logRecords);
  });

  it('maps level names and numeric levels to OpenTelemetry severities', () => {
    expect(severityOf({ level: 'TRACE' })).toEqual({ number: 1, text: 'TRACE' });
    expect(severityOf({ severity: 'debug' })?.number).toBe(5);
    expect(severityOf({ lvl: 'info' })?.number).toBe(9);
    expect(severityOf({ level: 'Warning' })?.number).toBe(13);
    expect(severityOf({ level: 'fatal' })?.number).toBe(21);
    expect(severityOf({ level: 50 })).toEqual({ number: 17, text: 'error' });
    expect(severityOf({ level: 'loud', severity: 'warn' })?.number).toBe(13);
    expect(severityOf({ msg: 'error' })).toBeUndefined();
  });
});

describe('Loki', () => {
  type Push = { streams: Array<{ stream: Record<string, string>; values: Array<[string, string, Record<string, string>]> }> };
  const push = (rs: readonly LogRecord[], o = {}) => JSON.parse(encodeLokiPush(id, rs, o)) as Push;

  it('JSON scalars as json_<key>, carried labels as label_<key>, joined lines intact, jobharvest metadata untouched', () => {
    const p = push(records);
    expect(p.streams.map((s) => s.stream)).toEqual([
      { namespace: 'team-a', job: 'job-abc', pod: 'job-abc-xyz', container: 'main', stream: 'stdout' },
      { namespace: 'team-a', job: 'job-abc', pod: 'job-abc-xyz', container: 'main', stream: 'stderr' },
    ]);
    const [j, pl] = p.streams[0]!.values;
    const carried = { label_app_kubernetes_io_name: 'etl', label_team: 'data', annotation_example_com_owner: 'ops "night" team' };
    expect(j![1]).toBe(HOSTILE_LINE);
    expect(j![2]).toEqual({
      pod_uid: 'uid-1',
      node: 'node-1',
      restart_count: '1',
      id: recordId(jsonRecord),
      ...carried,
      json_k8s_pod_name: 'evil',
      json_message: 'x',
      json__timestamp: '1970',
      json_id: 'forged',
      json_level: 'error',
      json_stream: 'stdin',
      json_ratio: '0.5',
      json_neg: '-3',
    });
    expect(pl![2]).toEqual({ pod_uid: 'uid-1', node: 'node-1', restart_count: '1', id: recordId(plain), ...carried });
    const m = p.streams[1]!.values[0]!;
    expect(m[1]).toBe(MULTILINE);
    expect(m[2]).toMatchObject({ lines: '4', id: recordId(joined) });
  });

  it('stream labels only for the keys named; structured metadata capped', () => {
    const p = push([jsonRecord], { streamLabels: ['team', 'absent'], maxMetadata: 3 });
    expect(p.streams[0]!.stream).toEqual({ namespace: 'team-a', job: 'job-abc', pod: 'job-abc-xyz', container: 'main', stream: 'stdout', label_team: 'data' });
    const meta = p.streams[0]!.values[0]![2];
    // Two carried fields, then one JSON field; the rest are still in the line.
    expect(meta).toEqual({ pod_uid: 'uid-1', node: 'node-1', restart_count: '1', id: recordId(jsonRecord), label_app_kubernetes_io_name: 'etl', annotation_example_com_owner: 'ops "night" team', json_k8s_pod_name: 'evil' });
    expect(push([jsonRecord], { maxMetadata: 0 }).streams[0]!.values[0]![2]).toEqual({ pod_uid: 'uid-1', node: 'node-1', restart_count: '1', id: recordId(jsonRecord) });
  });

  it('two keys that make one metadata name: the first is kept', () => {
    const fields = { 'a.b': 1, a_b: 2, ok: true };
    const meta = push([makeRecord(JSON.stringify(fields), { file, fields })]).streams[0]!.values[0]![2];
    expect(meta).toMatchObject({ json_a_b: '1', json_ok: 'true' });
  });
});

describe('forward', () => {
  it('the fields as one map under json, the labels beside the metadata, the joined message whole', () => {
    const enc = new ForwardEncoder(id, new TagTemplate('k.${container}', id), 'packed-forward', 0);
    const [msg] = enc.encode(records);
    const [, stream] = decode(msg!.bytes) as [string, Uint8Array];
    const entries = ([...decodeMulti(stream)] as Array<[ExtData, Record<string, unknown>]>).map((e) => e[1]);
    expect(entries[0]).toMatchObject({ message: HOSTILE_LINE, stream: 'stdout', 'k8s.pod.name': 'job-abc-xyz', 'jobharvest.id': recordId(jsonRecord), 'k8s.job.label.team': 'data', 'k8s.job.annotation.example.com/owner': 'ops "night" team' });
    expect(entries[0]!.json).toEqual(HOSTILE);
    expect(entries[1]).toMatchObject({ message: MULTILINE, 'jobharvest.lines': 4 });
    expect(entries[2]).not.toHaveProperty('json');
    expect(entries[2]).not.toHaveProperty('jobharvest.lines');
  });
});

/** The SD elements of an RFC 5424 message, and its MSG: a strict reader of the grammar. */
function parse5424(text: string): { sd: Array<{ id: string; params: Array<[string, string]> }>; msg: string } {
  let i = 0;
  for (let spaces = 0; spaces < 6; i++) if (text[i] === ' ') spaces++;
  const sd: Array<{ id: string; params: Array<[string, string]> }> = [];
  while (text[i] === '[') {
    const idEnd = text.slice(i + 1).search(/[ \]]/) + i + 1;
    const el = { id: text.slice(i + 1, idEnd), params: [] as Array<[string, string]> };
    i = idEnd;
    while (text[i] === ' ') {
      const eq = text.indexOf('="', i);
      const name = text.slice(i + 1, eq);
      expect(name, `PARAM-NAME ${name}`).toMatch(/^[!#-<>-\\^-~]{1,32}$/);
      let v = '';
      for (i = eq + 2; text[i] !== '"'; i++) {
        if (text[i] === '\\') i++;
        v += text[i];
      }
      el.params.push([name, v]);
      i++;
    }
    expect(text[i]).toBe(']');
    i++;
    sd.push(el);
  }
  expect(text[i]).toBe(' ');
  return { sd, msg: text.slice(i + 1) };
}

describe('syslog', () => {
  const encoder = new SyslogEncoder({ identity: id, facility: 16, severity: { stdout: 6, stderr: 3, unknown: 6 }, sdId: 'k8s@32473', maxBytes: 65536 });

  it('a second SD element with the fields, PARAM-NAMEs made valid, values escaped, nested values as JSON', () => {
    const { sd, msg } = parse5424(encoder.encode(jsonRecord).toString('utf8'));
    expect(msg).toBe(HOSTILE_LINE);
    expect(sd.map((e) => e.id)).toEqual(['k8s@32473', 'label@32473', 'annotation@32473', 'json@32473']);
    const own = Object.fromEntries(sd[0]!.params);
    expect(own).toMatchObject({ 'jobharvest.id': recordId(jsonRecord), 'k8s.pod.name': 'job-abc-xyz' });
    // The carried keys as PARAM-NAMEs of their own elements: `k8s.job.label.` would leave a key 18 of RFC 5424's 32 characters.
    expect(sd[1]!.params).toEqual([
      ['app.kubernetes.io/name', 'etl'],
      ['team', 'data'],
    ]);
    expect(sd[2]!.params).toEqual([['example.com/owner', 'ops "night" team']]);
    expect(Object.keys(own).filter((k) => k.startsWith('k8s.job.label') || k.startsWith('k8s.job.annotation'))).toEqual([]);
    expect(sd[3]!.params).toEqual([
      ['k8s.pod.name', 'evil'],
      ['message', 'x'],
      ['@timestamp', '1970'],
      ['id', 'forged'],
      ['level', 'error'],
      ['stream', 'stdin'],
      ['json', '{"a":1}'],
      ['user', '{"id":7,"tags":["a","b"]}'],
      ['ratio', '0.5'],
      ['neg', '-3'],
      ['none', 'null'],
    ]);
  });

  it('names and ids: invalid characters replaced, long names cut, the enterprise number kept', () => {
    expect(paramName('a b=c]d"e')).toBe('a_b_c_d_e');
    expect(paramName('é')).toBe('_');
    expect(paramName('')).toBe('_');
    expect(paramName('x'.repeat(40))).toBe('x'.repeat(32));
    expect(sdIdLike('json', 'k8s@32473')).toBe('json@32473');
    expect(sdIdLike('label', 'logs@1.2.3')).toBe('label@1.2.3');
    expect(sdIdLike('json', 'origin')).toBe('json@32473');
  });

  it('a joined record keeps its newlines through octet counting and RELP, and says how many lines', () => {
    const bytes = encoder.encode(joined);
    const { sd, msg } = parse5424(bytes.toString('utf8'));
    expect(msg).toBe(MULTILINE);
    expect(Object.fromEntries(sd[0]!.params)['jobharvest.lines']).toBe('4');
    expect(sd.map((e) => e.id)).toEqual(['k8s@32473', 'label@32473', 'annotation@32473']);
    const framed = octetFrames([bytes]);
    expect(framed.toString('utf8')).toBe(`${bytes.length} ${bytes.toString('utf8')}`);
    const frames = new RelpParser().push(Buffer.concat([relpFrame(7, 'syslog', bytes), relpFrame(8, 'syslog', encoder.encode(plain))]));
    expect(frames.map((f) => [f.txnr, f.command])).toEqual([
      [7, 'syslog'],
      [8, 'syslog'],
    ]);
    expect(parse5424(frames[0]!.data.toString('utf8')).msg).toBe(MULTILINE);
  });

  it('fields too large for the message limit are left out, the line is cut as before', () => {
    const small = new SyslogEncoder({ identity: id, facility: 16, severity: { stdout: 6, stderr: 3, unknown: 6 }, sdId: 'k8s@32473', maxBytes: 800 });
    const big = { blob: 'x'.repeat(2000) };
    const r = makeRecord(JSON.stringify(big), { file, fields: big });
    const out = small.encode(r);
    expect(out.length).toBeLessThanOrEqual(800);
    expect(out.toString()).not.toContain('[json@');
    expect(out.toString()).toContain('[label@32473 ');
    expect(out.toString()).toContain('jobharvest.truncated="true"');
  });
});
