import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { VictoriaLogs, exact } from '../../harness/servers/victorialogs.ts';
import { CountingHttpReceiver, CountingTcpReceiver } from '../../support/counting-receiver.ts';
import { FaultProxy } from '../../support/fault-proxy.ts';
import { connect } from 'node:net';
import { OtelCollector } from '../../harness/servers/otelcol.ts';

// Self-tests of the test tooling against the real server: a harness that
// miscounts would make every sidecar test meaningless.
describe('VictoriaLogs harness and fault proxy', () => {
  let vl: VictoriaLogs;
  let proxy: FaultProxy;
  const tag = `t${Date.now()}`;

  beforeAll(async () => {
    vl = await VictoriaLogs.start();
    proxy = await FaultProxy.start({ upstream: vl.url });
  });
  afterAll(async () => {
    await proxy?.close();
    await vl?.dispose();
  });

  it('ingests JSON lines, Loki push, Elasticsearch bulk and OTLP JSON and counts them with LogsQL', async () => {
    const now = new Date().toISOString();
    const jl = await fetch(`${proxy.url}/insert/jsonline?_msg_field=message&_time_field=time`, {
      method: 'POST',
      headers: { 'content-encoding': 'gzip' },
      body: gzipSync([1, 2, 3].map((i) => JSON.stringify({ message: `jl ${i}`, time: now, run: tag, via: 'jsonline' })).join('\n')),
    });
    expect(jl.status).toBe(200);
    const ts = `${BigInt(Date.now()) * 1_000_000n}`;
    const loki = await fetch(vl.endpoints.loki, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ streams: [{ stream: { run: tag, via: 'loki', namespace: 'ns1' }, values: [[ts, 'lk 1'], [ts, 'lk 2', { pod_uid: 'u1' }]] }] }),
    });
    expect(loki.status).toBe(204);
    const es = await fetch(vl.endpoints.elasticsearch, {
      method: 'POST',
      headers: { 'content-type': 'application/x-ndjson', 'VL-Msg-Field': 'message', 'VL-Time-Field': '@timestamp' },
      body: [1, 2, 3, 4].flatMap((i) => [JSON.stringify({ create: { _index: 'x', _id: `id${i}` } }), JSON.stringify({ message: `es ${i}`, '@timestamp': now, run: tag, via: 'es' })]).join('\n') + '\n',
    });
    expect(es.status).toBe(200);
    expect(((await es.json()) as { items: unknown[] }).items).toHaveLength(4);
    // VictoriaLogs takes OTLP protobuf only; JSON goes through a real collector.
    const otlpJsonRejected = await fetch(vl.endpoints.otlp, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    expect(otlpJsonRejected.status).toBe(400);
    const col = await OtelCollector.start(vl.endpoints.otlp);
    const otlp = await fetch(col.logsUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        resourceLogs: [{
          resource: { attributes: [{ key: 'k8s.namespace.name', value: { stringValue: 'ns-otlp' } }, { key: 'run', value: { stringValue: tag } }] },
          scopeLogs: [{ logRecords: [{ timeUnixNano: ts, body: { stringValue: 'ot 1' }, attributes: [{ key: 'log.iostream', value: { stringValue: 'stderr' } }] }] }],
        }],
      }),
    });
    expect(otlp.status, col.logTail()).toBe(200);
    await col.dispose();

    expect(await vl.count(exact('run', tag))).toBe(3 + 2 + 4 + 1);
    expect(await vl.count(`${exact('run', tag)} ${exact('via', 'jsonline')}`)).toBe(3);
    expect(await vl.count(`{via="loki",namespace="ns1"} ${exact('pod_uid', 'u1')}`)).toBe(1);
    expect(await vl.count(`${exact('k8s.namespace.name', 'ns-otlp')} ${exact('log.iostream', 'stderr')} ${exact('_msg', 'ot 1')}`)).toBe(1);
    expect(await vl.countWithDistinct(`${exact('run', tag)} ${exact('via', 'es')}`, '_msg')).toEqual({ total: 4, distinct: 4 });
  });

  it('injects 429 with Retry-After, 503, 413 above a size and slow responses, and refuses connections while down', async () => {
    const post = (body: string) => fetch(`${proxy.url}/insert/jsonline`, { method: 'POST', body });
    await proxy.setFault({ kind: 'status', status: 429, retryAfter: '2' });
    const r429 = await post('{"_msg":"x"}');
    expect(r429.status).toBe(429);
    expect(r429.headers.get('retry-after')).toBe('2');
    await proxy.setFault({ kind: 'status', status: 503 });
    expect((await post('{"_msg":"x"}')).status).toBe(503);
    await proxy.setFault({ kind: 'tooLarge', maxBytes: 100 });
    expect((await post(JSON.stringify({ _msg: 'y'.repeat(200), run: tag }))).status).toBe(413);
    expect((await post(JSON.stringify({ _msg: 'small', run: tag, via: '413' }))).status).toBe(200);
    await proxy.setFault({ kind: 'slow', delayMs: 600 });
    const t0 = Date.now();
    expect((await post(JSON.stringify({ _msg: 'slow', run: tag, via: 'slow' }))).status).toBe(200);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(550);

    const down = proxy.downFor(1500);
    await new Promise((r) => setTimeout(r, 200));
    const refused = await new Promise<string>((resolve) => {
      const s = connect(proxy.port, '127.0.0.1');
      s.once('connect', () => (s.destroy(), resolve('connected')));
      s.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'error'));
    });
    expect(refused).toBe('ECONNREFUSED');
    await down;
    expect((await post(JSON.stringify({ _msg: 'back', run: tag, via: 'back' }))).status).toBe(200);
    expect(proxy.count(429)).toBe(1);
    expect(proxy.count(503)).toBe(1);
    expect(proxy.count(413)).toBe(1);
    expect(await vl.count(`${exact('run', tag)} (${exact('via', '413')} or ${exact('via', 'slow')} or ${exact('via', 'back')})`)).toBe(3);
  });

  it('keeps its data and port across stop and start', async () => {
    const before = await vl.count(exact('run', tag));
    expect(before).toBeGreaterThan(0);
    const port = vl.port;
    await vl.stop();
    await expect(fetch(`${vl.url}/health`)).rejects.toThrow();
    await vl.start();
    expect(vl.port).toBe(port);
    expect(await vl.count(exact('run', tag))).toBe(before);
  });
});

describe('counting receivers', () => {
  it('count NDJSON records over HTTP, gzip or not, and newline-framed messages over TCP', async () => {
    const http = await CountingHttpReceiver.start();
    const tcp = await CountingTcpReceiver.start();
    try {
      await fetch(http.url, { method: 'POST', body: '{"a":1}\n{"a":2}\n{"a":3}' });
      await fetch(http.url, { method: 'POST', headers: { 'content-encoding': 'gzip' }, body: gzipSync('{"a":1}\n'.repeat(1000)) });
      await http.waitForLines(1003, 5000);
      expect(http.stats).toMatchObject({ lines: 1003, requests: 2 });
      const s = connect(tcp.port, '127.0.0.1');
      await new Promise((r) => s.once('connect', r));
      s.write('<13>1 a\n<13>1 b');
      s.write('\n<13>1 c\n');
      await tcp.waitForLines(3, 5000);
      s.destroy();
      expect(tcp.stats.lines).toBe(3);
    } finally {
      await http.close();
      await tcp.close();
    }
  });
});
