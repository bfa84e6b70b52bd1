// The OTLP logs messages on the wire: their field tags, and a size/put pair
// per message the encoder writes (sizeX says how many bytes putX writes).
// Field numbers are opentelemetry-proto's (collector/logs/v1, logs/v1,
// common/v1, resource/v1); sidecar/test/otlp-encoder.test.ts decodes the
// output with them and compares it with the OpenTelemetry serializer's,
// field by field.
import { OTLP_ATTRIBUTES as A, SHAPED_FIELDS } from '../../src/contract/record.ts';
import type { FieldValue, Fields } from '../records/record.ts';
import { decimalDigits, putUint } from './body.ts';
import { I64, LEN, NEGATIVE_INT64_SIZE, VARINT, lenFieldSize, putBytes, putFixed64, putLenHead, putNegativeInt64, putText, putVarint, tag, utf8Length, varintSize } from './protobuf.ts';

// ExportLogsServiceRequest
const EXPORT_LOGS_SERVICE_REQUEST_RESOURCE_LOGS = tag(1, LEN);
// ResourceLogs, Resource
const RESOURCE_LOGS_RESOURCE = tag(1, LEN);
const RESOURCE_LOGS_SCOPE_LOGS = tag(2, LEN);
const RESOURCE_ATTRIBUTES = tag(1, LEN);
// ScopeLogs, InstrumentationScope
const SCOPE_LOGS_SCOPE = tag(1, LEN);
const SCOPE_LOGS_LOG_RECORDS = tag(2, LEN);
const INSTRUMENTATION_SCOPE_NAME = tag(1, LEN);
const INSTRUMENTATION_SCOPE_VERSION = tag(2, LEN);
// LogRecord
const LOG_RECORD_TIME_UNIX_NANO = tag(1, I64);
const LOG_RECORD_SEVERITY_NUMBER = tag(2, VARINT);
const LOG_RECORD_SEVERITY_TEXT = tag(3, LEN);
const LOG_RECORD_BODY = tag(5, LEN);
const LOG_RECORD_ATTRIBUTES = tag(6, LEN);
const LOG_RECORD_OBSERVED_TIME_UNIX_NANO = tag(11, I64);
// AnyValue and its containers
export const ANY_VALUE_STRING_VALUE = tag(1, LEN);
export const ANY_VALUE_BOOL_VALUE = tag(2, VARINT);
const ANY_VALUE_INT_VALUE = tag(3, VARINT);
const ANY_VALUE_DOUBLE_VALUE = tag(4, I64);
export const ANY_VALUE_ARRAY_VALUE = tag(5, LEN);
export const ANY_VALUE_KVLIST_VALUE = tag(6, LEN);
export const ARRAY_VALUE_VALUES = tag(1, LEN);
export const KEY_VALUE_LIST_VALUES = tag(1, LEN);
export const KEY_VALUE_KEY = tag(1, LEN);
export const KEY_VALUE_VALUE = tag(2, LEN);

/** A fixed64 field: its tag and 8 bytes. */
const FIXED64_FIELD_SIZE = 9;
/** A bool_value: its tag and one byte. */
const BOOL_VALUE_SIZE = 2;
/** A double_value: its tag and 8 bytes. */
const DOUBLE_VALUE_SIZE = 9;

// AnyValue -------------------------------------------------------------------

/** The AnyValue of a number: int_value for safe integers (negative ones as int64 writes them), double_value otherwise. */
function sizeNumberValue(v: number): number {
  return Number.isSafeInteger(v) ? (v >= 0 ? 1 + varintSize(v) : 1 + NEGATIVE_INT64_SIZE) : DOUBLE_VALUE_SIZE;
}

export function putNumberValue(buf: Buffer, o: number, v: number): number {
  if (Number.isSafeInteger(v)) {
    buf[o++] = ANY_VALUE_INT_VALUE;
    return v >= 0 ? putVarint(buf, o, v) : putNegativeInt64(buf, o, v);
  }
  buf[o++] = ANY_VALUE_DOUBLE_VALUE;
  buf.writeDoubleLE(v, o);
  return o + 8;
}

/**
 * The bytes of a field value's AnyValue (objects become kvlists and arrays
 * array values, as the OpenTelemetry serializer makes them; null is the empty
 * AnyValue), pushing onto `sizes`, in the order putAnyValue() reads them,
 * every length it will need: a string's UTF-8 length; a list's length, then
 * per element its AnyValue's; a map's length, then per entry its KeyValue's,
 * its key's and its value's.
 */
