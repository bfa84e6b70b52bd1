// One keep-alive HTTP(S) client per process, carrying TLS material, auth and
// user headers, with the request bodies compressed by the configured codec. Built on node:http so
// the sidecar needs no HTTP library and can pass a custom CA and client
// certificate straight to the agent.
import http, { type IncomingHttpHeaders } from 'node:http';
import type https from 'node:https';
import { compressBody } from '../../encode/compress.ts';
import type { Codec } from '../../../src/contract/codec.ts';
import { log } from '../../log.ts';
import type { EngineOptions } from '../../config.ts';
import { buildRequest } from '../../delivery/request-error.ts';
import { readTlsFiles } from '../tls-files.ts';

export interface HttpResponse {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
}

export interface PostOptions {
  readonly contentType: string;
  readonly headers?: Readonly<Record<string, string>>;
  /** false: send the body as it is, whatever the codec (a body that is compressed already). */
  readonly compress?: boolean;
  readonly signal?: AbortSignal;
  /** Called once `body` is no longer needed (compressed, or the request is over), so its buffer can be reused at once. */
  readonly release?: () => void;
}

/** Answers larger than this are cut; we only ever need status and small JSON. */
const MAX_RESPONSE_BYTES = 32 * 1024 * 1024;
/**
 * An error answer is read for its message only. A server (or something posing
 * as one) that answers 503 with megabytes would otherwise hold that much per
 * request in flight, for as long as it keeps answering so.
 */
export const MAX_ERROR_RESPONSE_BYTES = 64 * 1024;

export interface HttpClientEvents {
  /** The server refused the configured codec and took the same body as gzip; called once per client. */
  codecFallback?(reason: string): void;
}

function ok(status: number): boolean {
  return status >= 200 && status < 300;
}

export class HttpClient {
  private readonly httpAgent: http.Agent;
  /** Created on the first https request: TLS costs several MiB of memory that plain-http pods never need. */
  private httpsAgent: Promise<{ https: typeof https; agent: https.Agent }> | undefined;
  private readonly tlsOptions: https.AgentOptions;
  private readonly baseHeaders: Record<string, string>;
  private readonly gzipLevel: number;
  private codec: Codec;
  /** Set once the server answered a zstd body with success; until then a refusal is answered by sending the body again with gzip. */
  private zstdTaken = false;
  private readonly timeoutMs: number;
  private readonly maxResponseBytes: number;

  constructor(
    cfg: EngineOptions,
    private readonly events: HttpClientEvents = {},
  ) {
    this.maxResponseBytes = cfg.maxResponseBytes ?? MAX_RESPONSE_BYTES;
    const maxSockets = cfg.maxInFlight + 1;
    // The agent hands its options to every connection it opens: `lookup` included.
    const lookup = cfg.lookup ? { lookup: cfg.lookup } : {};
    this.httpAgent = new http.Agent({ keepAlive: true, maxSockets, ...lookup });
    // Read now, so that a missing file is a start-up error rather than a retried send.
    this.tlsOptions = {
      keepAlive: true,
      maxSockets,
      ...lookup,
      ...readTlsFiles(cfg.tls),
    };
    this.baseHeaders = { 'user-agent': 'jobharvest-sidecar', ...cfg.headers };
    if (cfg.auth.token) this.baseHeaders.authorization = `${cfg.auth.scheme} ${cfg.auth.token}`;
    else if (cfg.auth.username) {
      this.baseHeaders.authorization = 'Basic ' + Buffer.from(`${cfg.auth.username}:${cfg.auth.password ?? ''}`).toString('base64');
    }
    this.gzipLevel = cfg.gzipLevel;
    this.codec = cfg.compression;
    this.timeoutMs = cfg.requestTimeoutMs;
  }

