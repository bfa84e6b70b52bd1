// OTLP/HTTP logs, protobuf or JSON. Protobuf is written straight into the
// request body by encode/otlp.ts (the hot path, no OpenTelemetry module
// loaded); JSON goes through the OpenTelemetry JS serializer (loaded only
// when chosen). Resource attributes
// follow the OpenTelemetry Kubernetes semantic conventions, one resource per
// container and restart. partial_success rejections are dead-lettered.
import type { Resource } from '@opentelemetry/resources';
import type { ReadableLogRecord } from '@opentelemetry/sdk-logs';
import { OTLP_ATTRIBUTES as A, SHAPED_FIELDS } from '../../src/contract/record.ts';
import { VERSION } from '../../src/contract/version.ts';
import type { Identity } from '../config.ts';
import { FLAG_INCOMPLETE, FLAG_MALFORMED, FLAG_TRUNCATED, mapLeaves, type FieldValue, type LogRecord } from '../records/record.ts';
import { keepsOriginal } from '../records/shaped.ts';
import { nowTime, parseTimestamp } from '../records/timestamp.ts';
import { releaser } from '../encode/body.ts';
import { OtlpEncoder, resourceFields } from '../encode/otlp.ts';
import { decodeExportLogsResponse } from '../encode/otlp-response.ts';
import { severityOf } from '../encode/severity.ts';
import { withPath } from './http/client.ts';
import { metadataFields } from '../encode/document.ts';
import { attempt } from './http/result.ts';
import type { SendResult, Sink } from '../delivery/sink.ts';
import type { SinkContext } from './types.ts';

export const OTLP_LOGS_PATH = '/v1/logs';

type Attributes = ReadableLogRecord['attributes'];

interface ResponseReader {
  deserializeResponse(data: Uint8Array): { partialSuccess?: { rejectedLogRecords?: number | string; errorMessage?: string } };
}

/** Turns records into the SDK shape the OpenTelemetry serializers take. */
export class OtlpRecordBuilder {
  private readonly resources = new Map<string, Resource>();
  private readonly scope = { name: 'jobharvest', version: VERSION };

  constructor(
    private readonly identity: Identity,
    private readonly makeResource: (attrs: Attributes) => Resource,
  ) {}

  build(records: readonly LogRecord[]): ReadableLogRecord[] {
    const observed = nowTime();
    const hrObserved: [number, number] = [observed.sec, observed.nanos];
    const out = new Array<ReadableLogRecord>(records.length);
    for (let i = 0; i < records.length; i++) {
      const r = records[i]!;
      const key = `${r.file.container}\0${r.file.restart}`;
      let resource = this.resources.get(key);
      if (!resource) {
        resource = this.makeResource({ ...metadataFields(this.identity, r.file), ...resourceFields(this.identity) });
        this.resources.set(key, resource);
      }
      const t = parseTimestamp(r.ts) ?? observed;
      const attributes: Attributes = { [A.id]: r.file.idPrefix + r.offset };
      if (r.stream !== 'unknown') attributes[A.stream] = r.stream;
      if (r.flags & FLAG_TRUNCATED) attributes[A.truncated] = true;
      if (r.flags & FLAG_MALFORMED) attributes[A.malformed] = true;
      if (r.flags & FLAG_INCOMPLETE) attributes[A.incomplete] = true;
      const record: ReadableLogRecord = {
        hrTime: [t.sec, t.nanos],
        hrTimeObserved: hrObserved,
        body: r.message,
        resource,
        instrumentationScope: this.scope,
        attributes,
        droppedAttributesCount: 0,
      };
      out[i] = r.fields !== undefined || r.lines !== undefined ? shaped(record, r) : record;
    }
    return out;
  }
}

/** The same shape as the protobuf encoder's shaped record (encode/otlp.ts), through the serializer's own AnyValue mapping. */
function shaped(record: ReadableLogRecord, r: LogRecord): ReadableLogRecord {
  const attributes = { ...record.attributes };
  if (r.lines !== undefined && r.lines > 1) attributes[SHAPED_FIELDS.otlp.lines] = r.lines;
  if (r.fields === undefined) return { ...record, attributes };
  if (keepsOriginal(r)) attributes[SHAPED_FIELDS.otlp.original] = r.message;
  const severity = severityOf(r.fields);
  return {
    ...record,
    body: markInfinities(r.fields) as ReadableLogRecord['body'],
    attributes,
    ...(severity ? { severityNumber: severity.number, severityText: severity.text } : {}),
  };
}