export function sizeAnyValue(v: FieldValue, sizes: number[]): number {
  if (v === null) return 0;
  if (typeof v === 'string') {
    const n = utf8Length(v);
    sizes.push(n);
    return lenFieldSize(n);
  }
  if (typeof v === 'boolean') return BOOL_VALUE_SIZE;
  if (typeof v === 'number') return sizeNumberValue(v);
  const at = sizes.length;
  sizes.push(0);
  let list = 0;
  if (Array.isArray(v)) {
    for (const x of v as readonly FieldValue[]) {
      const slot = sizes.length;
      sizes.push(0);
      const a = sizeAnyValue(x, sizes);
      sizes[slot] = a;
      list += lenFieldSize(a);
    }
  } else {
    const o = v as Fields;
    for (const k of Object.keys(o)) {
      const slot = sizes.length;
      sizes.push(0, 0, 0);
      const kn = utf8Length(k);
      const a = sizeAnyValue(o[k]!, sizes);
      const kv = lenFieldSize(kn) + lenFieldSize(a);
      sizes[slot] = kv;
      sizes[slot + 1] = kn;
      sizes[slot + 2] = a;
      list += lenFieldSize(kv);
    }
  }
  sizes[at] = list;
  return lenFieldSize(list);
}

/** Where putAnyValue reads the next of its sizes. */
interface SizeCursor {
  at: number;
}

/** Writes the AnyValue of `v` with the lengths sizeAnyValue() pushed, from `c.at` on. */
export function putAnyValue(buf: Buffer, o: number, v: FieldValue, sizes: readonly number[], c: SizeCursor): number {
  if (v === null) return o;
  if (typeof v === 'string') {
    const n = sizes[c.at++]!;
    o = putLenHead(buf, o, ANY_VALUE_STRING_VALUE, n);
    return putText(buf, o, v, n);
  }
  if (typeof v === 'boolean') {
    buf[o++] = ANY_VALUE_BOOL_VALUE;
    buf[o++] = v ? 1 : 0;
    return o;
  }
  if (typeof v === 'number') return putNumberValue(buf, o, v);
  const list = sizes[c.at++]!;
  if (Array.isArray(v)) {
    o = putLenHead(buf, o, ANY_VALUE_ARRAY_VALUE, list);
    for (const x of v as readonly FieldValue[]) {
      o = putLenHead(buf, o, ARRAY_VALUE_VALUES, sizes[c.at++]!);
      o = putAnyValue(buf, o, x, sizes, c);
    }
    return o;
  }
  const fields = v as Fields;
  o = putLenHead(buf, o, ANY_VALUE_KVLIST_VALUE, list);
  for (const k of Object.keys(fields)) {
    const kv = sizes[c.at++]!;
    const kn = sizes[c.at++]!;
    const a = sizes[c.at++]!;
    o = putLenHead(buf, o, KEY_VALUE_LIST_VALUES, kv);
    o = putLenHead(buf, o, KEY_VALUE_KEY, kn);
    o = putText(buf, o, k, kn);
    o = putLenHead(buf, o, KEY_VALUE_VALUE, a);
    o = putAnyValue(buf, o, fields[k]!, sizes, c);
  }
  return o;
}

// KeyValue -------------------------------------------------------------------

/** A KeyValue's key field, encoded once: written in front of a value whose length varies. */
function keyField(key: string): Buffer {
  const n = utf8Length(key);
  const buf = Buffer.alloc(lenFieldSize(n));
  putText(buf, putLenHead(buf, 0, KEY_VALUE_KEY, n), key, n);
  return buf;
}

/** A KeyValue of the key `key` (keyField) and a value of `value` bytes. */
function sizeKeyValue(key: Buffer, value: number): number {
  return key.length + lenFieldSize(value);
}

/** A KeyValue up to its value, whose `value` bytes the caller writes next. */
function putKeyValueHead(buf: Buffer, o: number, key: Buffer, value: number): number {
  o = putBytes(buf, o, key);
  return putLenHead(buf, o, KEY_VALUE_VALUE, value);
}

/** A field `t` holding the KeyValue of `key` and a scalar value, built once (per file, stream or flag), not per record. */
function keyValueField(t: number, key: string, value: string | number | boolean): Buffer {
  const sizes: number[] = [];
  const k = keyField(key);
  const a = sizeAnyValue(value, sizes);
  const kv = sizeKeyValue(k, a);
  const buf = Buffer.alloc(lenFieldSize(kv));
  const o = putAnyValue(buf, putKeyValueHead(buf, putLenHead(buf, 0, t, kv), k, a), value, sizes, { at: 0 });
  return sized(buf, o);
}

function sized(buf: Buffer, o: number): Buffer {
  if (o !== buf.length) throw new Error(`OTLP message written as ${o} bytes, sized as ${buf.length}`);
  return buf;
}

