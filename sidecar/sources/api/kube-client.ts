// A minimal in-cluster Kubernetes client on node:https: GET a JSON object,
// open a streaming GET (pods/log, watch). The sidecar needs three calls, and
// @kubernetes/client-node would add a large module graph to the start-up of
// every api-mode pod for them. The service-account token is re-read from its
// file every minute and after a 401, as client-go does, because projected
// tokens rotate (hourly by default) while the sidecar runs for the whole Job.
import { readFile } from 'node:fs/promises';
import http, { type IncomingMessage } from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { ConfigError, type KubeSettings } from '../../config.ts';
import { ENV } from '../../../src/contract/env.ts';
import { log } from '../../log.ts';

export const TOKEN_REFRESH_MS = 60_000;
const MAX_ERROR_BODY = 64 * 1024;

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly reason?: string,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

export type KubeClientOptions = KubeSettings & {
  /** How often the token (and CA) files are read again. */
  readonly tokenRefreshMs?: number;
  /** Time allowed for a GET to answer, and for a stream to send its headers. */
  readonly requestTimeoutMs?: number;
};

export class KubeClient {
  private token = '';
  private ca: Buffer | undefined;
  private readAt = 0;
  private reading: Promise<void> | undefined;
  private agent: http.Agent;
  /** Earlier agents still carry open streams after a CA change; closed at the end. */
  private readonly oldAgents: http.Agent[] = [];
  private readonly isHttps: boolean;
  private readonly refreshMs: number;
  private readonly timeoutMs: number;
  /** Requests sent so far. */
  requests = 0;

  private constructor(private readonly opts: KubeClientOptions) {
    this.isHttps = opts.apiUrl.protocol === 'https:';
    this.refreshMs = opts.tokenRefreshMs ?? TOKEN_REFRESH_MS;
    this.timeoutMs = opts.requestTimeoutMs ?? 30_000;
    this.agent = this.newAgent();
  }

  /** Reads the token and CA once; a missing token is a start-up error, not something to retry. */
  static async create(opts: KubeClientOptions): Promise<KubeClient> {
    const c = new KubeClient(opts);
    try {
      await c.readCredentials();
    } catch (err) {
      if (opts.credentials) throw new ConfigError([`api mode: no credentials for the Kubernetes API: ${(err as Error).message}`]);
      throw new ConfigError([`api mode: cannot read the service-account token in ${opts.tokenDir} (${ENV.KUBE_TOKEN_DIR.name}): ${(err as Error).message}`]);
    }
    if (c.isHttps && !c.ca && !opts.credentials) log.warn('no ca.crt next to the service-account token; trusting the system CAs for the Kubernetes API', { tokenDir: opts.tokenDir });
    return c;
  }

  get apiUrl(): URL {
    return this.opts.apiUrl;
  }

  /** The bearer token currently sent (tests check rotation with it). */
  get currentToken(): string {
    return this.token;
  }

  async getJson<T>(pathAndQuery: string, signal?: AbortSignal): Promise<T> {
    const res = await this.request(pathAndQuery, signal, false);
    const chunks: Buffer[] = [];
    for await (const c of res) chunks.push(c as Buffer);
    return JSON.parse(Buffer.concat(chunks).toString('utf8')) as T;
  }

  /** A 2xx response whose body the caller reads (and must consume or destroy). */
  stream(pathAndQuery: string, signal?: AbortSignal): Promise<IncomingMessage> {
    return this.request(pathAndQuery, signal, true);
  }

  close(): void {
    this.agent.destroy();
    for (const a of this.oldAgents.splice(0)) a.destroy();
  }

  private newAgent(): http.Agent {
    // One socket per followed container plus the watch: no socket limit.
    return this.isHttps ? new https.Agent({ keepAlive: true, ca: this.ca }) : new http.Agent({ keepAlive: true });
  }

  private async readCredentials(): Promise<void> {
    const { token, ca } = this.opts.credentials ? await this.opts.credentials() : await tokenFiles(this.opts.tokenDir);
    if (token === '') throw new Error('the token is empty');
    const first = this.readAt === 0;
    this.token = token;
    this.readAt = Date.now();
    if (this.isHttps && (ca === undefined ? this.ca !== undefined : !this.ca?.equals(ca))) {
      this.ca = ca;
      // Open streams keep their connection; new requests use the new CA.
      this.oldAgents.push(this.agent);
      this.agent = this.newAgent();
      if (!first) log.info('the Kubernetes API CA changed; new connections use it');
    }
  }

