import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer as createTlsServer, type TLSSocket } from 'node:tls';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../config.ts';
import { FLAG_MALFORMED, FLAG_TRUNCATED } from '../records/record.ts';
import { SYSLOG_TRUNCATION_MARKER, SyslogEncoder, headerField, parseSeverityMap, syslogTimestamp, utf8Boundary } from '../sinks/syslog/format.ts';
import { OctetCountingTransport, octetFrames } from '../sinks/syslog/octet.ts';
import { RelpParser, RelpTransport, relpFrame } from '../sinks/syslog/relp.ts';
import { streamEndpoint } from '../sinks/stream/client.ts';
import { createSink, loadSyslogSettings } from '../sinks/syslog.ts';
import type { Sink } from '../delivery/sink.ts';
import { makeMeta, makeRecord, testConfig } from '../../test/support/sidecar-helpers.ts';
import { writeTestPki, type TestPki } from '../../test/support/test-pki.ts';

const cfg = testConfig();
const severity = { stdout: 6, stderr: 3, unknown: 5 };
const encoder = (maxBytes = 65536) => new SyslogEncoder({ identity: cfg.identity, facility: 16, severity, sdId: 'k8s@32473', maxBytes });

/** Splits an RFC 6587 octet-counted stream back into messages; throws on a bad frame. */
function parseOctets(b: Buffer): string[] {
  const out: string[] = [];
  let i = 0;
  while (i < b.length) {
    const sp = b.indexOf(0x20, i);
    const len = Number(b.toString('latin1', i, sp));
    if (!Number.isInteger(len) || len <= 0) throw new Error(`bad frame length at ${i}`);
    out.push(b.toString('utf8', sp + 1, sp + 1 + len));
    i = sp + 1 + len;
  }
  return out;
}

