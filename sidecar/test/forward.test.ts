import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { createServer as createTlsServer, type TLSSocket } from 'node:tls';
import { decode, decodeMulti, decodeMultiStream, encode, ExtData } from '@msgpack/msgpack';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../config.ts';
import { FLAG_TRUNCATED } from '../records/record.ts';
import { createSink, loadForwardSettings } from '../sinks/forward.ts';
import { buildPing, checkPong, chunkId, ForwardEncoder, TagTemplate } from '../sinks/forward/protocol.ts';
import type { Sink } from '../delivery/sink.ts';
import { makeMeta, makeRecord, testConfig } from '../../test/support/sidecar-helpers.ts';
import { writeTestPki, type TestPki } from '../../test/support/test-pki.ts';

const cfg = testConfig();
const id = cfg.identity;
const sha512 = (...parts: Array<string | Uint8Array>) => {
  const h = createHash('sha512');
  for (const p of parts) h.update(p);
  return h.digest('hex');
};

function timeOf(ext: unknown): [number, number] {
  expect(ext).toBeInstanceOf(ExtData);
  const e = ext as ExtData;
  expect(e.type).toBe(0);
  const v = new DataView((e.data as Uint8Array).buffer, (e.data as Uint8Array).byteOffset, 8);
  return [v.getUint32(0), v.getUint32(4)];
}

describe('forward encoding', () => {
  const fileA = makeMeta('main', 1, 'aaaaaaaaaaaaaaaa');
  const records = [
    makeRecord('first', { file: fileA, offset: 0, ts: '2024-05-06T07:08:09.123456789Z' }),
    makeRecord('second', { file: fileA, offset: 50, stream: 'stderr', ts: '2024-05-06T07:08:10Z', flags: FLAG_TRUNCATED }),
    makeRecord('third', { file: fileA, offset: 99, ts: '2024-05-06T07:08:11.5Z' }),
  ];

  it('packs entries as a gzip-compressed msgpack stream with EventTime, chunk and size', () => {
    const enc = new ForwardEncoder(id, new TagTemplate('kube.${namespace}.${container}', id), 'packed-forward', 1);
    const msgs = enc.encode(records);
    expect(msgs).toHaveLength(1);
    const [tag, stream, options] = decode(msgs[0]!.bytes) as [string, Uint8Array, Record<string, unknown>];
    expect(tag).toBe('kube.team-a.main');
    expect(options).toEqual({ chunk: msgs[0]!.chunk, size: 3, compressed: 'gzip' });
    const entries = [...decodeMulti(gunzipSync(stream))] as Array<[ExtData, Record<string, unknown>]>;
    expect(entries.map((e) => timeOf(e[0]))).toEqual([
      [Date.parse('2024-05-06T07:08:09Z') / 1000, 123456789],
      [Date.parse('2024-05-06T07:08:10Z') / 1000, 0],
      [Date.parse('2024-05-06T07:08:11Z') / 1000, 500000000],
    ]);
    expect(entries[1]![1]).toEqual({
      message: 'second',
      stream: 'stderr',
      'jobharvest.id': `${fileA.idPrefix}50`,
      'jobharvest.truncated': true,
      'k8s.namespace.name': 'team-a',
      'k8s.pod.name': 'job-abc-xyz',
      'k8s.pod.uid': 'uid-1',
      'k8s.container.name': 'main',
      'k8s.container.restart_count': 1,
      'k8s.job.name': 'job-abc',
      'k8s.node.name': 'node-1',
    });
  });

  it('Forward mode: entries as an array; one message per tag', () => {
    const enc = new ForwardEncoder(id, new TagTemplate('k.${stream}', id), 'forward', 0);
    const msgs = enc.encode(records);
    expect(msgs.map((m) => [m.tag, m.records.length])).toEqual([['k.stdout', 2], ['k.stderr', 1]]);
    const [tag, entries, options] = decode(msgs[0]!.bytes) as [string, Array<[ExtData, Record<string, unknown>]>, Record<string, unknown>];
    expect(tag).toBe('k.stdout');
    expect(entries.map((e) => e[1].message)).toEqual(['first', 'third']);
    expect(options).toEqual({ chunk: msgs[0]!.chunk, size: 2 });
    expect(msgs[0]!.chunk).not.toBe(msgs[1]!.chunk);
  });

  it('gives a resent batch the same 128-bit chunk id, and another batch another', () => {
    const a = chunkId('t', records);
    expect(chunkId('t', [...records])).toBe(a);
    expect(Buffer.from(a, 'base64')).toHaveLength(16);
    expect(chunkId('t', records.slice(0, 2))).not.toBe(a);
    expect(chunkId('u', records)).not.toBe(a);
  });

  it('fills the tag template, and rejects unknown variables', () => {
    const t = new TagTemplate('kube.${namespace}.${job}.${pod}.${container}.${stream}', { ...id, job: '' });
    expect(t.tag(records[1]!)).toBe('kube.team-a._.job-abc-xyz.main.stderr');
    expect(loadForwardSettings({})).toEqual({ mode: 'packed-forward', tag: 'kube.${namespace}.${job}.${container}', sharedKey: undefined });
    expect(() => loadForwardSettings({ JOBHARVEST_FORWARD_TAG: 'x.${label}' })).toThrow(ConfigError);
    expect(() => loadForwardSettings({ JOBHARVEST_FORWARD_MODE: 'message' })).toThrow(ConfigError);
  });

  it('computes the shared-key digests the spec defines, and checks the server one', () => {
    const helo = { nonce: Buffer.from('nonce-1'), authSalt: Buffer.from('salt-2') };
    const ping = buildPing(helo, { sharedKey: 'k', hostname: 'node-1', username: 'u', password: 'p' }, 'salt-0');
    expect(ping.message).toEqual(['PING', 'node-1', 'salt-0', sha512('salt-0', 'node-1', 'nonce-1', 'k'), 'u', sha512('salt-2', 'u', 'p')]);
    const pong = ['PONG', true, '', 'fluentd-1', sha512('salt-0', 'fluentd-1', 'nonce-1', 'k')];
    expect(checkPong(pong, helo, ping, 'k')).toBeUndefined();
    expect(checkPong([...pong.slice(0, 4), sha512('salt-0', 'fluentd-1', 'nonce-1', 'other')], helo, ping, 'k')).toMatch(/shared key/);
    expect(checkPong(['PONG', false, 'bad user', '', ''], helo, ping, 'k')).toMatch(/bad user/);
  });
});

