import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { gunzipSync } from 'node:zlib';

/**
 * What the proxy does with the next requests.
 * - `pass`: forward upstream (or answer `okStatus` when standalone);
 * - `down`: refuse connections (the port is closed) and reset open ones;
 * - `status`: answer `status` without forwarding, e.g. 429 + Retry-After or a
 *   503 storm; `probability` < 1 fails only that share of requests;
 * - `tooLarge`: answer 413 when the decoded body exceeds `maxBytes`, forward the rest;
 * - `slow`: wait `delayMs` before forwarding each request.
 */
export type Fault =
  | { kind: 'pass' }
  | { kind: 'down' }
  | { kind: 'status'; status: number; retryAfter?: string; body?: string; probability?: number }
  | { kind: 'tooLarge'; maxBytes: number }
  | { kind: 'slow'; delayMs: number };

export interface ProxyRequest {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  /** Body as received. */
  wire: Buffer;
  /** Body with Content-Encoding gzip undone. */
  body: Buffer;
}

export interface FaultProxyOptions {
  /** Forward to this origin (`http://host:port`). Without it the proxy is a fake server. */
  upstream?: string;
  /** Status a standalone proxy answers for accepted requests. */
  okStatus?: number;
  port?: number;
  /** Sees every request that reaches the proxy, before the fault decides its fate. */
  onRequest?: (req: ProxyRequest) => void;
  /** Random source for `probability`; injectable so a storm can be replayed. */
  random?: () => number;
}

export interface ProxyStats {
  requests: number;
  /** Requests that reached the upstream (or were accepted when standalone). */
  forwarded: number;
  /** Responses by status code, including injected ones. */
  byStatus: Map<number, number>;
  /** Connections reset while down. */
  resets: number;
  /** Connections refused while down can't be seen; this counts the down periods. */
  downPeriods: number;
  firstRequestAt: number | undefined;
  maxDecodedBodyBytes: number;
}

/**
 * A controllable HTTP fault injector, in front of a real server or standing in
 * for one. Faults can be changed at any time; requests already being
 * forwarded finish normally, so an injected fault never causes a half-applied
 * request (a test that sees a duplicate can blame the client, not the proxy).
 */
export class FaultProxy {
  readonly stats: ProxyStats = {
    requests: 0,
    forwarded: 0,
    byStatus: new Map(),
    resets: 0,
    downPeriods: 0,
    firstRequestAt: undefined,
    maxDecodedBodyBytes: 0,
  };
  private fault: Fault = { kind: 'pass' };
  private inFlight = 0;
  private readonly sockets = new Set<Socket>();
  private listening = false;
  private portValue: number;
  private readonly server: Server;