  /** Throws on network errors and timeouts (callers retry those), and a RequestBuildError (permanent); resolves with any HTTP answer. */
  async post(url: URL, body: Buffer | string, opts: PostOptions): Promise<HttpResponse> {
    const plain = typeof body === 'string' ? Buffer.from(body) : body;
    const codec: Codec = opts.compress === false ? 'none' : this.codec;
    if (codec !== 'zstd' || this.zstdTaken) return this.send(url, plain, codec, opts, true);
    // A server that does not decode zstd answers 415 (the OTLP spec's answer)
    // or 400 (the Collector's confighttp, VictoriaLogs). Either is also what a
    // bad batch gets, so the same body goes again with gzip: a success says
    // the codec was the trouble, and every later body is gzip. The body is
    // kept until then, and nothing is lost either way.
    const first = await this.send(url, plain, 'zstd', opts, false);
    if (ok(first.status)) {
      this.zstdTaken = true;
      return first;
    }
    if (first.status !== 415 && first.status !== 400) return first;
    const again = await this.send(url, plain, 'gzip', opts, true);
    if (ok(again.status) && this.codec === 'zstd') {
      this.codec = 'gzip';
      const reason = `${url.host} refused a zstd body (HTTP ${first.status}) and took it as gzip; sending gzip from now on`;
      log.warn('the log server does not take zstd; falling back to gzip', { status: first.status, answer: first.body.subarray(0, 200).toString('utf8') });
      this.events.codecFallback?.(reason);
    }
    return again;
  }

  private async send(url: URL, plain: Buffer, codec: Codec, opts: PostOptions, release: boolean): Promise<HttpResponse> {
    const headers: Record<string, string> = { ...this.baseHeaders, 'content-type': opts.contentType, ...opts.headers };
    // On the calling thread: a megabyte at gzip level 1 takes about two
    // milliseconds, and the thread-pool version costs more CPU in hand-offs
    // than it could overlap, on a sidecar that mostly has a fraction of one
    // core. It also keeps zlib's allocations out of the pool threads' malloc
    // arenas (RSS).
    const { body: payload, encoding } = compressBody(codec, plain, this.gzipLevel);
    if (encoding) {
      headers['content-encoding'] = encoding;
      if (release) opts.release?.();
    }
    headers['content-length'] = String(payload.length);
    const tls = url.protocol === 'https:' ? await this.https() : undefined;
    return new Promise<HttpResponse>((resolve, reject) => {
      const req = buildRequest(() =>
        (tls ? tls.https : http).request(url, {
          method: 'POST',
          headers,
          agent: tls ? tls.agent : this.httpAgent,
          signal: opts.signal,
        }),
      );
      req.setTimeout(this.timeoutMs, () => req.destroy(new Error(`no answer within ${this.timeoutMs} ms`)));
      req.on('error', reject);
      req.on('response', (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        let settled = false;
        const status = res.statusCode ?? 0;
        const cap = status >= 200 && status < 300 ? this.maxResponseBytes : MAX_ERROR_RESPONSE_BYTES;
        const finish = (): void => {
          if (settled) return;
          settled = true;
          resolve({ status, headers: res.headers, body: Buffer.concat(chunks) });
        };
        res.on('data', (c: Buffer) => {
          if (settled) return;
          chunks.push(size + c.length > cap ? c.subarray(0, cap - size) : c);
          size += c.length;
          if (size >= cap) {
            // Enough: answer with what was read and drop the connection (a
            // half-read answer leaves it unusable) rather than pull the rest
            // through the socket. A server answering 503 with 30 MiB would
            // otherwise cost that much in dead read buffers per attempt.
            finish();
            res.destroy();
            req.destroy();
          }
        });
        res.on('error', (err) => {
          if (settled) return;
          settled = true;
          reject(err);
        });
        res.on('end', finish);
      });
      req.end(payload);
    });
  }

  private https(): Promise<{ https: typeof https; agent: https.Agent }> {
    this.httpsAgent ??= import('node:https').then((mod) => {
      const h = ((mod as unknown as { default?: typeof https }).default ?? mod) as typeof https;
      return { https: h, agent: new h.Agent(this.tlsOptions) };
    });
    return this.httpsAgent;
  }

  close(): void {
    this.httpAgent.destroy();
    void this.httpsAgent?.then((t) => t.agent.destroy());
  }
}

/** Adds a path suffix to a base URL unless it is already there, keeping the query. */
export function withPath(base: URL, suffix: string): URL {
  const u = new URL(base.href);
  if (u.pathname.endsWith(suffix)) return u;
  u.pathname = u.pathname.replace(/\/+$/, '') + suffix;
  return u;
}

