import { createServer, type Server } from 'node:http';
import { gunzipSync } from 'node:zlib';

/**
 * Log records in an ExportLogsServiceRequest, counted exactly by walking the
 * protobuf: resource_logs (1) → scope_logs (2) → log_records (2). A generic
 * decoder would build every record and its attributes only to count them;
 * this reads the tags and lengths, and throws on anything malformed.
 */
export function countLogRecords(b: Uint8Array): number {
  let count = 0;
  walk(b, 0, b.length, (field, s, e) => {
    if (field !== 1) return;
    walk(b, s, e, (f2, s2, e2) => {
      if (f2 !== 2) return;
      walk(b, s2, e2, (f3) => {
        if (f3 === 2) count++;
      });
    });
  });
  return count;
}

function varint(b: Uint8Array, at: number): [number, number] {
  let v = 0;
  let mul = 1;
  for (let i = at; i < b.length && i < at + 10; i++) {
    const x = b[i]!;
    v += (x & 0x7f) * mul;
    mul *= 128;
    if (x < 0x80) return [v, i + 1];
  }
  throw new Error(`bad varint at ${at}`);
}

/** Calls `onLen` for each length-delimited field of the message at [s, e); skips the others. */
function walk(b: Uint8Array, s: number, e: number, onLen: (field: number, s: number, e: number) => void): void {
  let i = s;
  while (i < e) {
    const [key, next] = varint(b, i);
    i = next;
    const wire = key & 7;
    const field = Math.floor(key / 8);
    if (wire === 0) i = varint(b, i)[1];
    else if (wire === 1) i += 8;
    else if (wire === 5) i += 4;
    else if (wire === 2) {
      const [len, at] = varint(b, i);
      if (at + len > e) throw new Error(`field ${field} runs past its message`);
      onLen(field, at, at + len);
      i = at + len;
    } else throw new Error(`unsupported wire type ${wire}`);
  }
  if (i !== e) throw new Error('message ends inside a field');
}

export interface OtlpStats {
  records: number;
  requests: number;
  wireBytes: number;
  firstRequestAt: number | undefined;
  lastRequestAt: number | undefined;
}

/** An OTLP/HTTP logs endpoint that counts records exactly and answers with an empty ExportLogsServiceResponse. */
export class CountingOtlpReceiver {
  readonly stats: OtlpStats = { records: 0, requests: 0, wireBytes: 0, firstRequestAt: undefined, lastRequestAt: undefined };
  private waiters: { records: number; resolve: () => void }[] = [];
  private failure: Error | undefined;

  private constructor(private readonly server: Server) {}

  static async start(): Promise<CountingOtlpReceiver> {
    const server = createServer({ keepAliveTimeout: 60_000 });
    const r = new CountingOtlpReceiver(server);
    server.on('request', (req, res) => {
      r.stats.requests++;
      r.stats.firstRequestAt ??= Date.now();
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.once('end', () => {
        try {
          const wire = Buffer.concat(chunks);
          const gz = /gzip/i.test(String(req.headers['content-encoding'] ?? ''));
          if (!/protobuf/.test(String(req.headers['content-type'] ?? ''))) throw new Error(`content-type ${req.headers['content-type']}`);
          r.add(countLogRecords(gz ? gunzipSync(wire) : wire), wire.length);
          res.writeHead(200, { 'content-type': 'application/x-protobuf', 'content-length': '0' });
          res.end();
        } catch (err) {
          r.failure ??= err as Error;
          res.writeHead(400);
          res.end(String(err));
        }
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return r;
  }

  private add(records: number, wireBytes: number): void {
    this.stats.records += records;
    this.stats.wireBytes += wireBytes;
    this.stats.lastRequestAt = Date.now();
    this.waiters = this.waiters.filter((w) => {
      if (this.stats.records < w.records) return true;
      w.resolve();
      return false;
    });
  }

  get url(): string {
    const a = this.server.address();
    if (!a || typeof a === 'string') throw new Error('not listening');
    return `http://127.0.0.1:${a.port}`;
  }

  /** Resolves once `records` were counted; rejects on a malformed request or the timeout. */
  waitForRecords(records: number, timeoutMs: number): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    if (this.stats.records >= records) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(this.failure ?? new Error(`received ${this.stats.records} of ${records} records after ${timeoutMs} ms`)), timeoutMs);
      this.waiters.push({ records, resolve: () => (clearTimeout(timer), resolve()) });
    });
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}
