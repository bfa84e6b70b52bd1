import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { redactUrls } from '../contract/redact.ts';
import { QueryError } from './types.ts';

/** Who the query client is at the log server. Values never reach a message. */
export interface Credentials {
  token?: string;
  username?: string;
  password?: string;
}

export interface HttpOptions {
  credentials?: Credentials;
  headers?: Record<string, string>;
  /** PEM of a private CA. */
  ca?: string;
  timeoutMs?: number;
}

export function authHeaders(c: Credentials | undefined): Record<string, string> {
  if (c?.token) return { authorization: `Bearer ${c.token}` };
  if (c?.username !== undefined && c.password !== undefined) return { authorization: `Basic ${Buffer.from(`${c.username}:${c.password}`).toString('base64')}` };
  return {};
}

/** One request, whole body as text; any status but 2xx is an error naming the URL without secrets. */
export function httpText(url: URL, opts: HttpOptions, method: 'GET' | 'POST' = 'GET', body?: { type: string; text: string }): Promise<string> {
  const req = url.protocol === 'https:' ? httpsRequest : httpRequest;
  const headers: Record<string, string> = { ...opts.headers, ...authHeaders(opts.credentials), accept: 'application/json' };
  if (body) headers['content-type'] = body.type;
  return new Promise((resolve, reject) => {
    const r = req(url, { method, headers, ...(opts.ca ? { ca: opts.ca } : {}), timeout: opts.timeoutMs ?? 60_000 }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        const status = res.statusCode ?? 0;
        if (status >= 200 && status < 300) resolve(text);
        else reject(new QueryError(`${method} ${redactUrls(url.href)}: HTTP ${status}${status === 401 || status === 403 ? ' (credentials refused)' : ''}: ${redactUrls(text.slice(0, 300)).trim()}`, status));
      });
    });
    r.on('timeout', () => r.destroy(new QueryError(`${method} ${redactUrls(url.href)}: timed out`, undefined, true)));
    r.on('error', (e) => reject(e instanceof QueryError ? e : new QueryError(`${method} ${redactUrls(url.href)}: ${(e as NodeJS.ErrnoException).code ?? e.message}`, undefined, true)));
    if (body) r.write(body.text);
    r.end();
  });
}

/** A base URL with a path appended, keeping the base's own path prefix. */
export function under(base: string, path: string): URL {
  const u = new URL(base);
  u.pathname = `${u.pathname.replace(/\/+$/, '')}${path}`;
  return u;
}

/**
 * One request whose answer is a stream of lines (NDJSON that a server writes
 * as it goes, such as a live tail). Any status but 2xx is an error as in
 * httpText. Ends when the server closes the response or `signal` aborts.
 */
export async function* httpLines(url: URL, opts: HttpOptions, signal: AbortSignal, method: 'GET' | 'POST' = 'GET', body?: { type: string; text: string }): AsyncIterable<string> {
  const req = url.protocol === 'https:' ? httpsRequest : httpRequest;
  const headers: Record<string, string> = { ...opts.headers, ...authHeaders(opts.credentials) };
  if (body) headers['content-type'] = body.type;
  const res = await new Promise<IncomingMessage>((resolve, reject) => {
    const r = req(url, { method, headers, signal, ...(opts.ca ? { ca: opts.ca } : {}) }, resolve);
    r.on('error', (e) => reject(e.name === 'AbortError' ? e : new QueryError(`${method} ${redactUrls(url.href)}: ${(e as NodeJS.ErrnoException).code ?? e.message}`, undefined, true)));
    if (body) r.write(body.text);
    r.end();
  });
  const status = res.statusCode ?? 0;
  if (status < 200 || status >= 300) {
    let text = '';
    for await (const c of res) text += (c as Buffer).toString('utf8');
    throw new QueryError(`${method} ${redactUrls(url.href)}: HTTP ${status}${status === 401 || status === 403 ? ' (credentials refused)' : ''}: ${redactUrls(text.slice(0, 300)).trim()}`, status);
  }
  let rest = '';
  try {
    for await (const c of res) {
      rest += (c as Buffer).toString('utf8');
      let nl: number;
      while ((nl = rest.indexOf('\n')) >= 0) {
        const line = rest.slice(0, nl);
        rest = rest.slice(nl + 1);
        if (line) yield line;
      }
    }
  } catch (e) {
    if (signal.aborted) return;
    throw e;
  }
  if (rest) yield rest;
}
