// Destination address classes: the spelling the operator wrote, normalised
// as the URL parser and the network would read it, and the address a name
// resolves to when a sink dials it.
import type { LookupAddress } from 'node:dns';
import { createServer, type Server } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { loadSink, type EngineOptions } from '../../sidecar/engine.ts';
import { makeRecord, testConfig } from '../../test/support/sidecar-helpers.ts';
import { addressClass, destinationProblem, dialGuard, dialProblem, ipAddressClass, parseDestinations, type Destination, type Resolver } from '../destinations.ts';
import { DEFAULT_LIMITS, shipConfig } from '../ship.ts';

const dest = (endpoint: string, allow: Destination['allow'] = []): Destination => ({ name: 'logs', sink: 'http', endpoint: new URL(endpoint), allow });

describe('addressClass: the normalised address', () => {
  it.each([
    // What the WHATWG URL parser makes of each spelling is what is classed.
    ['http://[::ffff:169.254.169.254]/', '[::ffff:a9fe:a9fe]', 'link-local'],
    ['http://[::ffff:127.0.0.1]/', '[::ffff:7f00:1]', 'loopback'],
    ['http://[::ffff:10.0.0.1]/', '[::ffff:a00:1]', 'private'],
    ['http://[::127.0.0.1]/', '[::7f00:1]', 'loopback'],
    ['http://[::169.254.169.254]/', '[::a9fe:a9fe]', 'link-local'],
    ['http://[64:ff9b::a9fe:a9fe]/', '[64:ff9b::a9fe:a9fe]', 'link-local'],
    ['http://[64:ff9b::169.254.169.254]/', '[64:ff9b::a9fe:a9fe]', 'link-local'],
    ['http://[64:ff9b::7f00:1]/', '[64:ff9b::7f00:1]', 'loopback'],
    ['http://[::ffff:0:a9fe:a9fe]/', '[::ffff:0:a9fe:a9fe]', 'link-local'],
    ['http://[64:ff9b:1::a9fe:a9fe]/', '[64:ff9b:1::a9fe:a9fe]', 'private'],
    ['http://[::1]/', '[::1]', 'loopback'],
    ['http://[::]/', '[::]', 'loopback'],
    ['http://[fe80::1]/', '[fe80::1]', 'link-local'],
    ['http://[fd00::1]/', '[fd00::1]', 'private'],
    ['http://[fec0::1]/', '[fec0::1]', 'private'],
    ['http://0x7f.1/', '127.0.0.1', 'loopback'],
    ['http://2852039166/', '169.254.169.254', 'link-local'],
    ['http://0.0.0.0/', '0.0.0.0', 'loopback'],
    ['http://100.64.0.1/', '100.64.0.1', 'private'],
    ['http://localhost./', 'localhost.', 'loopback'],
    ['http://LOCALHOST./', 'localhost.', 'loopback'],
    ['http://app.localhost./', 'app.localhost.', 'loopback'],
    ['http://vl.logging.svc.cluster.local./', 'vl.logging.svc.cluster.local.', 'cluster'],
    ['http://vl./', 'vl.', 'cluster'],
  ])('%s (hostname %s) is %s', (url, hostname, cls) => {
    const u = new URL(url);
    expect(u.hostname).toBe(hostname);
    expect(addressClass(u.hostname)).toBe(cls);
  });
  it.each(['http://logs.example.com/', 'http://logs.example.com./', 'http://8.8.8.8/', 'http://[2001:4860:4860::8888]/', 'http://[::ffff:8.8.8.8]/', 'http://[64:ff9b::808:808]/'])('%s is public', (url) => {
    expect(addressClass(new URL(url).hostname)).toBeUndefined();
  });
  it('parseDestinations reads a codec and refuses one it does not know', () => {
    expect(parseDestinations([{ name: 'x', sink: 'otlp', endpoint: 'https://logs.example/v1/logs', compression: 'zstd' }])[0]!.compression).toBe('zstd');
    expect(parseDestinations([{ name: 'x', sink: 'otlp', endpoint: 'https://logs.example/v1/logs' }])[0]).not.toHaveProperty('compression');
    expect(() => parseDestinations([{ name: 'x', sink: 'otlp', endpoint: 'https://logs.example/v1/logs', compression: 'brotli' }])).toThrow(/destination x: compression must be one of gzip, zstd, none/);
  });

  it('parseDestinations refuses each such spelling unless its class is allowed', () => {
    for (const endpoint of ['http://[::ffff:169.254.169.254]/', 'http://[::127.0.0.1]/', 'http://[64:ff9b::a9fe:a9fe]/', 'http://localhost./']) {
      expect(() => parseDestinations([{ name: 'x', sink: 'http', endpoint }])).toThrow(/is a (link-local|loopback) address/);
    }
    expect(destinationProblem(dest('http://[::ffff:169.254.169.254]/', ['link-local']))).toBeUndefined();
  });
});