  private constructor(private readonly opts: FaultProxyOptions) {
    this.portValue = opts.port ?? 0;
    this.server = createServer({ keepAliveTimeout: 30_000 }, (req, res) => void this.handle(req, res));
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.once('close', () => this.sockets.delete(s));
    });
  }

  static async start(opts: FaultProxyOptions = {}): Promise<FaultProxy> {
    const p = new FaultProxy(opts);
    await p.listen();
    return p;
  }

  get port(): number {
    return this.portValue;
  }
  get url(): string {
    return `http://127.0.0.1:${this.portValue}`;
  }

  /** Requests answered with `status` so far. */
  count(status: number): number {
    return this.stats.byStatus.get(status) ?? 0;
  }

  private listen(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.portValue, '127.0.0.1', () => {
        this.server.off('error', reject);
        const addr = this.server.address();
        if (addr && typeof addr !== 'string') this.portValue = addr.port;
        this.listening = true;
        resolve();
      });
    });
  }

  private async unlisten(): Promise<void> {
    if (!this.listening) return;
    this.listening = false;
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    // Let requests already being handled finish (a bounded wait: a client that
    // stalls mid-body must not hang the proxy), then drop every connection:
    // keep-alive sockets would otherwise keep working while "down".
    const deadline = Date.now() + 5000;
    while (this.inFlight > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    for (const s of this.sockets) s.destroy();
    await closed;
  }

  async setFault(f: Fault): Promise<void> {
    const wasDown = this.fault.kind === 'down';
    this.fault = f;
    if (f.kind === 'down' && !wasDown) {
      this.stats.downPeriods++;
      // Close the port; server.close() resolves once in-flight requests end.
      await this.unlisten();
    } else if (f.kind !== 'down' && wasDown) {
      await this.listen();
    }
  }

  /** Refuses connections for `ms`, then passes traffic again. */
  async downFor(ms: number): Promise<void> {
    await this.setFault({ kind: 'down' });
    await new Promise((r) => setTimeout(r, ms));
    await this.setFault({ kind: 'pass' });
  }

  async close(): Promise<void> {
    this.fault = { kind: 'pass' };
    await this.unlisten();
    for (const s of this.sockets) s.destroy();
  }

  private record(res: ServerResponse, status: number): void {
    this.stats.byStatus.set(status, (this.stats.byStatus.get(status) ?? 0) + 1);
    res.statusCode = status;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    this.inFlight++;
    try {
      await this.handleInner(req, res);
    } catch {
      // The client went away mid-request; nothing to answer.
      req.socket.destroy();
    } finally {
      this.inFlight--;
    }
  }

  private async handleInner(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const wire = Buffer.concat(chunks);
    const fault = this.fault;
    if (fault.kind === 'down') {
      // A request that raced the port closing: reset it unprocessed.
      this.stats.resets++;
      req.socket.destroy();
      return;
    }
    this.stats.requests++;
    this.stats.firstRequestAt ??= Date.now();
    let body = wire;
    if (/gzip/i.test(String(req.headers['content-encoding'] ?? '')) && wire.length > 0) body = gunzipSync(wire);
    this.stats.maxDecodedBodyBytes = Math.max(this.stats.maxDecodedBodyBytes, body.length);
    this.opts.onRequest?.({ method: req.method ?? 'GET', url: req.url ?? '/', headers: req.headers, wire, body });

    if (fault.kind === 'status' && (fault.probability ?? 1) > (this.opts.random ?? Math.random)()) {
      this.record(res, fault.status);
      if (fault.retryAfter !== undefined) res.setHeader('retry-after', fault.retryAfter);
      res.setHeader('content-type', 'text/plain');
      res.end(fault.body ?? `injected ${fault.status}\n`);
      return;
    }
    if (fault.kind === 'tooLarge' && body.length > fault.maxBytes) {
      this.record(res, 413);
      res.end(`request body of ${body.length} bytes exceeds ${fault.maxBytes}\n`);
      return;
    }
    if (fault.kind === 'slow') await new Promise((r) => setTimeout(r, fault.delayMs));
    await this.forward(req, wire, res);
  }

  private forward(req: IncomingMessage, wire: Buffer, res: ServerResponse): Promise<void> {
    const upstream = this.opts.upstream;
    if (!upstream) {
      this.stats.forwarded++;
      this.record(res, this.opts.okStatus ?? 200);
      res.end();
      return Promise.resolve();
    }
    const target = new URL(req.url ?? '/', upstream);
    const headers = { ...req.headers, host: target.host, 'content-length': String(wire.length) };
    delete headers['transfer-encoding'];
    delete headers.connection;
    return new Promise((resolve) => {
      const up = httpRequest(target, { method: req.method, headers }, (upRes) => {
        const status = upRes.statusCode ?? 502;
        this.stats.forwarded++;
        this.record(res, status);
        for (const [k, v] of Object.entries(upRes.headers)) {
          if (v !== undefined && k !== 'connection' && k !== 'transfer-encoding' && k !== 'keep-alive') res.setHeader(k, v);
        }
        upRes.pipe(res);
        upRes.once('end', () => resolve());
        upRes.once('error', () => resolve());
      });
      up.once('error', (err) => {
        // The real server is down: answer like a gateway would.
        this.record(res, 502);
        res.end(`upstream error: ${err.message}\n`);
        resolve();
      });
      up.end(wire);
    });
  }
}