  /** Re-reads the files when due (or forced); a failed re-read keeps the last good token. */
  private refresh(force: boolean): Promise<void> {
    if (!force && Date.now() - this.readAt < this.refreshMs) return Promise.resolve();
    this.reading ??= this.readCredentials()
      .catch((err: unknown) => {
        this.readAt = Date.now();
        log.warn('re-reading the service-account token failed; keeping the previous one', { error: err });
      })
      .finally(() => {
        this.reading = undefined;
      });
    return this.reading;
  }

  private async request(pathAndQuery: string, signal: AbortSignal | undefined, streaming: boolean): Promise<IncomingMessage> {
    await this.refresh(false);
    const sent = this.token;
    let res = await this.send(pathAndQuery, signal, streaming);
    if (res.statusCode === 401) {
      // The token may have rotated since the last read: read it now and try once more.
      res.resume();
      await this.refresh(true);
      if (this.token !== sent) res = await this.send(pathAndQuery, signal, streaming);
    }
    const status = res.statusCode ?? 0;
    if (status >= 200 && status < 300) return res;
    throw await apiError(res);
  }

  private send(pathAndQuery: string, signal: AbortSignal | undefined, streaming: boolean): Promise<IncomingMessage> {
    const base = this.opts.apiUrl;
    const url = new URL(base.pathname.replace(/\/+$/, '') + pathAndQuery, base);
    this.requests++;
    return new Promise<IncomingMessage>((resolve, reject) => {
      const req = (this.isHttps ? https : http).request(url, {
        method: 'GET',
        agent: this.agent,
        signal,
        headers: { authorization: `Bearer ${this.token}`, accept: 'application/json', 'user-agent': 'jobharvest-sidecar' },
      });
      req.setTimeout(this.timeoutMs, () => req.destroy(new Error(`the Kubernetes API did not answer within ${this.timeoutMs} ms`)));
      req.on('error', reject);
      req.on('response', (res) => {
        // A followed log may stay silent for hours: only the wait for headers is timed.
        if (streaming) req.setTimeout(0);
        resolve(res);
      });
      req.end();
    });
  }
}

/** The pod's projected service-account token and the cluster CA beside it. */
async function tokenFiles(dir: string): Promise<{ token: string; ca?: Buffer }> {
  const token = (await readFile(path.join(dir, 'token'), 'utf8')).trim();
  try {
    return { token, ca: await readFile(path.join(dir, 'ca.crt')) };
  } catch {
    return { token };
  }
}

async function apiError(res: IncomingMessage): Promise<ApiError> {
  const status = res.statusCode ?? 0;
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const c of res) {
      if (size < MAX_ERROR_BODY) chunks.push(c as Buffer);
      size += (c as Buffer).length;
    }
  } catch {
    // The status code is what matters.
  }
  const text = Buffer.concat(chunks).toString('utf8');
  try {
    const s = JSON.parse(text) as { message?: string; reason?: string };
    return new ApiError(status, `${status}: ${s.message ?? text.slice(0, 300)}`, s.reason);
  } catch {
    return new ApiError(status, `${status}: ${text.slice(0, 300) || res.statusMessage || 'no body'}`);
  }
}

const enc = encodeURIComponent;

export function podPath(namespace: string, pod: string): string {
  return `/api/v1/namespaces/${enc(namespace)}/pods/${enc(pod)}`;
}

export function podWatchPath(namespace: string, pod: string, resourceVersion: string, timeoutSeconds: number): string {
  const q = new URLSearchParams({
    fieldSelector: `metadata.name=${pod}`,
    watch: 'true',
    allowWatchBookmarks: 'true',
    timeoutSeconds: String(timeoutSeconds),
  });
  if (resourceVersion) q.set('resourceVersion', resourceVersion);
  return `/api/v1/namespaces/${enc(namespace)}/pods?${q.toString()}`;
}

export interface LogQuery {
  readonly container: string;
  readonly follow: boolean;
  readonly previous: boolean;
  /** RFC 3339 with whole seconds: the API rejects or truncates anything finer. */
  readonly sinceTime?: string;
}

export function podLogPath(namespace: string, pod: string, q: LogQuery): string {
  const p = new URLSearchParams({ container: q.container, timestamps: 'true' });
  if (q.follow) p.set('follow', 'true');
  if (q.previous) p.set('previous', 'true');
  if (q.sinceTime) p.set('sinceTime', q.sinceTime);
  return `${podPath(namespace, pod)}/log?${p.toString()}`;
}
