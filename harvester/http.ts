// The HTTP client the harvester's sinks use: the sidecar's (same headers,
// auth, gzip, TLS material, timeout, answer caps), except that an answer is
// read only up to its cap. The sidecar's client keeps the first 64 KiB of an
// error answer but reads the rest to its end, and a destination answering 503
// with 30 MiB makes every harvest in flight pull 30 MiB through the socket per
// attempt: dead read buffers pile up faster than the garbage collector frees
// them (about +170 MiB of peak RSS at 4 harvests, `npm run bench:harvester`).
// Here, at the cap, the answer resolves with what was read and the
// connection is dropped (a half-read answer leaves it unusable anyway).
import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import zlib from 'node:zlib';
import type { Config } from '../sidecar/config.ts';
import { HttpClient, MAX_ERROR_RESPONSE_BYTES, type HttpResponse, type PostOptions } from '../sidecar/sinks/http/client.ts';
import { buildRequest } from '../sidecar/sinks/request-error.ts';

/** The harvester always sets maxResponseBytes (ship.ts); this is the sidecar's own default. */
const DEFAULT_MAX_RESPONSE_BYTES = 32 * 1024 * 1024;

export class HarvestHttpClient extends HttpClient {
  private readonly agents: { http: http.Agent; https: https.Agent | undefined };
  private readonly tlsMaterial: https.AgentOptions;
  private readonly baseHeaderSet: Record<string, string>;
  private readonly gzipOn: boolean;
  private readonly level: number;
  private readonly timeout: number;
  private readonly okCap: number;

  constructor(cfg: Config) {
    // The sidecar's constructor validates the TLS files (a ConfigError at start, not a retried send).
    super(cfg);
    const maxSockets = cfg.maxInFlight + 1;
    this.agents = { http: new http.Agent({ keepAlive: true, maxSockets }), https: undefined };
    const pem = (file: string | undefined) => (file ? readFileSync(file) : undefined);
    this.tlsMaterial = { keepAlive: true, maxSockets, ca: pem(cfg.tls.caFile), cert: pem(cfg.tls.certFile), key: pem(cfg.tls.keyFile), rejectUnauthorized: !cfg.tls.insecureSkipVerify };
    this.baseHeaderSet = { 'user-agent': 'jobharvest-sidecar', ...cfg.headers };
    if (cfg.auth.token) this.baseHeaderSet.authorization = `${cfg.auth.scheme} ${cfg.auth.token}`;
    else if (cfg.auth.username) this.baseHeaderSet.authorization = 'Basic ' + Buffer.from(`${cfg.auth.username}:${cfg.auth.password ?? ''}`).toString('base64');
    this.gzipOn = cfg.gzip;
    this.level = cfg.gzipLevel;
    this.timeout = cfg.requestTimeoutMs;
    this.okCap = cfg.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
  }

  override post(url: URL, body: Buffer | string, opts: PostOptions): Promise<HttpResponse> {
    let payload = typeof body === 'string' ? Buffer.from(body) : body;
    const headers: Record<string, string> = { ...this.baseHeaderSet, 'content-type': opts.contentType, ...opts.headers };
    if (this.gzipOn && opts.gzip !== false) {
      payload = zlib.gzipSync(payload, { level: this.level });
      headers['content-encoding'] = 'gzip';
      opts.release?.();
    }
    headers['content-length'] = String(payload.length);
    const secure = url.protocol === 'https:';
    const agent = secure ? (this.agents.https ??= new https.Agent(this.tlsMaterial)) : this.agents.http;
    return new Promise<HttpResponse>((resolve, reject) => {
      const req = buildRequest(() => (secure ? https : http).request(url, { method: 'POST', headers, agent, signal: opts.signal }));
      req.setTimeout(this.timeout, () => req.destroy(new Error(`no answer within ${this.timeout} ms`)));
      req.on('error', reject);
      req.on('response', (res) => {
        const status = res.statusCode ?? 0;
        const cap = status >= 200 && status < 300 ? this.okCap : MAX_ERROR_RESPONSE_BYTES;
        const chunks: Buffer[] = [];
        let size = 0;
        let settled = false;
        const finish = () => {
          if (settled) return;
          settled = true;
          resolve({ status, headers: res.headers, body: Buffer.concat(chunks) });
        };
        res.on('data', (c: Buffer) => {
          if (settled) return;
          chunks.push(size + c.length > cap ? c.subarray(0, cap - size) : c);
          size += c.length;
          if (size >= cap) {
            // Enough: answer with what was read and drop the connection, rather than read the rest.
            finish();
            res.destroy();
            req.destroy();
          }
        });
        res.on('error', (err) => (settled ? undefined : ((settled = true), reject(err))));
        res.on('end', finish);
      });
      req.end(payload);
    });
  }

  override close(): void {
    super.close();
    this.agents.http.destroy();
    this.agents.https?.destroy();
  }
}
