// Maps an HTTP exchange onto the delivery result every HTTP sink shares.
import { isRetryableStatus, parseRetryAfter } from '../../delivery/backoff.ts';
import { isRequestBuildError } from '../../delivery/request-error.ts';
import type { HttpResponse } from './client.ts';
import type { SendResult } from '../../delivery/sink.ts';

export function describe(res: HttpResponse): string {
  const text = res.body.subarray(0, 300).toString('utf8').replace(/\s+/g, ' ').trim();
  return `HTTP ${res.status}${text ? `: ${text}` : ''}`;
}

export function classify(res: HttpResponse): SendResult {
  const s = res.status;
  if (s >= 200 && s < 300) return { kind: 'ok' };
  if (s === 413) return { kind: 'split', reason: describe(res) };
  if (isRetryableStatus(s)) return { kind: 'retry', reason: describe(res), status: s, afterMs: parseRetryAfter(res.headers['retry-after']) };
  return { kind: 'fail', reason: describe(res), status: s };
}

/** Runs one request; network errors and timeouts become retries, errors building it a permanent failure. */
export async function attempt(run: () => Promise<HttpResponse>): Promise<{ result: SendResult; response?: HttpResponse }> {
  try {
    const response = await run();
    return { result: classify(response), response };
  } catch (err) {
    if (isRequestBuildError(err)) return { result: { kind: 'fail', reason: err.message } };
    return { result: { kind: 'retry', reason: `network: ${(err as Error).message}` } };
  }
}
