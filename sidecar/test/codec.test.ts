// The request codecs: Node's zstd bindings (experimental in Node 24, so a
// change of their API must fail here, loudly, before it fails a pod), each
// sink's codecs, the env, and the fallback to gzip when a server refuses zstd.
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import zlib from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { codecFor, configuredCodec, sinkCodecs } from '../../src/contract/codec.ts';
import { SINKS } from '../../src/contract/env.ts';
import type { Config } from '../config.ts';
import { compressBody, zstdAvailable, ZSTD_LEVEL } from '../encode/compress.ts';
import { HttpClient } from '../sinks/http/client.ts';
import { testConfig } from '../../test/support/sidecar-helpers.ts';

const TEXT = Buffer.from(Array.from({ length: 2000 }, (_, i) => `{"ts":"2026-12-04T10:00:${String(i % 60).padStart(2, '0')}Z","msg":"line ${i} of the batch"}\n`).join(''));

describe("Node's zstd bindings", () => {
  it('are there, with the compression-level parameter, and round-trip', () => {
    const z = zlib as unknown as Record<string, unknown>;
    expect(typeof z.zstdCompressSync).toBe('function');
    expect(typeof z.zstdDecompressSync).toBe('function');
    expect(typeof zlib.constants.ZSTD_c_compressionLevel).toBe('number');
    expect(zstdAvailable()).toBe(true);
    const { body, encoding } = compressBody('zstd', TEXT, 1);
    expect(encoding).toBe('zstd');
    // The zstd frame's magic number, so a server's decoder recognises it.
    expect(body.subarray(0, 4)).toEqual(Buffer.from([0x28, 0xb5, 0x2f, 0xfd]));
    expect((z.zstdDecompressSync as (b: Buffer) => Buffer)(body)).toEqual(TEXT);
    expect(body.length).toBeLessThan(compressBody('gzip', TEXT, 1).body.length);
    expect(ZSTD_LEVEL).toBe(1);
  });

  it('gzip and none encode as they say', () => {
    const g = compressBody('gzip', TEXT, 1);
    expect(g.encoding).toBe('gzip');
    expect(zlib.gunzipSync(g.body)).toEqual(TEXT);
    const n = compressBody('none', TEXT, 1);
    expect(n.encoding).toBeUndefined();
    expect(n.body).toBe(TEXT);
  });
});

describe('which codec each sink takes', () => {
  it('zstd on otlp and http; gzip in its place on loki, elasticsearch and forward, with the reason; never a codec on syslog and stdout', () => {
    expect(codecFor('otlp', 'zstd')).toEqual({ codec: 'zstd' });
    expect(codecFor('http', 'zstd')).toEqual({ codec: 'zstd' });
    for (const sink of ['loki', 'elasticsearch', 'forward'] as const) {
      const r = codecFor(sink, 'zstd');
      expect(r.codec).toBe('gzip');
      expect(r.note).toContain(`the ${sink} sink takes gzip, not zstd`);
    }
    expect(codecFor('syslog', 'gzip')).toEqual({ codec: 'none' });
    expect(codecFor('stdout', 'zstd')).toEqual({ codec: 'none' });
    for (const sink of SINKS) expect(sinkCodecs(sink)).toContain(codecFor(sink, 'none').codec);
  });

  it('reads JOBHARVEST_COMPRESSION first, then the older JOBHARVEST_GZIP switch', () => {
    expect(configuredCodec(undefined, true)).toBe('gzip');
    expect(configuredCodec(undefined, false)).toBe('none');
    expect(configuredCodec('zstd', false)).toBe('zstd');
    expect(configuredCodec('gzip', false)).toBe('none');
    expect(configuredCodec('brotli', true)).toBeUndefined();
  });

  it("is in the sidecar's configuration, resolved for its sink", () => {
    const otlp = { JOBHARVEST_SINK: 'otlp', JOBHARVEST_ENDPOINT: 'http://collector:4318' };
    expect(testConfig(otlp).compression).toBe('gzip');
    expect(testConfig({ ...otlp, JOBHARVEST_COMPRESSION: 'zstd' }).compression).toBe('zstd');
    expect(testConfig({ ...otlp, JOBHARVEST_COMPRESSION: 'none' }).compression).toBe('none');
    expect(testConfig({ ...otlp, JOBHARVEST_GZIP: 'false' }).compression).toBe('none');
    const loki = testConfig({ JOBHARVEST_SINK: 'loki', JOBHARVEST_ENDPOINT: 'http://loki:3100', JOBHARVEST_COMPRESSION: 'zstd' });
    expect(loki.compression).toBe('gzip');
    expect(loki.compressionNote).toMatch(/loki sink takes gzip, not zstd; using gzip/);
    expect(() => testConfig({ ...otlp, JOBHARVEST_COMPRESSION: 'lz4' })).toThrow(/JOBHARVEST_COMPRESSION must be one of gzip, zstd, none, got 'lz4'/);
  });
});

