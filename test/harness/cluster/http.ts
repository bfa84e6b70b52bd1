import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';

export interface HttpResponse {
  status: number;
  body: string;
}

export interface HttpOptions {
  method?: string;
  caPem?: string;
  token?: string;
  body?: string;
  contentType?: string;
  timeoutMs?: number;
}

/**
 * One request with the CA and bearer token of the test cluster. node:https is
 * used because the global fetch cannot be given a private CA without another
 * dependency.
 */
export function httpCall(url: string, opts: HttpOptions = {}): Promise<HttpResponse> {
  const target = new URL(url);
  const request = target.protocol === 'https:' ? httpsRequest : httpRequest;
  const headers: Record<string, string> = { accept: 'application/json' };
  if (opts.token !== undefined) headers.authorization = `Bearer ${opts.token}`;
  if (opts.body !== undefined) {
    headers['content-type'] = opts.contentType ?? 'application/json';
    headers['content-length'] = String(Buffer.byteLength(opts.body));
  }
  return new Promise((resolve, reject) => {
    const req = request(
      target,
      { method: opts.method ?? 'GET', headers, ca: opts.caPem, timeout: opts.timeoutMs ?? 10_000 },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`${opts.method ?? 'GET'} ${url} timed out`)));
    req.on('error', reject);
    req.end(opts.body);
  });
}