interface FakeOptions {
  /** Shared key the server demands (with HELO/PING/PONG). */
  sharedKey?: string;
  /** Return false to swallow a message without acking it. */
  ack?: (chunk: string, n: number) => boolean;
}

/** A forward receiver: optional shared-key handshake, acks chunks, records every entry it got. */
async function fakeForward(make: (on: (s: Socket) => void) => Server, opts: FakeOptions = {}) {
  const got: Array<{ chunk: string; messages: string[] }> = [];
  const sockets: Socket[] = [];
  const authFailures: string[] = [];
  let n = 0;
  const srv = make((sock) => {
    sockets.push(sock);
    sock.on('error', () => {});
    void (async () => {
      const nonce = randomBytes(16);
      let authed = !opts.sharedKey;
      if (opts.sharedKey) sock.write(encode(['HELO', { nonce, auth: '', keepalive: true }]));
      try {
        for await (const msg of decodeMultiStream(sock)) {
          const m = msg as unknown[];
          if (!authed) {
            const [, host, salt, digest] = m as [string, string, string, string];
            const ok = digest === sha512(salt, host, nonce, opts.sharedKey!);
            if (!ok) authFailures.push(host);
            sock.write(encode(['PONG', ok, ok ? '' : 'shared key mismatch', 'fake-fluentd', sha512(salt, 'fake-fluentd', nonce, opts.sharedKey!)]));
            if (!ok) sock.end();
            authed = ok;
            continue;
          }
          const [, entries, options] = m as [string, Uint8Array, { chunk: string; compressed?: string }];
          const raw = options.compressed === 'gzip' ? gunzipSync(entries) : entries;
          const messages = ([...decodeMulti(raw)] as Array<[unknown, { message: string }]>).map((e) => e[1].message);
          got.push({ chunk: options.chunk, messages });
          if (opts.ack?.(options.chunk, ++n) ?? true) sock.write(encode({ ack: options.chunk }));
        }
      } catch {
        // connection dropped
      }
    })();
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return {
    port: (srv.address() as { port: number }).port,
    got,
    sockets,
    authFailures,
    close: () => new Promise<void>((r) => {
      for (const s of sockets) s.destroy();
      srv.close(() => r());
    }),
  };
}

const signal = new AbortController().signal;
const noHttp = () => {
  throw new Error('no http');
};
const sinkFor = (port: number, env: Record<string, string> = {}, scheme = 'tcp', host = '127.0.0.1', extra: Record<string, string> = {}) =>
  createSink({ config: testConfig({ JOBHARVEST_SINK: 'forward', JOBHARVEST_ENDPOINT: `${scheme}://${host}:${port}`, JOBHARVEST_REQUEST_TIMEOUT_MS: '400', ...extra }), http: noHttp }, env) as Sink;
const batch = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => makeRecord(`${prefix}-${i}`, { offset: i * 10 }));

describe('forward sink against a receiver', () => {
  let fake: Awaited<ReturnType<typeof fakeForward>> | undefined;
  afterEach(async () => {
    await fake?.close();
    fake = undefined;
  });

  it('is ok only once {"ack": chunk} came back', async () => {
    fake = await fakeForward((on) => createServer(on));
    const sink = sinkFor(fake.port);
    expect(await sink.send(batch('a', 3), signal)).toEqual({ kind: 'ok' });
    expect(await sink.send(batch('b', 2), signal)).toEqual({ kind: 'ok' });
    expect(fake.got.map((g) => g.messages)).toEqual([['a-0', 'a-1', 'a-2'], ['b-0', 'b-1']]);
    await sink.close!();
  });

  it('resends the same chunk id on a new connection when the ack times out', async () => {
    fake = await fakeForward((on) => createServer(on), { ack: (_c, n) => n !== 1 });
    const sink = sinkFor(fake.port);
    const records = batch('c', 4);
    const first = await sink.send(records, signal);
    expect(first).toMatchObject({ kind: 'retry' });
    expect((first as { reason: string }).reason).toMatch(/no ack within 400 ms/);
    expect(await sink.send(records, signal)).toEqual({ kind: 'ok' });
    expect(fake.got).toHaveLength(2);
    expect(fake.got[0]!.chunk).toBe(fake.got[1]!.chunk);
    expect(fake.got[1]!.messages).toEqual(fake.got[0]!.messages);
    expect(fake.sockets).toHaveLength(2);
    await sink.close!();
  });

  it('gives up waiting for an ack at the drain deadline instead of holding the sidecar', async () => {
    fake = await fakeForward((on) => createServer(on), { ack: () => false });
    const sink = sinkFor(fake.port, {}, 'tcp', '127.0.0.1', { JOBHARVEST_REQUEST_TIMEOUT_MS: '60000' });
    const ctl = new AbortController();
    const started = Date.now();
    const pending = sink.send(batch('g', 2), ctl.signal);
    setTimeout(() => ctl.abort(new Error('drain deadline')), 200);
    const r = await pending;
    expect(r).toMatchObject({ kind: 'retry', reason: 'aborted at the drain deadline' });
    expect(Date.now() - started).toBeLessThan(5000);
    expect(fake.got).toHaveLength(1);
  });

  it('passes the shared-key handshake before sending', async () => {
    fake = await fakeForward((on) => createServer(on), { sharedKey: 's3cret' });
    const sink = sinkFor(fake.port, { JOBHARVEST_SHARED_KEY: 's3cret' });
    expect(await sink.send(batch('d', 2), signal)).toEqual({ kind: 'ok' });
    expect(fake.got.map((g) => g.messages)).toEqual([['d-0', 'd-1']]);
    expect(fake.authFailures).toEqual([]);
    await sink.close!();
  });

  it('retries (never sends records) with a wrong shared key, and says why', async () => {
    fake = await fakeForward((on) => createServer(on), { sharedKey: 's3cret' });
    const wrong = sinkFor(fake.port, { JOBHARVEST_SHARED_KEY: 'nope' });
    const r = await wrong.send(batch('e', 1), signal);
    expect(r.kind).toBe('retry');
    expect((r as { reason: string }).reason).toMatch(/shared key mismatch/);
    expect(fake.authFailures).toEqual(['node-1']);
    // Without a key the receiver's HELO is noticed instead of waiting for acks that never come.
    const none = sinkFor(fake.port);
    const r2 = await none.send(batch('e', 1), signal);
    expect(r2.kind).toBe('retry');
    expect((r2 as { reason: string }).reason).toMatch(/shared-key authentication/);
    expect(fake.got).toEqual([]);
  });

  describe('over TLS', () => {
    let dir: string;
    let pki: TestPki;
    beforeAll(async () => {
      dir = mkdtempSync(join(tmpdir(), 'jh-forward-tls-'));
      pki = await writeTestPki(dir);
    });
    afterAll(() => rmSync(dir, { recursive: true, force: true }));

    it('verifies the receiver with the custom CA and authenticates with the client certificate', async () => {
      let peer = '';
      fake = await fakeForward(
        (on) =>
          createTlsServer({ cert: pki.serverCert, key: pki.serverKey, ca: pki.caPem, requestCert: true, rejectUnauthorized: true }, (s: TLSSocket) => {
            peer = String(s.getPeerCertificate().subject.CN);
            on(s);
          }),
        { sharedKey: 'k' },
      );
      const sink = sinkFor(fake.port, { JOBHARVEST_SHARED_KEY: 'k' }, 'tls', 'localhost', {
        JOBHARVEST_TLS_CA_FILE: pki.files.ca,
        JOBHARVEST_TLS_CERT_FILE: pki.files.clientCert,
        JOBHARVEST_TLS_KEY_FILE: pki.files.clientKey,
      });
      expect(await sink.send(batch('f', 3), signal)).toEqual({ kind: 'ok' });
      expect(peer).toBe('jobharvest-sidecar');
      expect(fake.got.map((g) => g.messages)).toEqual([['f-0', 'f-1', 'f-2']]);
      await sink.close!();
    });
  });
});