/*
 * The OpenTelemetry serializer writes every integral number as an intValue
 * and an infinity as a null doubleValue. A JSON field past int64 (a 20-digit
 * id, 1e21) then makes the receiver refuse the whole request (the Collector:
 * "ReadInt64: overflow"), and an infinite one (1e400) is no double at all.
 * The protobuf encoder writes both as doubles, and so does this: after
 * serializing, an intValue that is no safe integer becomes a doubleValue, and
 * an infinity, which went through as a mark, becomes the "Infinity" or
 * "-Infinity" of proto3's JSON mapping.
 */

/** Bytes no field can be (fields are parsed JSON, never bytes), standing in for an infinity through the serializer. */
const INFINITY_MARKS: ReadonlyArray<readonly [Buffer, string]> = [
  [Buffer.from('jobharvest:+Infinity'), '"Infinity"'],
  [Buffer.from('jobharvest:-Infinity'), '"-Infinity"'],
];
const MARK_TEXT = new Map(INFINITY_MARKS.map(([mark, double]) => [`{"bytesValue":"${mark.toString('base64')}"}`, `{"doubleValue":${double}}`]));
const MARK_PATTERN = new RegExp([...MARK_TEXT.keys()].map((k) => k.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('|'), 'g');
/** An intValue of 16 or more digits, or with an exponent: maybe no int64, and no safe integer. */
const BIG_INT = /"intValue":(-?\d{16,}|-?\d[\d.]*[eE][+-]?\d+)(?=[,}])/g;

/** The fields with their infinities marked; the same object when they hold none (most). */
function markInfinities(v: FieldValue): FieldValue | Uint8Array {
  return mapLeaves<Uint8Array>(v, (x) => (x === Infinity ? INFINITY_MARKS[0]![0] : x === -Infinity ? INFINITY_MARKS[1]![0] : x));
}

/** The serializer's request with numbers past a safe integer, and infinities, as doubles (see above). */
export function doublesAsDoubles(encoded: Uint8Array): Buffer {
  const body = Buffer.from(encoded.buffer, encoded.byteOffset, encoded.byteLength);
  const text = body.toString('utf8');
  let fixed = text.replace(BIG_INT, (whole, n: string) => (Number.isSafeInteger(Number(n)) ? whole : `"doubleValue":${n}`));
  if (fixed.includes('"bytesValue"')) fixed = fixed.replace(MARK_PATTERN, (m) => MARK_TEXT.get(m)!);
  return fixed === text ? body : Buffer.from(fixed, 'utf8');
}

export function interpretPartialSuccess(serializer: ResponseReader, body: Buffer, records: readonly LogRecord[]): SendResult {
  if (body.length === 0) return { kind: 'ok' };
  let partial: { rejectedLogRecords?: number | string; errorMessage?: string } | undefined;
  try {
    partial = serializer.deserializeResponse(body).partialSuccess;
  } catch {
    return { kind: 'ok' };
  }
  const rejected = Number(partial?.rejectedLogRecords ?? 0);
  const message = partial?.errorMessage ?? '';
  if (!(rejected > 0)) return { kind: 'ok' };
  // OTLP says which count, not which records: keep the whole batch so none of the rejected is lost.
  const reason = `otlp partial_success: server rejected ${rejected} of ${records.length} records (not identified)${message ? `: ${message}` : ''}`;
  return { kind: 'partial', retry: [], failed: records.map((record) => ({ record, reason })) };
}

export async function createSink(ctx: SinkContext): Promise<Sink> {
  const url = withPath(ctx.config.endpoint!, OTLP_LOGS_PATH);
  const client = ctx.http();
  if (ctx.config.otlpEncoding !== 'json') {
    const responses = { deserializeResponse: decodeExportLogsResponse };
    const encoder = new OtlpEncoder(ctx.config.identity, 'jobharvest', VERSION);
    return {
      jsonPreparer: encoder,
      async send(records, signal) {
        const body = encoder.request(records);
        const release = releaser(body);
        try {
          const { result, response } = await attempt(() => client.post(url, body, { contentType: 'application/x-protobuf', signal, release }));
          if (result.kind !== 'ok' || !response) return result;
          return interpretPartialSuccess(responses, response.body, records);
        } finally {
          release();
        }
      },
    };
  }
  const [{ JsonLogsSerializer }, { resourceFromAttributes }] = await Promise.all([import('@opentelemetry/otlp-transformer'), import('@opentelemetry/resources')]);
  const builder = new OtlpRecordBuilder(ctx.config.identity, (attrs) => resourceFromAttributes(attrs));
  return {
    async send(records, signal) {
      const encoded = JsonLogsSerializer.serializeRequest(builder.build(records));
      if (!encoded) return { kind: 'fail', reason: 'otlp serializer produced no request' };
      const body = doublesAsDoubles(encoded);
      const { result, response } = await attempt(() => client.post(url, body, { contentType: 'application/json', signal }));
      if (result.kind !== 'ok' || !response) return result;
      return interpretPartialSuccess(JsonLogsSerializer, response.body, records);
    },
  };
}