// Resource, InstrumentationScope, ResourceLogs ---------------------------------

/** ResourceLogs.resource, its tag and length included, with these attributes. */
export function resourceField(attributes: Readonly<Record<string, string | number>>): Buffer {
  const attrs = Object.entries(attributes).map(([k, v]) => keyValueField(RESOURCE_ATTRIBUTES, k, v));
  const content = attrs.reduce((n, a) => n + a.length, 0);
  const buf = Buffer.alloc(lenFieldSize(content));
  let o = putLenHead(buf, 0, RESOURCE_LOGS_RESOURCE, content);
  for (const a of attrs) o = putBytes(buf, o, a);
  return sized(buf, o);
}

/** ScopeLogs.scope, its tag and length included. */
export function scopeField(name: string, version: string): Buffer {
  const n = utf8Length(name);
  const v = utf8Length(version);
  const content = lenFieldSize(n) + lenFieldSize(v);
  const buf = Buffer.alloc(lenFieldSize(content));
  let o = putLenHead(buf, 0, SCOPE_LOGS_SCOPE, content);
  o = putText(buf, putLenHead(buf, o, INSTRUMENTATION_SCOPE_NAME, n), name, n);
  o = putText(buf, putLenHead(buf, o, INSTRUMENTATION_SCOPE_VERSION, v), version, v);
  return sized(buf, o);
}

/** The most putResourceLogsHead writes: the lengths' varints at their longest (5 bytes reach 2^35). */
export function resourceLogsHeadRoom(resource: Buffer, scope: Buffer): number {
  return 1 + 5 + resource.length + 1 + 5 + scope.length;
}

/**
 * An ExportLogsServiceRequest's resource_logs up to its log records: the
 * tag and length of the ResourceLogs, its resource, the tag and length of
 * its one ScopeLogs and its scope. `records`: the bytes of the log records
 * that follow.
 */
export function putResourceLogsHead(buf: Buffer, o: number, resource: Buffer, scope: Buffer, records: number): number {
  const scopeLogs = scope.length + records;
  o = putLenHead(buf, o, EXPORT_LOGS_SERVICE_REQUEST_RESOURCE_LOGS, resource.length + lenFieldSize(scopeLogs));
  o = putBytes(buf, o, resource);
  o = putLenHead(buf, o, RESOURCE_LOGS_SCOPE_LOGS, scopeLogs);
  return putBytes(buf, o, scope);
}

// LogRecord --------------------------------------------------------------------

const UID_KEY = keyField(A.id);
const ORIGINAL_KEY = keyField(SHAPED_FIELDS.otlp.original);
const LINES_KEY = keyField(SHAPED_FIELDS.otlp.lines);
const EMPTY = Buffer.alloc(0);

/** A LogRecord attribute of a scalar value, tag and length included (a stream's, a flag's). */
export function attributeField(key: string, value: string | number | boolean): Buffer {
  return keyValueField(LOG_RECORD_ATTRIBUTES, key, value);
}

/**
 * One LogRecord as the encoder fills it in (one frame, reused record after
 * record): sizeLogRecord() measures it once, and the writers read what it
 * measured. The layout: the head (tag, length, time, severity, the body's tag
 * and length), the body's AnyValue (the caller's: a string, a map, a value
 * written already), the tail (attributes, observed time).
 */
export class LogRecordFrame {
  timeLo = 0;
  timeHi = 0;
  observedLo = 0;
  observedHi = 0;
  /** severity_number, 0: no severity (then no severity_text either). */
  severityNumber = 0;
  severityText = '';
  /** The AnyValue bytes of the body. */
  body = 0;
  /** The message: bytes [at, end) of `src` when set, else `text`; `bytes` long in UTF-8. */
  src: Buffer | undefined = undefined;
  at = 0;
  end = 0;
  text = '';
  bytes = 0;
  /** log.record.uid: the file's prefix, then the offset in decimal. */
  idPrefix: Buffer = EMPTY;
  offset = 0;
  /** The stream's and the flags' attributes (attributeField), or nothing. */
  stream: Buffer = EMPTY;
  flags: Buffer = EMPTY;
  /** log.record.original: the message as written, beside a map body. */
  original = false;
  /** log.record.lines: how many lines a joined record holds; 0 or 1: none. */
  lines = 0;
  // What sizeLogRecord measured.
  length = 0;
  severityBytes = 0;
  digits = 0;
  uidString = 0;
  uidKeyValue = 0;
  originalKeyValue = 0;
  linesKeyValue = 0;
  tail = 0;

  /** The message is bytes [at, end) of src, valid UTF-8. */
  messageBytes(src: Buffer, at: number, end: number): void {
    this.src = src;
    this.at = at;
    this.end = end;
    this.bytes = end - at;
  }

