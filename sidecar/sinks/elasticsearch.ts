// Elasticsearch / OpenSearch _bulk with `create` and the record id as _id, so
// a re-sent record is refused with 409 instead of stored twice. The per-item
// results decide each record's fate: 409 is "already stored", 429/5xx are
// retried, other failures go to the dead-letter file.
import { isRetryableStatus, parseRetryAfter } from '../delivery/backoff.ts';
import { BodyBuilder, releaser } from '../encode/body.ts';
import type { LogRecord } from '../records/record.ts';
import { withPath } from './http/client.ts';
import { DocumentEncoder } from '../encode/document.ts';
import { attempt } from './http/result.ts';
import type { SendResult, Sink } from '../delivery/sink.ts';
import type { SinkContext } from './types.ts';

const ACTION_END = Buffer.from('"}}\n');

/** Keeps the answer small: only what the per-item decision needs. */
const FILTER_PATH = 'errors,items.*.status,items.*.error.type,items.*.error.reason';

interface BulkItem {
  status?: number;
  error?: { type?: string; reason?: string } | string;
}

export function encodeBulk(encoder: DocumentEncoder, index: string, records: readonly LogRecord[]): Buffer {
  const action = Buffer.from(`{"create":{"_index":${JSON.stringify(index)},"_id":"`);
  const body = new BodyBuilder(records.length * 600);
  for (const r of records) {
    body.bytes(action);
    body.ascii(r.file.idPrefix);
    body.uint(r.offset);
    body.bytes(ACTION_END);
    encoder.writeLine(body, r);
  }
  return body.finish();
}

function reasonOf(item: BulkItem): string {
  const e = item.error;
  if (!e) return `status ${item.status}`;
  if (typeof e === 'string') return `status ${item.status}: ${e}`;
  return `status ${item.status}: ${e.type ?? 'error'}: ${e.reason ?? ''}`;
}

/** Reads the _bulk answer; `errors:false` (the normal case) skips the per-item walk. */
export function interpretBulk(body: Buffer, records: readonly LogRecord[], retryAfterMs?: number): SendResult {
  const head = body.subarray(0, 200).toString('latin1');
  if (/"errors"\s*:\s*false/.test(head)) return { kind: 'ok' };
  let parsed: { errors?: boolean; items?: Array<Record<string, BulkItem>> };
  try {
    parsed = JSON.parse(body.toString('utf8')) as typeof parsed;
  } catch {
    return { kind: 'retry', reason: `unreadable _bulk answer: ${body.subarray(0, 100).toString('utf8')}` };
  }
  // A 2xx whose answer does not claim item errors is success, whatever else it holds.
  if (parsed.errors !== true) return { kind: 'ok' };
  const items = parsed.items ?? [];
  if (items.length !== records.length) {
    return { kind: 'retry', reason: `_bulk answered ${items.length} items for ${records.length} records` };
  }
  const retry: LogRecord[] = [];
  const failed: Array<{ record: LogRecord; reason: string; status?: number }> = [];
  for (let i = 0; i < items.length; i++) {
    const wrapper = items[i]!;
    const item = wrapper.create ?? wrapper.index ?? Object.values(wrapper)[0] ?? {};
    const status = item.status ?? 0;
    if ((status >= 200 && status < 300) || status === 409) continue;
    if (isRetryableStatus(status)) retry.push(records[i]!);
    else failed.push({ record: records[i]!, reason: reasonOf(item), status });
  }
  if (retry.length === 0 && failed.length === 0) return { kind: 'ok' };
  return { kind: 'partial', retry, failed, afterMs: retryAfterMs };
}

export function createSink(ctx: SinkContext): Sink {
  const url = withPath(ctx.config.endpoint!, '/_bulk');
  if (!url.searchParams.has('filter_path')) url.searchParams.set('filter_path', FILTER_PATH);
  const client = ctx.http();
  const encoder = new DocumentEncoder(ctx.config.identity);
  return {
    async send(records, signal) {
      const body = encodeBulk(encoder, ctx.config.esIndex, records);
      const release = releaser(body);
      const { result, response } = await attempt(() => client.post(url, body, { contentType: 'application/x-ndjson', signal, release })).finally(release);
      if (result.kind !== 'ok' || !response) return result;
      // A 2xx with no body carries no per-item errors to act on.
      if (response.body.length === 0) return { kind: 'ok' };
      return interpretBulk(response.body, records, parseRetryAfter(response.headers['retry-after']));
    },
  };
}
