// The sinks' HTTP client reads an answer only up to its cap and drops the
// connection there: a destination answering 503 with 30 MiB costs 64 KiB (the
// harvester, with several harvests against such a server, above all).
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Config } from '../config.ts';
import { HttpClient, MAX_ERROR_RESPONSE_BYTES } from '../sinks/http/client.ts';

const BIG = 30;
let server: Server;
let base: string;
const seen: Array<{ ua: string | undefined; sentMiB: number; finished: boolean }> = [];

beforeAll(async () => {
  const chunk = Buffer.alloc(1024 * 1024, 'x');
  server = createServer((req, res) => {
    req.resume();
    const rec = { ua: req.headers['user-agent'], sentMiB: 0, finished: false };
    seen.push(rec);
    if (req.url === '/ok') return void res.writeHead(200).end('{"ok":true}');
    res.writeHead(503, { 'retry-after': '7', 'content-length': String(BIG * chunk.length) });
    const pump = () => {
      while (rec.sentMiB < BIG) {
        rec.sentMiB++;
        if (!res.write(chunk)) return void res.once('drain', pump);
      }
      res.end(() => (rec.finished = true));
    };
    pump();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
});

const config = { maxInFlight: 1, tls: {}, headers: { 'user-agent': 'jobharvest-harvester (test)' }, auth: { scheme: 'Bearer' }, compression: 'gzip', gzipLevel: 1, requestTimeoutMs: 10_000, maxResponseBytes: 4 * 1024 * 1024 } as unknown as Config;

it('keeps 64 KiB of a 30 MiB error answer, with its status and headers, and stops reading there', async () => {
  const client = new HttpClient(config);
  try {
    const res = await client.post(new URL(`${base}/push`), 'line\n', { contentType: 'application/x-ndjson' });
    expect(res.status).toBe(503);
    expect(res.headers['retry-after']).toBe('7');
    expect(res.body.length).toBe(MAX_ERROR_RESPONSE_BYTES);
    const rec = seen.at(-1)!;
    expect(rec.ua).toBe('jobharvest-harvester (test)');
    // The server could not finish writing: the connection was dropped at the cap.
    await new Promise((r) => setTimeout(r, 200));
    expect(rec.finished).toBe(false);
    // The next request works, on a new connection.
    const ok = await client.post(new URL(`${base}/ok`), 'line\n', { contentType: 'application/x-ndjson' });
    expect([ok.status, ok.body.toString()]).toEqual([200, '{"ok":true}']);
  } finally {
    client.close();
  }
});