describe('RFC 5424 encoding', () => {
  it('maps container, pod and stream to APP-NAME, PROCID and MSGID, with the metadata as structured data', () => {
    const file = makeMeta('main', 2, 'aaaaaaaaaaaaaaaa');
    const msg = encoder().encode(makeRecord('hello "world" ✓', { file, offset: 77, stream: 'stderr', ts: '2024-05-06T07:08:09.123456789Z' })).toString('utf8');
    expect(msg).toBe(
      '<131>1 2024-05-06T07:08:09.123456Z node-1 main job-abc-xyz stderr ' +
        `[k8s@32473 jobharvest.id="${file.idPrefix}77" time="2024-05-06T07:08:09.123456789Z" k8s.namespace.name="team-a" k8s.pod.name="job-abc-xyz" k8s.pod.uid="uid-1" k8s.container.name="main" k8s.container.restart_count="2" k8s.job.name="job-abc" k8s.node.name="node-1"] ` +
        'hello "world" ✓',
    );
  });

  it('escapes PARAM-VALUE and keeps header fields printable and within their limits', () => {
    const id = { ...cfg.identity, namespace: 'a"b]c\\d' };
    const enc = new SyslogEncoder({ identity: id, facility: 1, severity, sdId: 'x@1', maxBytes: 65536 });
    const text = enc.encode(makeRecord('m', { file: makeMeta('c'.repeat(60)) })).toString();
    expect(text).toContain('k8s.namespace.name="a\\"b\\]c\\\\d"');
    expect(text.split(' ')[3]).toBe('c'.repeat(48));
    expect(headerField('a b\u00e9', 10)).toBe('a_b_');
    expect(headerField('', 10)).toBe('-');
  });

  it('cuts the CRI nanoseconds to the 6 digits RFC 5424 allows and keeps offsets', () => {
    expect(syslogTimestamp('2024-05-06T07:08:09.123456789Z')).toBe('2024-05-06T07:08:09.123456Z');
    expect(syslogTimestamp('2024-05-06T07:08:09.5+02:00')).toBe('2024-05-06T07:08:09.5+02:00');
    expect(syslogTimestamp('2024-05-06T07:08:09Z')).toBe('2024-05-06T07:08:09Z');
    expect(syslogTimestamp('garbage')).toBe('-');
  });

  it('sets PRI from facility and per-stream severity, unknown streams included', () => {
    const e = encoder();
    expect(e.encode(makeRecord('a', { stream: 'stdout' })).toString()).toMatch(/^<134>1 /);
    expect(e.encode(makeRecord('a', { stream: 'stderr' })).toString()).toMatch(/^<131>1 /);
    const raw = e.encode(makeRecord('a', { stream: 'unknown', flags: FLAG_MALFORMED })).toString();
    expect(raw).toMatch(/^<133>1 \S+ \S+ main \S+ unknown /);
    expect(raw).toContain('jobharvest.malformed="true"');
  });

  it('caps a message at the receiver limit with a marker, never splitting a UTF-8 character', () => {
    const e = encoder(600);
    const out = e.encode(makeRecord('€'.repeat(400)));
    expect(out.length).toBeLessThanOrEqual(600);
    const text = out.toString('utf8');
    expect(text.endsWith(SYSLOG_TRUNCATION_MARKER)).toBe(true);
    expect(text).not.toContain('\ufffd');
    expect(text).toContain('jobharvest.truncated="true"');
    // Already cut by the parser but fits: flagged, not cut again.
    const small = e.encode(makeRecord('short', { flags: FLAG_TRUNCATED })).toString();
    expect(small).toContain('jobharvest.truncated="true"] short');
    expect(utf8Boundary(Buffer.from('a€'), 2)).toBe(1);
  });

  it('reads severities per stream and rejects bad settings in one error', () => {
    expect(parseSeverityMap('stdout=info,stderr=err').map).toEqual({ stdout: 6, stderr: 3, unknown: 6 });
    expect(parseSeverityMap('warning').map).toEqual({ stdout: 4, stderr: 4, unknown: 4 });
    expect(parseSeverityMap('stdout=notice,stderr=2,unknown=debug').map).toEqual({ stdout: 5, stderr: 2, unknown: 7 });
    expect(parseSeverityMap('stdout=loud').problem).toBeDefined();
    expect(parseSeverityMap('stdin=info').problem).toBeDefined();
    expect(parseSeverityMap('stdout=constructor').problem).toBeDefined();
    expect(parseSeverityMap('__proto__').problem).toBeDefined();
    const s = loadSyslogSettings({});
    expect(s).toMatchObject({ protocol: 'octet-counting', facility: 1, sdId: 'k8s@32473', maxBytes: 65536 });
    try {
      loadSyslogSettings({ JOBHARVEST_SYSLOG_PROTOCOL: 'udp', JOBHARVEST_SYSLOG_FACILITY: 'local9', JOBHARVEST_SYSLOG_SD_ID: 'a b', JOBHARVEST_SYSLOG_MAX_MESSAGE_BYTES: '100' });
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      expect((err as ConfigError).problems).toHaveLength(4);
    }
  });

  it('needs a tcp:// or tls:// endpoint', () => {
    expect(() => streamEndpoint(testConfig({ JOBHARVEST_SINK: 'syslog', JOBHARVEST_ENDPOINT: 'http://x:1' }), 514, 'syslog')).toThrow(ConfigError);
    const ep = streamEndpoint(testConfig({ JOBHARVEST_SINK: 'syslog', JOBHARVEST_ENDPOINT: 'tcp://[::1]' }), 514, 'syslog');
    expect(ep).toMatchObject({ host: '::1', port: 514 });
    expect(ep.tls).toBeUndefined();
  });
});

/** A receiver that records every byte per connection and can be told to hang up. */
interface ByteServer {
  readonly port: number;
  readonly conns: Array<{ sock: Socket; data: Buffer[] }>;
  messages(): string[];
  close(): Promise<void>;
}