describe('a server that refuses zstd', () => {
  let server: Server;
  let base: string;
  /** What the server got: its Content-Encoding and the decoded body. */
  const got: Array<{ path: string; encoding: string | undefined; body: Buffer }> = [];
  const read = (req: IncomingMessage): Promise<Buffer> =>
    new Promise((resolve) => {
      const parts: Buffer[] = [];
      req.on('data', (c: Buffer) => parts.push(c));
      req.on('end', () => resolve(Buffer.concat(parts)));
    });

  beforeAll(async () => {
    // /gzip-only: 415 for zstd (the OTLP answer); /400: the Collector's answer
    // to an encoding it lacks; /bad: 400 whatever the encoding (a bad batch);
    // /any: takes both.
    server = createServer((req, res) => {
      void read(req).then((raw) => {
        const encoding = req.headers['content-encoding'];
        const path = req.url ?? '';
        if (encoding === 'zstd' && (path === '/gzip-only' || path === '/400')) return void res.writeHead(path === '/400' ? 400 : 415).end('unsupported Content-Encoding: zstd');
        if (path === '/bad') return void res.writeHead(400).end('bad batch');
        const body = encoding === 'gzip' ? zlib.gunzipSync(raw) : encoding === 'zstd' ? (zlib as unknown as { zstdDecompressSync(b: Buffer): Buffer }).zstdDecompressSync(raw) : raw;
        got.push({ path, encoding, body });
        res.writeHead(200).end('{}');
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  });

  const config = { maxInFlight: 1, tls: {}, headers: {}, auth: { scheme: 'Bearer' }, compression: 'zstd', gzipLevel: 1, requestTimeoutMs: 10_000 } as unknown as Config;

  for (const [path, status] of [['/gzip-only', 415], ['/400', 400]] as const) {
    it(`answering ${status} gets the same body as gzip, once told, and gzip from then on`, async () => {
      const fallbacks: string[] = [];
      const client = new HttpClient(config, { codecFallback: (why) => fallbacks.push(why) });
      let released = 0;
      try {
        got.length = 0;
        const first = await client.post(new URL(`${base}${path}`), TEXT, { contentType: 'application/x-ndjson', release: () => released++ });
        expect(first.status).toBe(200);
        // Kept until the server's answer: the retry needed it.
        expect(got).toEqual([{ path, encoding: 'gzip', body: TEXT }]);
        expect(fallbacks).toHaveLength(1);
        expect(fallbacks[0]).toContain(`refused a zstd body (HTTP ${status})`);
        const second = await client.post(new URL(`${base}${path}`), 'one more\n', { contentType: 'application/x-ndjson' });
        expect(second.status).toBe(200);
        expect(got.map((g) => g.encoding)).toEqual(['gzip', 'gzip']);
        expect(fallbacks).toHaveLength(1);
        expect(released).toBe(1);
      } finally {
        client.close();
      }
    });
  }

  it('a batch refused whatever its codec keeps its answer, and the client keeps zstd', async () => {
    const fallbacks: string[] = [];
    const client = new HttpClient(config, { codecFallback: (why) => fallbacks.push(why) });
    try {
      got.length = 0;
      const res = await client.post(new URL(`${base}/bad`), TEXT, { contentType: 'application/x-ndjson' });
      expect([res.status, res.body.toString()]).toEqual([400, 'bad batch']);
      expect(fallbacks).toEqual([]);
      const ok = await client.post(new URL(`${base}/any`), TEXT, { contentType: 'application/x-ndjson' });
      expect(ok.status).toBe(200);
      expect(got).toEqual([{ path: '/any', encoding: 'zstd', body: TEXT }]);
    } finally {
      client.close();
    }
  });

  it('a server that takes zstd gets zstd, and the body is released as soon as it is sent after that', async () => {
    const client = new HttpClient(config);
    let released = 0;
    try {
      got.length = 0;
      for (let i = 0; i < 3; i++) expect((await client.post(new URL(`${base}/any`), TEXT, { contentType: 'application/x-ndjson', release: () => released++ })).status).toBe(200);
      expect(got.map((g) => [g.encoding, g.body.equals(TEXT)])).toEqual([['zstd', true], ['zstd', true], ['zstd', true]]);
      // Not the first (kept for a possible retry), then right after compressing.
      expect(released).toBe(2);
    } finally {
      client.close();
    }
  });
});
