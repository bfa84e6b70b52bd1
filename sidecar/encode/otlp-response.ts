// The OTLP/HTTP protobuf response, ExportLogsServiceResponse: read here so the
// protobuf path loads no OpenTelemetry module at all. Only partial_success is
// read; field numbers are opentelemetry-proto's (collector/logs/v1).
import { I32, I64, LEN, VARINT } from './protobuf.ts';

/** ExportLogsServiceResponse.partial_success */
const RESPONSE_PARTIAL_SUCCESS = 1;
/** ExportLogsPartialSuccess.rejected_log_records, .error_message */
const PARTIAL_SUCCESS_REJECTED_LOG_RECORDS = 1;
const PARTIAL_SUCCESS_ERROR_MESSAGE = 2;

interface ExportLogsResponse {
  partialSuccess?: { rejectedLogRecords?: number; errorMessage?: string };
}

function readVarint(b: Uint8Array, at: number): [value: number, next: number] {
  let v = 0;
  let mul = 1;
  for (let i = at; i < b.length && i < at + 10; i++) {
    const x = b[i]!;
    v += (x & 0x7f) * mul;
    mul *= 128;
    if (x < 0x80) return [v, i + 1];
  }
  throw new RangeError(`truncated varint at ${at}`);
}

/** Calls `onField` for each field of the message at [s, e) with its wire type, value (varints) or content range (length-delimited). */
function fields(b: Uint8Array, s: number, e: number, onField: (field: number, wire: number, value: number, cs: number, ce: number) => void): void {
  let i = s;
  while (i < e) {
    const [key, at] = readVarint(b, i);
    const field = Math.floor(key / 8);
    const wire = key & 7;
    if (wire === VARINT) {
      const [v, next] = readVarint(b, at);
      onField(field, wire, v, 0, 0);
      i = next;
    } else if (wire === LEN) {
      const [len, cs] = readVarint(b, at);
      if (cs + len > e) throw new RangeError(`field ${field} runs past its message`);
      onField(field, wire, 0, cs, cs + len);
      i = cs + len;
    } else if (wire === I64) i = at + 8;
    else if (wire === I32) i = at + 4;
    else throw new RangeError(`unsupported wire type ${wire}`);
  }
  if (i !== e) throw new RangeError('message ends inside a field');
}

/** The response's partial_success; throws on bytes that are no such message. */
export function decodeExportLogsResponse(b: Uint8Array): ExportLogsResponse {
  const out: ExportLogsResponse = {};
  fields(b, 0, b.length, (field, wire, _v, s, e) => {
    if (field !== RESPONSE_PARTIAL_SUCCESS || wire !== LEN) return;
    const partial: NonNullable<ExportLogsResponse['partialSuccess']> = (out.partialSuccess ??= {});
    fields(b, s, e, (f, w, v, cs, ce) => {
      if (f === PARTIAL_SUCCESS_REJECTED_LOG_RECORDS && w === VARINT) partial.rejectedLogRecords = v;
      else if (f === PARTIAL_SUCCESS_ERROR_MESSAGE && w === LEN) partial.errorMessage = Buffer.from(b.buffer, b.byteOffset + cs, ce - cs).toString('utf8');
    });
  });
  return out;
}