async function byteServer(make: (onSock: (s: Socket) => void) => Server): Promise<ByteServer> {
  const conns: ByteServer['conns'] = [];
  const srv = make((sock) => {
    const c = { sock, data: [] as Buffer[] };
    conns.push(c);
    sock.on('data', (d: Buffer) => c.data.push(d));
    sock.on('error', () => {});
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return {
    port: (srv.address() as { port: number }).port,
    conns,
    messages: () => conns.flatMap((c) => parseOctets(Buffer.concat(c.data))),
    close: () =>
      new Promise((r) => {
        for (const c of conns) c.sock.destroy();
        srv.close(() => r());
      }),
  };
}

const signal = new AbortController().signal;
const waitFor = async (cond: () => boolean, ms = 3000): Promise<void> => {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
};

describe('octet-counting transport', () => {
  let srv: ByteServer;
  afterEach(async () => srv?.close());

  it('frames every message as <length> <message> and acknowledges after the settle window', async () => {
    srv = await byteServer((on) => createServer(on));
    const sink = createSink(
      { config: testConfig({ JOBHARVEST_SINK: 'syslog', JOBHARVEST_ENDPOINT: `tcp://127.0.0.1:${srv.port}` }), http: () => { throw new Error('no http'); } },
      {},
    ) as Sink;
    const recs = ['one', 'two with\nnewline', 'ünïcödé'].map((m, i) => makeRecord(m, { offset: i * 100 }));
    expect(await sink.send(recs, signal)).toEqual({ kind: 'ok' });
    await waitFor(() => srv.messages().length === 3);
    expect(srv.messages().map((m) => m.slice(m.lastIndexOf('] ') + 2))).toEqual(['one', 'two with\nnewline', 'ünïcödé']);
    expect(octetFrames([Buffer.from('ab'), Buffer.from('€')]).toString()).toBe('2 ab3 €');
    await sink.close!();
  });

  it('retries a batch when the receiver hangs up right after it, then reconnects and resends', async () => {
    srv = await byteServer((on) => createServer(on));
    const t = new OctetCountingTransport({ host: '127.0.0.1', port: srv.port, label: 'test' }, 2000, 300);
    expect(await t.send([Buffer.from('first')], signal)).toEqual({ kind: 'ok' });
    // The receiver stops (as rsyslog does on SIGTERM) while the next batch is settling.
    const sent = t.send([Buffer.from('second')], signal);
    await waitFor(() => srv.messages().includes('second'));
    srv.conns[0]!.sock.destroy();
    const r = await sent;
    expect(r.kind).toBe('retry');
    expect(await t.send([Buffer.from('second')], signal)).toEqual({ kind: 'ok' });
    expect(srv.conns).toHaveLength(2);
    expect(srv.messages()).toEqual(['first', 'second', 'second']);
    await t.close();
  });

  it('returns retry, not an exception, while the receiver is down', async () => {
    srv = await byteServer((on) => createServer(on));
    const port = srv.port;
    await srv.close();
    const t = new OctetCountingTransport({ host: '127.0.0.1', port, label: 'test' }, 1000, 10);
    const r = await t.send([Buffer.from('x')], signal);
    expect(r).toMatchObject({ kind: 'retry' });
    expect((r as { reason: string }).reason).toMatch(/ECONNREFUSED/);
  });
});

describe('TLS (RFC 5425) with a custom CA and a client certificate', () => {
  let dir: string;
  let pki: TestPki;
  let srv: ByteServer;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'jh-syslog-tls-'));
    pki = await writeTestPki(dir);
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  afterEach(async () => srv?.close());

  const tlsServer = (on: (s: Socket) => void) =>
    createTlsServer({ cert: pki.serverCert, key: pki.serverKey, ca: pki.caPem, requestCert: true, rejectUnauthorized: true }, (s: TLSSocket) => on(s));

  it('verifies the server against the CA and presents the client certificate', async () => {
    srv = await byteServer(tlsServer);
    const config = testConfig({
      JOBHARVEST_SINK: 'syslog',
      JOBHARVEST_ENDPOINT: `tls://localhost:${srv.port}`,
      JOBHARVEST_TLS_CA_FILE: pki.files.ca,
      JOBHARVEST_TLS_CERT_FILE: pki.files.clientCert,
      JOBHARVEST_TLS_KEY_FILE: pki.files.clientKey,
    });
    const sink = createSink({ config, http: () => { throw new Error('no http'); } }, {}) as Sink;
    expect(await sink.send([makeRecord('secret line')], signal)).toEqual({ kind: 'ok' });
    await waitFor(() => srv.messages().length === 1);
    expect((srv.conns[0]!.sock as TLSSocket).getPeerCertificate().subject.CN).toBe('jobharvest-sidecar');
    expect(srv.messages()[0]).toMatch(/ secret line$/);
    await sink.close!();
  });

  it('refuses a server the CA did not sign (retry, nothing sent)', async () => {
    srv = await byteServer(tlsServer);
    const config = testConfig({ JOBHARVEST_SINK: 'syslog', JOBHARVEST_ENDPOINT: `tls://localhost:${srv.port}` });
    const sink = createSink({ config, http: () => { throw new Error('no http'); } }, {}) as Sink;
    const r = await sink.send([makeRecord('x')], signal);
    expect(r.kind).toBe('retry');
    expect((r as { reason: string }).reason).toMatch(/certificate/i);
    expect(srv.messages()).toEqual([]);
  });
});