/** A resolver stub: the answers a name has, and the names asked. */
function stub(answers: Record<string, string[]>): Resolver & { asked: string[] } {
  const asked: string[] = [];
  const r = async (hostname: string): Promise<LookupAddress[]> => {
    asked.push(hostname);
    const a = answers[hostname];
    if (!a) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
    return a.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
  };
  return Object.assign(r, { asked });
}

/** dialGuard as Node calls it: the callback's arguments. */
function dial(d: Destination, resolver: Resolver, hostname: string, all = false): Promise<{ err: NodeJS.ErrnoException | null; address: unknown; family?: number }> {
  return new Promise((resolve) => dialGuard(d, resolver)(hostname, { all, family: 0 }, (err, address, family) => resolve({ err, address, family })));
}

describe('dialGuard: the address a name resolves to, when it is dialled', () => {
  it.each([
    ['127.0.0.1', 'loopback'],
    ['169.254.169.254', 'link-local'],
    ['10.0.0.5', 'private'],
    ['::1', 'loopback'],
    ['::ffff:169.254.169.254', 'link-local'],
    ['64:ff9b::a9fe:a9fe', 'link-local'],
    ['fe80::1', 'link-local'],
  ])('refuses %s (%s) for a destination that does not allow it', async (address, cls) => {
    const r = await dial(dest('http://logs.example.com:9428/'), stub({ 'logs.example.com': [address] }), 'logs.example.com');
    expect(r.err?.message).toBe(`destination logs: logs.example.com resolved to ${address}, a ${cls} address; list '${cls}' in its allow to use it`);
    expect(r.err?.code).toBe('EJOBHARVESTREFUSED');
  });
  it('dials it once the destination allows its class', async () => {
    const r = await dial(dest('http://logs.example.com:9428/', ['loopback']), stub({ 'logs.example.com': ['127.0.0.1'] }), 'logs.example.com');
    expect(r).toEqual({ err: null, address: '127.0.0.1', family: 4 });
  });
  it('dials a public address', async () => {
    const r = await dial(dest('http://logs.example.com:9428/'), stub({ 'logs.example.com': ['203.0.113.7'] }), 'logs.example.com');
    expect(r).toEqual({ err: null, address: '203.0.113.7', family: 4 });
  });
  it('keeps only the addresses it may dial, in order (all: true, as autoSelectFamily asks)', async () => {
    const s = stub({ 'logs.example.com': ['127.0.0.1', '2001:db8::1', '169.254.169.254', '203.0.113.7'] });
    const r = await dial(dest('http://logs.example.com:9428/'), s, 'logs.example.com', true);
    expect(r.err).toBeNull();
    expect(r.address).toEqual([
      { address: '2001:db8::1', family: 6 },
      { address: '203.0.113.7', family: 4 },
    ]);
    const one = await dial(dest('http://logs.example.com:9428/'), s, 'logs.example.com');
    expect(one).toEqual({ err: null, address: '2001:db8::1', family: 6 });
  });
  it("a Service name may reach the private addresses Services and pods have, not loopback or link-local", async () => {
    const d = dest('http://vl.logging.svc:9428/', ['cluster']);
    expect((await dial(d, stub({ 'vl.logging.svc': ['10.96.0.12'] }), 'vl.logging.svc')).address).toBe('10.96.0.12');
    expect((await dial(d, stub({ 'vl.logging.svc': ['169.254.169.254'] }), 'vl.logging.svc')).err?.message).toMatch(/a link-local address/);
    expect((await dial(d, stub({ 'vl.logging.svc': ['127.0.0.1'] }), 'vl.logging.svc')).err?.message).toMatch(/a loopback address/);
    // A public name does not get that: private is private unless allowed.
    expect(dialProblem(dest('http://logs.example.com/', ['cluster']), '10.0.0.1')).toMatch(/a private address/);
  });
  it("passes the resolver's own error on", async () => {
    const r = await dial(dest('http://nowhere.example.com/'), stub({}), 'nowhere.example.com');
    expect(r.err?.code).toBe('ENOTFOUND');
  });
  it('ipAddressClass classes a resolved address as addressClass does a literal', () => {
    expect(ipAddressClass('::ffff:a9fe:a9fe')).toBe('link-local');
    expect(ipAddressClass('[::7f00:1]')).toBe('loopback');
    expect(ipAddressClass('logs.example.com')).toBeUndefined();
  });
});

