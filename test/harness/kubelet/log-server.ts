/**
 * The kubelet's container-log endpoint, which the API server's pods/log
 * proxies to: GET /containerLogs/{namespace}/{pod}/{container} with follow,
 * previous, timestamps, sinceSeconds, sinceTime, tailLines and limitBytes, over
 * HTTPS with client certificates signed by the cluster CA.
 *
 * Like the real kubelet it serves the live file of one container run (rotated
 * files are not part of `kubectl logs`), reassembles P fragments (a timestamp
 * only starts a whole line), and in follow mode reopens the path after a
 * rotation and ends once that run has exited and its file is read to the end.
 */
import { closeSync, fstatSync, openSync, readSync, statSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface LogTarget {
  /** The live log file of the container run. */
  path: string;
  /** True once that run has exited (its file is complete). */
  finished(): boolean;
}

export type ResolveLog = (namespace: string, pod: string, container: string, previous: boolean, query: URLSearchParams) => LogTarget | { status: number; message: string };

export interface LogServerOptions {
  key: string;
  cert: string;
  /** CA of the clients (the API server's kubelet client certificate). */
  clientCa: string;
  resolve: ResolveLog;
  port?: number;
}

/** RFC3339Nano → nanoseconds since the epoch. */
export function parseTimestampNs(ts: string): bigint | undefined {
  const m = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$/.exec(ts);
  if (!m) return undefined;
  const secs = Date.parse(`${m[1]}${m[3]}`);
  if (Number.isNaN(secs)) return undefined;
  return BigInt(secs) * 1_000_000n + BigInt((m[2] ?? '').padEnd(9, '0'));
}

interface Options {
  follow: boolean;
  timestamps: boolean;
  sinceNs: bigint | undefined;
  tailLines: number | undefined;
  limitBytes: number | undefined;
}

function parseQuery(url: URL): Options {
  const bool = (k: string) => url.searchParams.get(k) === 'true' || url.searchParams.get(k) === '1';
  const int = (k: string) => {
    const v = url.searchParams.get(k);
    return v !== null && /^\d+$/.test(v) ? Number(v) : undefined;
  };
  let sinceNs: bigint | undefined;
  const sinceTime = url.searchParams.get('sinceTime');
  const sinceSeconds = int('sinceSeconds');
  if (sinceTime) sinceNs = parseTimestampNs(sinceTime);
  else if (sinceSeconds !== undefined) sinceNs = BigInt(Date.now() - sinceSeconds * 1000) * 1_000_000n;
  return { follow: bool('follow'), timestamps: bool('timestamps'), sinceNs, tailLines: int('tailLines'), limitBytes: int('limitBytes') };
}

/** Byte offset where the last `n` whole lines of a CRI file start. */
function tailOffset(path: string, n: number): number {
  const fd = openSync(path, 'r');
  try {
    const size = fstatSync(fd).size;
    const buf = Buffer.alloc(size);
    readSync(fd, buf, 0, size, 0);
    // Ends of whole lines: the newline after an F fragment.
    const ends: number[] = [];
    let start = 0;
    while (start < size) {
      const nl = buf.indexOf(0x0a, start);
      if (nl === -1) break;
      const tag = buf.subarray(start, nl).toString('latin1').split(' ', 3)[2];
      if (tag === 'F') ends.push(nl + 1);
      start = nl + 1;
    }
    if (n === 0) return ends.at(-1) ?? 0;
    return ends.length > n ? ends[ends.length - n - 1]! : 0;
  } finally {
    closeSync(fd);
  }
}

async function serve(req: IncomingMessage, res: ServerResponse, target: LogTarget, o: Options): Promise<void> {
  let fd = openSync(target.path, 'r');
  let ino = fstatSync(fd).ino;
  let pos = o.tailLines !== undefined ? tailOffset(target.path, o.tailLines) : 0;
  let carry = Buffer.alloc(0);
  let lineStart = true;
  let skipping = false;
  let sent = 0;
  let closed = false;
  res.on('close', () => (closed = true));
  res.writeHead(200, { 'Content-Type': 'text/plain', 'Cache-Control': 'no-cache' });
  const chunk = Buffer.alloc(256 * 1024);

  const emit = async (b: Buffer): Promise<boolean> => {
    if (o.limitBytes !== undefined) {
      if (sent >= o.limitBytes) return false;
      if (sent + b.length > o.limitBytes) b = b.subarray(0, o.limitBytes - sent);
    }
    sent += b.length;
    if (!res.write(b)) await new Promise<void>((r) => (res.once('drain', r), res.once('close', r)));
    return o.limitBytes === undefined || sent < o.limitBytes;
  };

  const consume = async (data: Buffer): Promise<boolean> => {
    const buf = carry.length > 0 ? Buffer.concat([carry, data]) : data;
    let start = 0;
    const out: Buffer[] = [];
    for (;;) {
      const nl = buf.indexOf(0x0a, start);
      if (nl === -1) break;
      const line = buf.subarray(start, nl);
      start = nl + 1;
      const s1 = line.indexOf(0x20);
      const s2 = line.indexOf(0x20, s1 + 1);
      const s3 = line.indexOf(0x20, s2 + 1);
      if (s1 < 0 || s2 < 0 || s3 < 0) continue;
      const ts = line.subarray(0, s1).toString('latin1');
      const full = line.subarray(s2 + 1, s3).toString('latin1') === 'F';
      if (lineStart) {
        const ns = parseTimestampNs(ts);
        skipping = o.sinceNs !== undefined && ns !== undefined && ns < o.sinceNs;
        if (!skipping && o.timestamps) out.push(Buffer.from(`${ts} `));
      }
      if (!skipping) {
        out.push(line.subarray(s3 + 1));
        if (full) out.push(Buffer.from('\n'));
      }
      lineStart = full;
    }
    carry = Buffer.from(buf.subarray(start));
    return out.length === 0 ? true : emit(Buffer.concat(out));
  };

  try {
    for (;;) {
      if (closed) return;
      const n = readSync(fd, chunk, 0, chunk.length, pos);
      if (n > 0) {
        pos += n;
        if (!(await consume(chunk.subarray(0, n)))) return;
        continue;
      }
      if (!o.follow) return;
      let current: number | undefined;
      try {
        current = statSync(target.path).ino;
      } catch {
        current = undefined; // between rename and reopen
      }
      if (current !== undefined && current !== ino) {
        // Rotated: the old file is read to its end; go on with the new one.
        closeSync(fd);
        fd = openSync(target.path, 'r');
        ino = fstatSync(fd).ino;
        pos = 0;
        carry = Buffer.alloc(0);
        continue;
      }
      if (target.finished()) {
        // One more read: the last lines may have landed after the read above.
        const last = readSync(fd, chunk, 0, chunk.length, pos);
        if (last === 0) return;
        pos += last;
        if (!(await consume(chunk.subarray(0, last)))) return;
        continue;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  } finally {
    closeSync(fd);
    res.end();
  }
}

export async function startLogServer(opts: LogServerOptions): Promise<{ server: Server; port: number; close(): Promise<void> }> {
  const server = createServer({ key: opts.key, cert: opts.cert, ca: opts.clientCa, requestCert: true, rejectUnauthorized: true }, (req, res) => {
    const url = new URL(req.url ?? '/', 'https://kubelet');
    if (req.method === 'GET' && url.pathname === '/healthz') {
      res.end('ok');
      return;
    }
    const m = /^\/containerLogs\/([^/]+)\/([^/]+)\/([^/]+)\/?$/.exec(url.pathname);
    if (req.method !== 'GET' || !m) {
      res.writeHead(404).end('not found');
      return;
    }
    const [ns, pod, container] = m.slice(1).map(decodeURIComponent) as [string, string, string];
    const o = parseQuery(url);
    const target = opts.resolve(ns, pod, container, url.searchParams.get('previous') === 'true', url.searchParams);
    if ('status' in target) {
      res.writeHead(target.status, { 'Content-Type': 'text/plain' }).end(target.message);
      return;
    }
    serve(req, res, target, o).catch((err: unknown) => {
      if (!res.headersSent) res.writeHead(500);
      res.end(String(err));
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, '127.0.0.1', () => resolve());
  });
  const sockets = new Set<import('node:net').Socket>();
  server.on('secureConnection', (s) => (sockets.add(s), s.once('close', () => sockets.delete(s))));
  return {
    server,
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