  /** The message is a string. */
  messageText(text: string): void {
    this.src = undefined;
    this.text = text;
    this.bytes = Buffer.byteLength(text, 'utf8');
  }
}

/** The bytes of the frame's LogRecord (ScopeLogs.log_records, tag and length included); fills in its lengths for the writers. */
export function sizeLogRecord(f: LogRecordFrame): number {
  f.digits = decimalDigits(f.offset);
  f.uidString = f.idPrefix.length + f.digits;
  f.uidKeyValue = sizeKeyValue(UID_KEY, lenFieldSize(f.uidString));
  let tail = lenFieldSize(f.uidKeyValue) + f.stream.length + f.flags.length + FIXED64_FIELD_SIZE;
  if (f.original) {
    f.originalKeyValue = sizeKeyValue(ORIGINAL_KEY, sizeMessageValue(f));
    tail += lenFieldSize(f.originalKeyValue);
  }
  if (f.lines > 1) {
    f.linesKeyValue = sizeKeyValue(LINES_KEY, 1 + varintSize(f.lines));
    tail += lenFieldSize(f.linesKeyValue);
  }
  let severity = 0;
  if (f.severityNumber > 0) {
    f.severityBytes = utf8Length(f.severityText);
    severity = 1 + varintSize(f.severityNumber) + lenFieldSize(f.severityBytes);
  }
  f.tail = tail;
  f.length = FIXED64_FIELD_SIZE + severity + lenFieldSize(f.body) + tail;
  return lenFieldSize(f.length);
}

/** The bytes putLogRecordHead writes (after sizeLogRecord). */
export function logRecordHeadSize(f: LogRecordFrame): number {
  return lenFieldSize(f.length) - f.body - f.tail;
}

/** The head: up to the body's AnyValue, which the caller writes next. */
export function putLogRecordHead(buf: Buffer, o: number, f: LogRecordFrame): number {
  o = putLenHead(buf, o, SCOPE_LOGS_LOG_RECORDS, f.length);
  buf[o++] = LOG_RECORD_TIME_UNIX_NANO;
  o = putFixed64(buf, o, f.timeLo, f.timeHi);
  if (f.severityNumber > 0) {
    buf[o++] = LOG_RECORD_SEVERITY_NUMBER;
    o = putVarint(buf, o, f.severityNumber);
    o = putLenHead(buf, o, LOG_RECORD_SEVERITY_TEXT, f.severityBytes);
    o = putText(buf, o, f.severityText, f.severityBytes);
  }
  return putLenHead(buf, o, LOG_RECORD_BODY, f.body);
}

/** The message's string_value: a plain record's body, a map body's log.record.original. */
export function sizeMessageValue(f: LogRecordFrame): number {
  return lenFieldSize(f.bytes);
}

export function putMessageValue(buf: Buffer, o: number, f: LogRecordFrame): number {
  o = putLenHead(buf, o, ANY_VALUE_STRING_VALUE, f.bytes);
  return f.src ? o + f.src.copy(buf, o, f.at, f.end) : o + buf.write(f.text, o, f.bytes, 'utf8');
}

/** The tail: every attribute, then the observed time (f.tail bytes). */
export function putLogRecordTail(buf: Buffer, o: number, f: LogRecordFrame): number {
  o = putLenHead(buf, o, LOG_RECORD_ATTRIBUTES, f.uidKeyValue);
  o = putKeyValueHead(buf, o, UID_KEY, lenFieldSize(f.uidString));
  o = putLenHead(buf, o, ANY_VALUE_STRING_VALUE, f.uidString);
  o = putBytes(buf, o, f.idPrefix);
  o = putUint(buf, o, f.offset, f.digits);
  if (f.stream.length > 0) o = putBytes(buf, o, f.stream);
  if (f.flags.length > 0) o = putBytes(buf, o, f.flags);
  if (f.original) {
    o = putLenHead(buf, o, LOG_RECORD_ATTRIBUTES, f.originalKeyValue);
    o = putKeyValueHead(buf, o, ORIGINAL_KEY, sizeMessageValue(f));
    o = putMessageValue(buf, o, f);
  }
  if (f.lines > 1) {
    o = putLenHead(buf, o, LOG_RECORD_ATTRIBUTES, f.linesKeyValue);
    o = putKeyValueHead(buf, o, LINES_KEY, 1 + varintSize(f.lines));
    buf[o++] = ANY_VALUE_INT_VALUE;
    o = putVarint(buf, o, f.lines);
  }
  buf[o++] = LOG_RECORD_OBSERVED_TIME_UNIX_NANO;
  return putFixed64(buf, o, f.observedLo, f.observedHi);
}