/** A RELP receiver: answers open, acks syslog commands (or not, as told), records messages. */
async function relpServer(opts: { refuse?: (msg: string) => boolean; silent?: (msg: string) => boolean } = {}) {
  const received: string[] = [];
  const sockets: Socket[] = [];
  const srv = createServer((sock) => {
    sockets.push(sock);
    const parser = new RelpParser();
    sock.on('error', () => {});
    sock.on('data', (d: Buffer) => {
      for (const f of parser.push(d)) {
        const text = f.data.toString('utf8');
        if (f.command === 'open') sock.write(relpFrame(f.txnr, 'rsp', Buffer.from('200 OK\nrelp_version=0\ncommands=syslog')));
        else if (f.command === 'syslog') {
          if (opts.silent?.(text)) continue;
          if (opts.refuse?.(text)) {
            sock.write(relpFrame(f.txnr, 'rsp', Buffer.from('500 no room')));
            continue;
          }
          received.push(text);
          sock.write(relpFrame(f.txnr, 'rsp', Buffer.from('200 OK')));
        } else if (f.command === 'close') sock.end(relpFrame(f.txnr, 'rsp'));
      }
    });
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  return {
    port,
    received,
    sockets,
    close: () => new Promise<void>((r) => {
      for (const s of sockets) s.destroy();
      srv.close(() => r());
    }),
  };
}

describe('RELP transport', () => {
  it('parses frames split anywhere, with and without data', () => {
    const p = new RelpParser();
    const bytes = Buffer.concat([relpFrame(1, 'rsp', Buffer.from('200 OK')), relpFrame(0, 'serverclose'), relpFrame(2, 'rsp', Buffer.from('a\nb'))]);
    const frames = [];
    for (let i = 0; i < bytes.length; i += 3) frames.push(...p.push(bytes.subarray(i, i + 3)));
    expect(frames.map((f) => [f.txnr, f.command, f.data.toString()])).toEqual([[1, 'rsp', '200 OK'], [0, 'serverclose', ''], [2, 'rsp', 'a\nb']]);
    expect(() => new RelpParser().push(Buffer.from('x'.repeat(100)))).toThrow();
  });

  it('acknowledges a batch only when every message got rsp 200', async () => {
    const s = await relpServer({ refuse: (m) => m === 'bad' });
    const t = new RelpTransport({ host: '127.0.0.1', port: s.port, label: 'relp' }, 2000);
    expect(await t.send(['a', 'b', 'c'].map((m) => Buffer.from(m)), signal)).toEqual({ kind: 'ok' });
    expect(s.received).toEqual(['a', 'b', 'c']);
    const r = await t.send(['d', 'bad'].map((m) => Buffer.from(m)), signal);
    expect(r).toMatchObject({ kind: 'retry' });
    expect((r as { reason: string }).reason).toContain('500 no room');
    await t.close();
    await s.close();
  });

  it('retries when an answer never comes, on a fresh session', async () => {
    let drop = true;
    const s = await relpServer({ silent: (m) => m === 'slow' && drop });
    const t = new RelpTransport({ host: '127.0.0.1', port: s.port, label: 'relp' }, 300);
    const r = await t.send([Buffer.from('slow')], signal);
    expect(r).toMatchObject({ kind: 'retry' });
    drop = false;
    expect(await t.send([Buffer.from('slow')], signal)).toEqual({ kind: 'ok' });
    expect(s.sockets).toHaveLength(2);
    await t.close();
    await s.close();
  });

  it('fails the unanswered messages when the receiver goes away mid-batch', async () => {
    const s = await relpServer({ silent: () => true });
    const t = new RelpTransport({ host: '127.0.0.1', port: s.port, label: 'relp' }, 5000);
    const pending = t.send([Buffer.from('x')], signal);
    await waitFor(() => s.sockets.length === 1);
    await new Promise((r) => setTimeout(r, 50));
    s.sockets[0]!.destroy();
    const r = await pending;
    expect(r.kind).toBe('retry');
    await s.close();
  });
});