const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
});

/** A real TCP server on 127.0.0.1 that counts the connections it accepts and answers HTTP 200. */
async function loopbackServer(): Promise<{ port: number; connections: () => number }> {
  let n = 0;
  const server = createServer((sock) => {
    n++;
    sock.on('data', (b: Buffer) => {
      if (b.includes('\r\n\r\n')) sock.end('HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}');
    });
    sock.on('error', () => {});
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { port: (server.address() as AddressInfo).port, connections: () => n };
}

/** The engine's sink for a destination, as the harvester builds it (shipConfig), with the name resolved by `resolver`. */
async function harvesterSink(d: Destination, resolver: Resolver) {
  const req = {
    pod: { metadata: { name: 'p', namespace: 'team-a', uid: 'u' }, spec: { containers: [] } },
    sidecar: 'jobharvest',
    message: undefined,
    destination: d,
    kube: { apiUrl: new URL('https://127.0.0.1:1'), credentials: async () => ({ token: 't' }) },
    limits: { ...DEFAULT_LIMITS, requestTimeoutMs: 2000 },
    deadlineMs: 1000,
    resolver,
  };
  const config: EngineOptions = await shipConfig(req);
  return loadSink(config);
}

describe('a name that resolves to 127.0.0.1, dialled by the sinks against a real loopback server', () => {
  for (const [sinkType, scheme] of [
    ['http', 'http'],
    ['syslog', 'tcp'],
  ] as const) {
    it(`${sinkType}: refused when loopback is not allowed (no connection made), sent when it is`, async () => {
      const srv = await loopbackServer();
      const endpoint = `${scheme}://logs.example.test:${srv.port}/`;
      const resolver = stub({ 'logs.example.test': ['127.0.0.1'] });

      const refused = await harvesterSink({ ...dest(endpoint), sink: sinkType }, resolver);
      const r1 = await refused.sink.send([makeRecord('hello')], new AbortController().signal);
      expect(r1.kind).toBe('retry');
      expect((r1 as { reason: string }).reason).toMatch(/logs\.example\.test resolved to 127\.0\.0\.1, a loopback address; list 'loopback' in its allow/);
      await refused.sink.close?.();
      refused.http?.close();
      expect(resolver.asked).toContain('logs.example.test');
      expect(srv.connections()).toBe(0);

      const allowed = await harvesterSink({ ...dest(endpoint, ['loopback']), sink: sinkType }, resolver);
      await allowed.sink.send([makeRecord('hello')], new AbortController().signal);
      await allowed.sink.close?.();
      allowed.http?.close();
      expect(srv.connections()).toBe(1);
    });
  }
});

describe('the sidecar is unchanged: it sends wherever its tenant says', () => {
  it('its configuration carries no lookup, and its sink dials a name that resolves to 127.0.0.1', async () => {
    const srv = await loopbackServer();
    const cfg = testConfig({ JOBHARVEST_SINK: 'http', JOBHARVEST_ENDPOINT: `http://localhost:${srv.port}/` });
    expect(cfg.lookup).toBeUndefined();
    const { sink, http } = await loadSink(cfg);
    await sink.send([makeRecord('hello')], new AbortController().signal);
    await sink.close?.();
    http?.close();
    expect(srv.connections()).toBe(1);
  });
});
