import { createServer, type Server } from 'node:http';
import { closeServer, CountWaiters, decodeBody, listenLocal, localPort } from '../../test/harness/receiver.ts';

/**
 * Log records in an ExportLogsServiceRequest, counted exactly by walking the
 * protobuf: resource_logs (1) → scope_logs (2) → log_records (2). A generic
 * decoder would build every record and its attributes only to count them;
 * this reads the tags and lengths (without allocating: it runs for every
 * record of the benchmark on the receivers' core), and throws on anything
 * malformed.
 */
export function countLogRecords(b: Uint8Array): number {
  return new Walker(b).count();
}

/** What the shaping rows look at besides the count: how much structure the records carry. */
export interface RecordShapes {
  records: number;
  /** Record attributes (log_record field 6), summed over the records. */
  attributes: number;
  /** Records whose body is a map (AnyValue kvlist_value, field 6). */
  mapBodies: number;
}

/** Counts records as countLogRecords does, and also their attributes and map bodies (one level deeper, so a little slower). */
export function shapeLogRecords(b: Uint8Array): RecordShapes {
  return new Walker(b).shapes();
}

const ANY = 0;

class Walker {
  private pos = 0;
  constructor(private readonly b: Uint8Array) {}

  count(): number {
    let n = 0;
    this.fields(0, this.b.length, 1, (s, e) =>
      this.fields(s, e, 2, (s2, e2) =>
        this.fields(s2, e2, 2, () => {
          n++;
        }),
      ),
    );
    return n;
  }

  shapes(): RecordShapes {
    const out: RecordShapes = { records: 0, attributes: 0, mapBodies: 0 };
    this.fields(0, this.b.length, 1, (s, e) =>
      this.fields(s, e, 2, (s2, e2) =>
        this.fields(s2, e2, 2, (s3, e3) => {
          out.records++;
          this.fields(s3, e3, ANY, (s4, e4, field) => {
            if (field === 6) out.attributes++;
            else if (field === 5) this.fields(s4, e4, 6, () => out.mapBodies++);
          });
        }),
      ),
    );
    return out;
  }

  private varint(): number {
    const b = this.b;
    let v = 0;
    let mul = 1;
    for (let i = this.pos; i < b.length && i < this.pos + 10; i++) {
      const x = b[i]!;
      v += (x & 0x7f) * mul;
      mul *= 128;
      if (x < 0x80) {
        this.pos = i + 1;
        return v;
      }
    }
    throw new Error(`bad varint at ${this.pos}`);
  }

  /** Calls `on` for each length-delimited field numbered `want` (or any, ANY) of the message at [s, e); skips the others. */
  private fields(s: number, e: number, want: number, on: (s: number, e: number, field: number) => void): void {
    this.pos = s;
    while (this.pos < e) {
      const key = this.varint();
      const wire = key & 7;
      if (wire === 0) this.varint();
      else if (wire === 1) this.pos += 8;
      else if (wire === 5) this.pos += 4;
      else if (wire === 2) {
        const len = this.varint();
        const at = this.pos;
        if (at + len > e) throw new Error(`field ${key >>> 3} runs past its message`);
        if (want === ANY || key >>> 3 === want) on(at, at + len, key >>> 3);
        this.pos = at + len;
      } else throw new Error(`unsupported wire type ${wire}`);
    }
    if (this.pos !== e) throw new Error('message ends inside a field');
  }
}

export interface OtlpStats {
  records: number;
  /** Only counted by a receiver started with `shapes`. */
  attributes: number;
  mapBodies: number;
  requests: number;
  wireBytes: number;
  /** The request bodies' bytes with their codec undone: what the sender compressed. */
  bodyBytes: number;
  firstRequestAt: number | undefined;
  lastRequestAt: number | undefined;
}

/** An OTLP/HTTP logs endpoint that counts records exactly and answers with an empty ExportLogsServiceResponse. */
export class CountingOtlpReceiver {
  readonly stats: OtlpStats = { records: 0, attributes: 0, mapBodies: 0, requests: 0, wireBytes: 0, bodyBytes: 0, firstRequestAt: undefined, lastRequestAt: undefined };
  /** Decoded bodies kept for a benchmark's codec floor, up to `captureBytes` (start option). */
  readonly captured: Buffer[] = [];
  private capturedBytes = 0;
  private failure: Error | undefined;
  private readonly waiters = new CountWaiters(() => this.stats.records, 'records', () => this.failure);

  private constructor(private readonly server: Server) {}

  /**
   * `shapes`: also count attributes and map bodies (shapeLogRecords), for the
   * record-shaping rows; `answerDelayMs`: answer each request this much later,
   * as a slower or busier server would.
   */
  static async start(opts: { shapes?: boolean; answerDelayMs?: number; captureBytes?: number } = {}): Promise<CountingOtlpReceiver> {
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
          if (!/protobuf/.test(String(req.headers['content-type'] ?? ''))) throw new Error(`content-type ${req.headers['content-type']}`);
          const body = decodeBody(wire, req.headers['content-encoding']);
          r.stats.bodyBytes += body.length;
          if (r.capturedBytes < (opts.captureBytes ?? 0)) {
            r.captured.push(body);
            r.capturedBytes += body.length;
          }
          if (opts.shapes) {
            const sh = shapeLogRecords(body);
            r.stats.attributes += sh.attributes;
            r.stats.mapBodies += sh.mapBodies;
            r.add(sh.records, wire.length);
          } else r.add(countLogRecords(body), wire.length);
          const answer = () => {
            res.writeHead(200, { 'content-type': 'application/x-protobuf', 'content-length': '0' });
            res.end();
          };
          if (opts.answerDelayMs) setTimeout(answer, opts.answerDelayMs);
          else answer();
        } catch (err) {
          r.failure ??= err as Error;
          res.writeHead(400);
          res.end(String(err));
        }
      });
    });
    await listenLocal(server);
    return r;
  }

  private add(records: number, wireBytes: number): void {
    this.stats.records += records;
    this.stats.wireBytes += wireBytes;
    this.stats.lastRequestAt = Date.now();
    this.waiters.update();
  }

  get url(): string {
    return `http://127.0.0.1:${localPort(this.server)}`;
  }

  /** Resolves once `records` were counted; rejects on a malformed request or the timeout. */
  waitForRecords(records: number, timeoutMs: number): Promise<void> {
    return this.waiters.wait(records, timeoutMs);
  }

  close(): Promise<void> {
    return closeServer(this.server);
  }
}
