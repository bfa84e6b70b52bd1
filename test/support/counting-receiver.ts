import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer as createTcpServer, type Server as TcpServer, type Socket } from 'node:net';
import type { Readable, Transform } from 'node:stream';
import zlib, { createGunzip } from 'node:zlib';
import { closeServer, CountWaiters, listenLocal, localPort } from '../harness/receiver.ts';

/** Counts newline-terminated records in a byte stream; nothing is kept. */
export class LineCounter {
  lines = 0;
  bytes = 0;
  private lastByte = 0x0a;

  push(chunk: Buffer): void {
    if (chunk.length === 0) return;
    this.bytes += chunk.length;
    let i = chunk.indexOf(0x0a);
    while (i !== -1) {
      this.lines++;
      i = chunk.indexOf(0x0a, i + 1);
    }
    this.lastByte = chunk[chunk.length - 1] ?? 0x0a;
  }

  /** A body whose last record has no newline still holds that record. */
  end(): void {
    if (this.lastByte !== 0x0a) this.lines++;
    this.lastByte = 0x0a;
  }
}

export interface ReceiverStats {
  lines: number;
  /** Decoded payload bytes. */
  bytes: number;
  /** Bytes as they arrived on the wire. */
  wireBytes: number;
  requests: number;
  firstRequestAt: number | undefined;
  lastRequestAt: number | undefined;
}

abstract class Counting {
  readonly stats: ReceiverStats = { lines: 0, bytes: 0, wireBytes: 0, requests: 0, firstRequestAt: undefined, lastRequestAt: undefined };
  private readonly waiters = new CountWaiters(() => this.stats.lines, 'lines');

  protected add(c: LineCounter, wireBytes: number): void {
    this.stats.lines += c.lines;
    this.stats.bytes += c.bytes;
    this.stats.wireBytes += wireBytes;
    this.stats.lastRequestAt = Date.now();
    this.waiters.update();
  }

  protected seen(): void {
    this.stats.requests++;
    this.stats.firstRequestAt ??= Date.now();
  }

  /** Resolves once `lines` records have been counted. */
  waitForLines(lines: number, timeoutMs: number): Promise<void> {
    return this.waiters.wait(lines, timeoutMs);
  }
}

/** Node's zstd stream (experimental in Node 24, so looked up rather than imported by name). */
function zstdDecompressor(): Transform {
  const make = (zlib as unknown as { createZstdDecompress?: () => Transform }).createZstdDecompress;
  if (!make) throw new Error('this Node.js has no zlib.createZstdDecompress');
  return make();
}

/**
 * An HTTP endpoint that accepts any POST, counts the NDJSON records in it
 * (gzip or zstd undone on the fly) and answers 200: the cheapest possible sink, so a
 * benchmark measures the sender, not the receiver.
 */
export class CountingHttpReceiver extends Counting {
  private constructor(private readonly server: HttpServer) {
    super();
  }

  /** Decoded bodies kept for a benchmark's codec floor, up to `captureBytes` (start option). */
  readonly captured: Buffer[] = [];
  private capturedBytes = 0;

  static async start(port = 0, opts: { captureBytes?: number } = {}): Promise<CountingHttpReceiver> {
    const server = createHttpServer({ keepAliveTimeout: 60_000 });
    const r = new CountingHttpReceiver(server);
    const cap = opts.captureBytes ?? 0;
    server.on('request', (req, res) => {
      r.seen();
      const counter = new LineCounter();
      let wire = 0;
      req.on('data', (c: Buffer) => (wire += c.length));
      const encoding = String(req.headers['content-encoding'] ?? '');
      const src: Readable = /gzip/i.test(encoding) ? req.pipe(createGunzip()) : /zstd/i.test(encoding) ? req.pipe(zstdDecompressor()) : req;
      const body: Buffer[] = [];
      const keep = r.capturedBytes < cap;
      src.on('data', (c: Buffer) => {
        counter.push(c);
        if (keep) body.push(c);
      });
      src.once('end', () => {
        counter.end();
        if (keep) {
          const b = Buffer.concat(body);
          r.captured.push(b);
          r.capturedBytes += b.length;
        }
        r.add(counter, wire);
        res.statusCode = 200;
        res.end();
      });
      src.once('error', (err) => {
        res.statusCode = 400;
        res.end(String(err));
      });
    });
    await listenLocal(server, port);
    return r;
  }

  get url(): string {
    return `http://127.0.0.1:${localPort(this.server)}`;
  }

  close(): Promise<void> {
    return closeServer(this.server);
  }
}

/** A plain TCP endpoint counting newline-framed messages (syslog over TCP, non-transparent framing). */
export class CountingTcpReceiver extends Counting {
  private readonly sockets = new Set<Socket>();

  private constructor(private readonly server: TcpServer) {
    super();
  }

  static async start(port = 0): Promise<CountingTcpReceiver> {
    const server = createTcpServer();
    const r = new CountingTcpReceiver(server);
    server.on('connection', (s) => {
      r.sockets.add(s);
      r.seen();
      s.on('data', (c: Buffer) => {
        const counter = new LineCounter();
        counter.push(c);
        // A message split across reads is counted once, at its newline.
        r.add(counter, c.length);
      });
      s.once('close', () => r.sockets.delete(s));
    });
    await listenLocal(server, port);
    return r;
  }

  get port(): number {
    return localPort(this.server);
  }

  close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}
