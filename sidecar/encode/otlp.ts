// OTLP/HTTP protobuf (ExportLogsServiceRequest) written straight into a
// request body, the way DocumentEncoder writes NDJSON. The generic
// serializers need an SDK record object, a resource map and a size-estimating
// pass per line; here the shape is fixed, so per-file parts (resource, scope,
// the id's prefix) are encoded once and a record costs its timestamp, one
// copy of its message bytes and a few length prefixes. A record the shaping
// stage touched (JSON fields, a joined record) is the exception and is built
// as a message of its own, its body a map.
//
// Field numbers are opentelemetry-proto's (logs/v1, common/v1,
// resource/v1); sidecar/test/otlp-encoder.test.ts decodes the output with
// them and compares it with the OpenTelemetry serializer's, field by field.
import { OTLP_ATTRIBUTES as A, OTLP_RESOURCE as R, SHAPED_FIELDS, serviceNameOf } from '../../src/contract/record.ts';
import type { Identity } from '../config.ts';
import { CriRecord, FLAG_INCOMPLETE, FLAG_MALFORMED, FLAG_TRUNCATED, type FieldValue, type Fields, type FileMeta, type LogRecord, type Stream } from '../records/record.ts';
import { nowTime, parseTimestamp, type EpochTime } from '../records/timestamp.ts';
import { keepsOriginal, PreparedJsonRecord, ShapedRecord } from '../records/shaped.ts';
import { utf8Valid } from '../records/utf8.ts';
import { BodyBuilder, decimalDigits, putFixed64, putUint, putVarint } from './body.ts';
import { metadataFields } from './document.ts';
import { T_ARRAY, T_BOOL, T_DOUBLE, T_INT, T_KEY, T_KVLIST, T_STRING, T_VALUE, T_VALUES, numberSize, varintSize, writeJson, writeNumber } from './json-anyvalue.ts';
import { SEVERITY_KEY_BYTES, severityFound, severityOf, type Severity } from './severity.ts';

export { severityOf };

// Wire types: 0 varint, 1 fixed64, 2 length-delimited.
const tag = (field: number, wire: number) => (field << 3) | wire;
const T_RESOURCE_LOGS = tag(1, 2); // ExportLogsServiceRequest.resource_logs
const T_RESOURCE = tag(1, 2); // ResourceLogs.resource
const T_SCOPE_LOGS = tag(2, 2); // ResourceLogs.scope_logs
const T_SCOPE = tag(1, 2); // ScopeLogs.scope
const T_LOG_RECORD = tag(2, 2); // ScopeLogs.log_records
const T_TIME = tag(1, 1); // LogRecord.time_unix_nano
const T_BODY = tag(5, 2); // LogRecord.body
const T_ATTRIBUTE = tag(6, 2); // LogRecord.attributes, Resource.attributes (1)
const T_OBSERVED = tag(11, 1); // LogRecord.observed_time_unix_nano
const T_RES_ATTRIBUTE = tag(1, 2); // Resource.attributes
const T_SEVERITY_NUMBER = tag(2, 0); // LogRecord.severity_number
const T_SEVERITY_TEXT = tag(3, 2); // LogRecord.severity_text

const UID_KEY = A.id;
const S = SHAPED_FIELDS.otlp;
const TWO_32 = 2 ** 32;
const TWO_16 = 2 ** 16;

export { varintSize };

/**
 * A small protobuf message built once (per file, stream or flag), not per
 * record; and a shaped record's, whose message and fields are copied in as
 * whole buffers rather than byte by byte.
 */
class Bytes {
  private readonly chunks: Buffer[] = [];
  private parts: number[] = [];
  byte(b: number): this {
    this.parts.push(b);
    return this;
  }
  varint(v: number): this {
    while (v > 0x7f) {
      this.parts.push((v % 128) | 0x80);
      v = Math.floor(v / 128);
    }
    this.parts.push(v);
    return this;
  }
  /** A negative int64 as protobuf writes it: ten bytes of two's complement. */
  varint64(v: bigint): this {
    let u = BigInt.asUintN(64, v);
    while (u > 0x7fn) {
      this.parts.push(Number(u & 0x7fn) | 0x80);
      u >>= 7n;
    }
    this.parts.push(Number(u));
    return this;
  }
  fixed64(lo: number, hi: number): this {
    for (let i = 0; i < 32; i += 8) this.parts.push((lo >>> i) & 0xff);
    for (let i = 0; i < 32; i += 8) this.parts.push((hi >>> i) & 0xff);
    return this;
  }
  raw(b: Uint8Array): this {
    if (b.length < 64) for (const x of b) this.parts.push(x);
    else {
      this.flush();
      this.chunks.push(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
    }
    return this;
  }
  /** A length-delimited field. */
  field(t: number, content: Uint8Array): this {
    return this.byte(t).varint(content.length).raw(content);
  }
  string(t: number, s: string): this {
    return this.field(t, Buffer.from(s, 'utf8'));
  }
  private flush(): void {
    if (this.parts.length === 0) return;
    this.chunks.push(Buffer.from(this.parts));
    this.parts = [];
  }
  done(): Buffer {
    this.flush();
    return this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
  }
}

/**
 * The rest of OpenTelemetry's Kubernetes resource set, beside the fields
 * every format carries: the Job's uid, the owning CronJob's name and uid when
 * there is one, and service.name by OpenTelemetry's fallback (serviceNameOf).
 */
export function resourceFields(identity: Identity): Record<string, string> {
  const out: Record<string, string> = {};
  if (identity.jobUid) out[R.jobUid] = identity.jobUid;
  if (identity.cronJob) {
    out[R.cronJobName] = identity.cronJob.name;
    if (identity.cronJob.uid) out[R.cronJobUid] = identity.cronJob.uid;
  }
  out[R.serviceName] = serviceNameOf({ named: identity.serviceName, cronJob: identity.cronJob?.name, job: identity.job, pod: identity.pod });
  return out;
}

function anyValue(v: string | number | boolean): Buffer {
  if (typeof v === 'string') return new Bytes().string(T_STRING, v).done();
  if (typeof v === 'boolean') return new Bytes().byte(T_BOOL).varint(v ? 1 : 0).done();
  // Attributes here are counts (restart_count), the int_value the SDK uses for integers.
  return new Bytes().byte(T_INT).varint(v).done();
}

function keyValue(key: string, v: string | number | boolean): Buffer {
  return new Bytes().string(T_KEY, key).field(T_VALUE, anyValue(v)).done();
}

/**
 * A parsed JSON value as an AnyValue: objects become kvlists and arrays
 * array values, as the OpenTelemetry serializer (the JSON encoding) makes
 * them, so both encodings carry the same body. null is the empty AnyValue.
 */
export function fieldValue(v: FieldValue): Buffer {
  if (v === null) return Buffer.alloc(0);
  if (typeof v === 'string') return new Bytes().string(T_STRING, v).done();
  if (typeof v === 'boolean') return new Bytes().byte(T_BOOL).varint(v ? 1 : 0).done();
  if (typeof v === 'number') {
    if (Number.isSafeInteger(v)) return v >= 0 ? new Bytes().byte(T_INT).varint(v).done() : new Bytes().byte(T_INT).varint64(BigInt(v)).done();
    const d = Buffer.alloc(9);
    d[0] = T_DOUBLE;
    d.writeDoubleLE(v, 1);
    return d;
  }
  if (Array.isArray(v)) {
    const list = new Bytes();
    for (const x of v as readonly FieldValue[]) list.field(T_VALUES, fieldValue(x));
    return new Bytes().field(T_ARRAY, list.done()).done();
  }
  return new Bytes().field(T_KVLIST, keyValueList(v as Fields)).done();
}

function keyValueList(fields: Fields): Buffer {
  const list = new Bytes();
  for (const [k, x] of Object.entries(fields)) list.field(T_VALUES, new Bytes().string(T_KEY, k).field(T_VALUE, fieldValue(x)).done());
  return list.done();
}

const ORIGINAL_KEY = S.original;
const LINES_KEY = S.lines;

/** log.record.uid's key, as the KeyValue holds it: the bytes between its length and the value's. */
const UID_HEAD = Buffer.from([T_KEY, UID_KEY.length, ...Buffer.from(UID_KEY, 'latin1'), T_VALUE]);

/** Pre-encoded bytes: a loop for the short ones (attribute heads), one native copy for the rest. */
function putBytes(buf: Buffer, o: number, b: Buffer): number {
  const n = b.length;
  if (n >= 32) return o + b.copy(buf, o);
  for (let i = 0; i < n; i++) buf[o++] = b[i]!;
  return o;
}

/**
 * A record's attributes that every record has (log.record.uid, its stream,
 * its flags), written into bytes the caller claimed: per record, one bounds
 * check rather than one per field. The lengths are the caller's (they are
 * part of the record's).
 */
function putAttributes(buf: Buffer, o: number, idPrefix: Buffer, offset: number, digits: number, kv: number, any: number, len: number, stream: Buffer, flags: Buffer): number {
  buf[o++] = T_ATTRIBUTE;
  o = putVarint(buf, o, kv);
  o = putBytes(buf, o, UID_HEAD);
  o = putVarint(buf, o, any);
  buf[o++] = T_STRING;
  o = putVarint(buf, o, len);
  o = putBytes(buf, o, idPrefix);
  o = putUint(buf, o, offset, digits);
  if (stream.length) o = putBytes(buf, o, stream);
  if (flags.length) o = putBytes(buf, o, flags);
  return o;
}

/** The length putAttributes writes. */
function attributesSize(uidKv: number, stream: Buffer, flags: Buffer): number {
  return 1 + varintSize(uidKv) + uidKv + stream.length + flags.length;
}

/**
 * UTF-8 length of a field's string. Keys and most values are short ASCII:
 * a loop over them costs less than a call into the encoder, which runs once
 * per string of every JSON line; a negative answer means "not short ASCII".
 */
function shortAsciiLength(v: string): number {
  const n = v.length;
  if (n > 48) return -1;
  for (let i = 0; i < n; i++) if (v.charCodeAt(i) > 0x7f) return -1;
  return n;
}

function utf8Length(v: string): number {
  const n = shortAsciiLength(v);
  return n >= 0 ? n : Buffer.byteLength(v, 'utf8');
}

/** Writes a string measured with utf8Length(). */
function writeText(body: BodyBuilder, v: string, n: number): void {
  if (n === v.length && n <= 48) body.ascii(v);
  else body.utf8(v, n);
}

/**
 * The length of a field value's AnyValue, pushing onto `out`, in the order
 * writeValue() reads them, every length it will need: a string's UTF-8
 * length; a list's length, then per element its AnyValue's; a map's length,
 * then per entry its KeyValue's, its key's and its value's.
 */
function measure(v: FieldValue, out: number[]): number {
  if (v === null) return 0;
  if (typeof v === 'string') {
    const n = utf8Length(v);
    out.push(n);
    return 1 + varintSize(n) + n;
  }
  if (typeof v === 'boolean') return 2;
  if (typeof v === 'number') return numberSize(v);
  const at = out.length;
  out.push(0);
  let list = 0;
  if (Array.isArray(v)) {
    for (const x of v as readonly FieldValue[]) {
      const slot = out.length;
      out.push(0);
      const a = measure(x, out);
      out[slot] = a;
      list += 1 + varintSize(a) + a;
    }
  } else {
    const o = v as Fields;
    for (const k of Object.keys(o)) {
      const slot = out.length;
      out.push(0, 0, 0);
      const kn = utf8Length(k);
      const a = measure(o[k]!, out);
      const kv = 1 + varintSize(kn) + kn + 1 + varintSize(a) + a;
      out[slot] = kv;
      out[slot + 1] = kn;
      out[slot + 2] = a;
      list += 1 + varintSize(kv) + kv;
    }
  }
  out[at] = list;
  return 1 + varintSize(list) + list;
}

/** Writes the AnyValue content of `v` with the lengths measure() pushed, from `c.at` on. */
function writeValue(body: BodyBuilder, v: FieldValue, sizes: readonly number[], c: { at: number }): void {
  if (v === null) return;
  if (typeof v === 'string') {
    const n = sizes[c.at++]!;
    body.byte(T_STRING);
    body.varint(n);
    writeText(body, v, n);
    return;
  }
  if (typeof v === 'boolean') {
    body.byte(T_BOOL);
    body.byte(v ? 1 : 0);
    return;
  }
  if (typeof v === 'number') {
    writeNumber(body, v);
    return;
  }
  const list = sizes[c.at++]!;
  if (Array.isArray(v)) {
    body.byte(T_ARRAY);
    body.varint(list);
    for (const x of v as readonly FieldValue[]) {
      body.byte(T_VALUES);
      body.varint(sizes[c.at++]!);
      writeValue(body, x, sizes, c);
    }
    return;
  }
  const o = v as Fields;
  body.byte(T_KVLIST);
  body.varint(list);
  for (const k of Object.keys(o)) {
    const kv = sizes[c.at++]!;
    const kn = sizes[c.at++]!;
    const a = sizes[c.at++]!;
    body.byte(T_VALUES);
    body.varint(kv);
    body.byte(T_KEY);
    body.varint(kn);
    writeText(body, k, kn);
    body.byte(T_VALUE);
    body.varint(a);
    writeValue(body, o[k]!, sizes, c);
  }
}

/** A LogRecord attribute, tag and length included. */
function attribute(key: string, v: string | number | boolean): Buffer {
  return new Bytes().field(T_ATTRIBUTE, keyValue(key, v)).done();
}

const STREAM_ATTRIBUTE: Record<Stream, Buffer> = {
  stdout: attribute(A.stream, 'stdout'),
  stderr: attribute(A.stream, 'stderr'),
  unknown: Buffer.alloc(0),
};

/** Flag attributes for each combination of the three flags, in the order the JSON documents use. */
const FLAG_ATTRIBUTES: Buffer[] = [];
for (let f = 0; f < 8; f++) {
  const parts: Buffer[] = [];
  if (f & FLAG_TRUNCATED) parts.push(attribute(A.truncated, true));
  if (f & FLAG_MALFORMED) parts.push(attribute(A.malformed, true));
  if (f & FLAG_INCOMPLETE) parts.push(attribute(A.incomplete, true));
  FLAG_ATTRIBUTES.push(Buffer.concat(parts));
}

/** What one container run (resource) and one file contribute to every request. */
interface FileParts {
  /** ResourceLogs.resource and, inside scope_logs, ScopeLogs.scope, both with tag and length. */
  resource: Buffer;
  scope: Buffer;
  /** The string value of log.record.uid up to its offset digits. */
  idPrefix: Buffer;
  /** Grouping key: records of one container run share a resource. */
  key: string;
}

/** Encodes records as one ExportLogsServiceRequest per batch. */
export class OtlpEncoder {
  private readonly resources = new Map<string, Buffer>();
  private readonly files = new WeakMap<FileMeta, FileParts>();
  private readonly scope: Buffer;
  private lastFile: FileMeta | undefined;
  private lastParts: FileParts | undefined;
  // The last timestamp's seconds, by the bytes they were parsed from.
  private readonly lastKey = Buffer.alloc(40);
  private lastKeyLen = 0;
  /** lo/hi of the last key's second in nanoseconds. */
  private secLo = 0;
  private secHi = 0;
  private lo = 0;
  private hi = 0;
  /** Scratch for shapedRecord's lengths, reused from record to record. */
  private readonly sizes: number[] = [];
  /** Scratch for the head of a record whose body was written first. */
  private readonly head = new BodyBuilder(256);

  constructor(
    private readonly identity: Identity,
    scopeName: string,
    scopeVersion: string,
  ) {
    this.scope = new Bytes().field(T_SCOPE, new Bytes().string(T_KEY, scopeName).string(T_VALUE, scopeVersion).done()).done();
  }

  private partsOf(file: FileMeta): FileParts {
    let p = this.files.get(file);
    if (p) return p;
    const key = `${file.container}\0${file.restart}`;
    let resource = this.resources.get(key);
    if (!resource) {
      const attrs = new Bytes();
      for (const [k, v] of Object.entries(metadataFields(this.identity, file))) attrs.field(T_RES_ATTRIBUTE, keyValue(k, v));
      for (const [k, v] of Object.entries(resourceFields(this.identity))) attrs.field(T_RES_ATTRIBUTE, keyValue(k, v));
      resource = new Bytes().field(T_RESOURCE, attrs.done()).done();
      this.resources.set(key, resource);
    }
    p = { resource, scope: this.scope, idPrefix: Buffer.from(file.idPrefix, 'utf8'), key };
    this.files.set(file, p);
    return p;
  }

  /** The request body for `records`; `observed` is the time they were read, the same for the batch. */
  request(records: readonly LogRecord[], observed: EpochTime = nowTime(), sizeHint = 0): Buffer {
    const body = new BodyBuilder(sizeHint || records.length * 320);
    this.time(observed.sec, observed.nanos);
    const obsLo = this.lo;
    const obsHi = this.hi;
    let i = 0;
    while (i < records.length) {
      const parts = this.partsOf(records[i]!.file);
      // Room for the longest headers; closed up once the group's length is known.
      const reserved = 1 + 5 + parts.resource.length + 1 + 5 + parts.scope.length;
      const at = body.reserve(reserved);
      const start = body.length;
      do {
        this.record(body, records[i]!, obsLo, obsHi, observed);
        i++;
      } while (i < records.length && (records[i]!.file === records[i - 1]!.file || this.partsOf(records[i]!.file).key === parts.key));
      const content = body.length - start;
      const scopeLogs = parts.scope.length + content;
      const resourceLogs = parts.resource.length + 1 + varintSize(scopeLogs) + scopeLogs;
      const head = new Bytes().byte(T_RESOURCE_LOGS).varint(resourceLogs).raw(parts.resource).byte(T_SCOPE_LOGS).varint(scopeLogs).raw(parts.scope).done();
      body.header(at, reserved, head);
    }
    return body.finish();
  }

  private record(body: BodyBuilder, r: LogRecord, obsLo: number, obsHi: number, observed: EpochTime): void {
    if (r.file !== this.lastFile) {
      this.lastFile = r.file;
      this.lastParts = this.partsOf(r.file);
    }
    const p = this.lastParts!;
    // A ShapedRecord's fields are parsed when asked for: its `json` says whether it has any.
    if (r.lines !== undefined || (r instanceof ShapedRecord ? r.json !== undefined : r.fields !== undefined)) return this.shapedRecord(body, r, obsLo, obsHi, observed);
    // The message: the bytes as read when they are valid UTF-8 (protobuf strings must be), else the decoded string, whose invalid sequences became U+FFFD.
    let src: Buffer | undefined;
    let s = 0;
    let e = 0;
    let text = '';
    let n: number;
    // A shaped record's origin is the line whose bytes are its message (a record whose checkpoint had to be held back).
    const cri = r instanceof CriRecord ? r : r instanceof ShapedRecord ? r.origin : undefined;
    if (cri && utf8Valid(cri.src, cri.msgAt, cri.msgEnd)) {
      src = cri.src;
      s = cri.msgAt;
      e = cri.msgEnd;
      n = e - s;
    } else {
      text = r.message;
      n = Buffer.byteLength(text, 'utf8');
    }
    if (!(cri && this.timeOfBytes(cri.src, cri.tsAt, cri.tsEnd))) {
      const t = parseTimestamp(r.ts) ?? observed;
      this.time(t.sec, t.nanos);
    }
    const anyLen = 1 + varintSize(n) + n;
    const digits = decimalDigits(r.offset);
    const uidLen = p.idPrefix.length + digits;
    const uidAny = 1 + varintSize(uidLen) + uidLen;
    const uidKv = 1 + 1 + UID_KEY.length + 1 + varintSize(uidAny) + uidAny;
    const stream = STREAM_ATTRIBUTE[r.stream];
    const flags = FLAG_ATTRIBUTES[r.flags & 7]!;
    const len = 9 + 1 + varintSize(anyLen) + anyLen + attributesSize(uidKv, stream, flags) + 9;
    // Every length is known: the record is claimed whole and written straight into the buffer.
    const at = body.claim(1 + varintSize(len) + len);
    const buf = body.buffer;
    let o = at;
    buf[o++] = T_LOG_RECORD;
    o = putVarint(buf, o, len);
    buf[o++] = T_TIME;
    o = putFixed64(buf, o, this.lo, this.hi);
    buf[o++] = T_BODY;
    o = putVarint(buf, o, anyLen);
    buf[o++] = T_STRING;
    o = putVarint(buf, o, n);
    o += src ? src.copy(buf, o, s, e) : buf.write(text, o, n, 'utf8');
    o = putAttributes(buf, o, p.idPrefix, r.offset, digits, uidKv, uidAny, uidLen, stream, flags);
    buf[o++] = T_OBSERVED;
    o = putFixed64(buf, o, obsLo, obsHi);
    if (o !== body.length) throw new Error(`OTLP record written as ${o - at} bytes, sized as ${body.length - at}`);
  }

  /**
   * A record the shaping stage touched: the body is the fields' map (the
   * line as written also in log.record.original when the map does not hold
   * every value of it exactly, so nothing is lost) and the
   * severity comes from a level field. Built as a message of its own, not
   * in place: these records are the exception, and their bodies nest.
   */
  private shapedRecord(body: BodyBuilder, r: LogRecord, obsLo: number, obsHi: number, observed: EpochTime): void {
    const origin = r instanceof ShapedRecord ? r.origin : undefined;
    if (!(origin && this.timeOfBytes(origin.src, origin.tsAt, origin.tsEnd))) {
      const t = parseTimestamp(r.ts) ?? observed;
      this.time(t.sec, t.nanos);
    }
    const p = this.lastParts!;
    // A JSON record's body straight from its bytes when they are the fields as
    // they stand (no mask rewrote values): written first, at the end of the
    // body, its record's head put in front of it once its length is known.
    const json = r instanceof ShapedRecord ? r.json : undefined;
    let src: Buffer | undefined;
    let s = 0;
    let e = 0;
    let anyLen = -1;
    const bodyAt = body.length;
    let severity: Severity | undefined;
    // Or written already by the shaping stage, with its severity: copied after the head.
    // Used once: a request encoded again (a retry, a split batch) reads the line's bytes instead, so a slab is freed once its records are encoded, not acknowledged.
    const prepared = r instanceof PreparedJsonRecord && r.anyValue !== undefined ? r : undefined;
    if (prepared) {
      src = prepared.origin!.src;
      s = prepared.origin!.msgAt;
      e = prepared.origin!.msgEnd;
      anyLen = prepared.anyLength;
      severity = prepared.severity;
    } else if (json?.verbatim) {
      if (origin) {
        src = origin.src;
        s = origin.msgAt;
        e = origin.msgEnd;
      } else {
        src = Buffer.from(r.message, 'utf8');
        e = src.length;
      }
      anyLen = writeJson(body, src, s, e, json.maxFields, json.maxDepth, json.scanned, SEVERITY_KEY_BYTES);
      if (anyLen > 0) severity = severityFound(src, e);
    }
    const fast = anyLen > 0;
    const fields = fast ? undefined : r.fields;
    const message = fast ? '' : r.message;
    const n = fast ? e - s : Buffer.byteLength(message, 'utf8');
    // Otherwise every length first (the fields' tree into `sizes`), then the bytes straight into the body.
    const sizes = this.sizes;
    sizes.length = 0;
    if (!fast) {
      severity = fields !== undefined ? severityOf(fields) : undefined;
      anyLen = fields !== undefined ? measure(fields, sizes) : 1 + varintSize(n) + n;
    }
    const parsed = fast || fields !== undefined;
    const sevLen = severity ? 1 + varintSize(severity.number) + 1 + varintSize(Buffer.byteLength(severity.text, 'utf8')) + Buffer.byteLength(severity.text, 'utf8') : 0;
    const digits = decimalDigits(r.offset);
    const uidLen = p.idPrefix.length + digits;
    const uidAny = 1 + varintSize(uidLen) + uidLen;
    const uidKv = 1 + 1 + UID_KEY.length + 1 + varintSize(uidAny) + uidAny;
    const stream = STREAM_ATTRIBUTE[r.stream];
    const flags = FLAG_ATTRIBUTES[r.flags & 7]!;
    const origAny = 1 + varintSize(n) + n;
    const origKv = parsed && keepsOriginal(r) ? 1 + 1 + ORIGINAL_KEY.length + 1 + varintSize(origAny) + origAny : 0;
    const linesAny = r.lines !== undefined && r.lines > 1 ? 1 + varintSize(r.lines) : 0;
    const linesKv = linesAny > 0 ? 1 + 1 + LINES_KEY.length + 1 + varintSize(linesAny) + linesAny : 0;
    const len =
      9 +
      sevLen +
      1 + varintSize(anyLen) + anyLen +
      1 + varintSize(uidKv) + uidKv +
      stream.length + flags.length +
      (origKv > 0 ? 1 + varintSize(origKv) + origKv : 0) +
      (linesKv > 0 ? 1 + varintSize(linesKv) + linesKv : 0) +
      9;
    const inserted = fast && !prepared;
    const head = inserted ? this.head : body;
    if (inserted) head.truncate(0);
    head.byte(T_LOG_RECORD);
    head.varint(len);
    head.byte(T_TIME);
    head.fixed64(this.lo, this.hi);
    if (severity) {
      head.byte(T_SEVERITY_NUMBER);
      head.varint(severity.number);
      const sn = Buffer.byteLength(severity.text, 'utf8');
      head.byte(T_SEVERITY_TEXT);
      head.varint(sn);
      head.utf8(severity.text, sn);
    }
    head.byte(T_BODY);
    head.varint(anyLen);
    if (prepared) {
      body.slice(prepared.anyValue!, prepared.anyAt, prepared.anyAt + anyLen);
      prepared.anyValue = undefined;
    }
    else if (fast) body.insert(bodyAt, head);
    else if (fields !== undefined) writeValue(body, fields, sizes, { at: 0 });
    else {
      body.byte(T_STRING);
      body.varint(n);
      body.utf8(message, n);
    }
    const attrs = attributesSize(uidKv, stream, flags);
    const attrsAt = body.claim(attrs);
    if (putAttributes(body.buffer, attrsAt, p.idPrefix, r.offset, digits, uidKv, uidAny, uidLen, stream, flags) !== attrsAt + attrs) throw new Error('OTLP attributes written other than sized');
    if (origKv > 0) {
      body.byte(T_ATTRIBUTE);
      body.varint(origKv);
      body.byte(T_KEY);
      body.byte(ORIGINAL_KEY.length);
      body.ascii(ORIGINAL_KEY);
      body.byte(T_VALUE);
      body.varint(origAny);
      body.byte(T_STRING);
      body.varint(n);
      if (fast) body.slice(src!, s, e);
      else body.utf8(message, n);
    }
    if (linesKv > 0) {
      body.byte(T_ATTRIBUTE);
      body.varint(linesKv);
      body.byte(T_KEY);
      body.byte(LINES_KEY.length);
      body.ascii(LINES_KEY);
      body.byte(T_VALUE);
      body.varint(linesAny);
      body.byte(T_INT);
      body.varint(r.lines!);
    }
    body.byte(T_OBSERVED);
    body.fixed64(obsLo, obsHi);
  }

  /**
   * Sets lo/hi from the CRI timestamp bytes [a, e) when their seconds match
   * the last ones parsed (lines of one second share them); otherwise parses
   * the text once. False if the bytes are no RFC 3339 timestamp.
   */
  private timeOfBytes(src: Buffer, a: number, e: number): boolean {
    const n = e - a;
    if (n < 20 || n > 40 || src[a + 10] !== 84) return false;
    let i = a + 19;
    let nanos = 0;
    if (src[i] === 46) {
      i++;
      let digits = 0;
      for (; i < e; i++) {
        const c = src[i]!;
        if (c < 48 || c > 57) break;
        if (digits < 9) {
          nanos = nanos * 10 + (c - 48);
          digits++;
        }
      }
      if (digits === 0) return false;
      for (; digits < 9; digits++) nanos *= 10;
    }
    // The cache key is the text without its fraction: seconds and zone.
    const keyLen = 19 + (e - i);
    let same = keyLen === this.lastKeyLen;
    if (same) {
      const k = this.lastKey;
      for (let j = 0; j < 19; j++) {
        if (k[j] !== src[a + j]) {
          same = false;
          break;
        }
      }
      if (same) for (let j = i, o = 19; j < e; j++, o++) if (k[o] !== src[j]) same = false;
    }
    if (!same) {
      const t = parseTimestamp(src.toString('latin1', a, e));
      if (!t) return false;
      src.copy(this.lastKey, 0, a, a + 19);
      src.copy(this.lastKey, 19, i, e);
      this.lastKeyLen = keyLen;
      this.time(t.sec, 0);
      this.secLo = this.lo;
      this.secHi = this.hi;
    }
    // The second's nanoseconds, then the line's: nanos < 2^30, so at most one carry.
    const lo = this.secLo + nanos;
    if (lo < TWO_32) {
      this.lo = lo;
      this.hi = this.secHi;
    } else {
      this.lo = lo - TWO_32;
      this.hi = (this.secHi + 1) >>> 0;
    }
    return true;
  }

  /** lo/hi of sec * 1e9 + nanos as an unsigned 64-bit integer (times before 1970 wrap, as uint64 does). */
  private time(sec: number, nanos: number): void {
    if (sec >= 0 && sec < TWO_32) {
      // sec * 1e9 exceeds 2^53: split sec in 16-bit halves so every product and sum stays exact.
      const a = Math.floor(sec / TWO_16) * 1e9;
      const x = (a % TWO_16) * TWO_16 + (sec % TWO_16) * 1e9 + nanos;
      this.lo = x % TWO_32 >>> 0;
      this.hi = (Math.floor(a / TWO_16) + Math.floor(x / TWO_32)) >>> 0;
      return;
    }
    const v = BigInt.asUintN(64, BigInt(sec) * 1_000_000_000n + BigInt(nanos));
    this.lo = Number(v & 0xffffffffn);
    this.hi = Number(v >> 32n);
  }
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
    if (wire === 0) {
      const [v, next] = readVarint(b, at);
      onField(field, wire, v, 0, 0);
      i = next;
    } else if (wire === 2) {
      const [len, cs] = readVarint(b, at);
      if (cs + len > e) throw new RangeError(`field ${field} runs past its message`);
      onField(field, wire, 0, cs, cs + len);
      i = cs + len;
    } else if (wire === 1) i = at + 8;
    else if (wire === 5) i = at + 4;
    else throw new RangeError(`unsupported wire type ${wire}`);
  }
  if (i !== e) throw new RangeError('message ends inside a field');
}

/**
 * ExportLogsServiceResponse: partial_success (1) { rejected_log_records (1),
 * error_message (2) }. Read here so the protobuf path loads no OpenTelemetry
 * module at all; throws on bytes that are no such message.
 */
export function decodeExportLogsResponse(b: Uint8Array): { partialSuccess?: { rejectedLogRecords?: number; errorMessage?: string } } {
  const out: { partialSuccess?: { rejectedLogRecords?: number; errorMessage?: string } } = {};
  fields(b, 0, b.length, (field, wire, _v, s, e) => {
    if (field !== 1 || wire !== 2) return;
    const partial: { rejectedLogRecords?: number; errorMessage?: string } = (out.partialSuccess ??= {});
    fields(b, s, e, (f, w, v, cs, ce) => {
      if (f === 1 && w === 0) partial.rejectedLogRecords = v;
      else if (f === 2 && w === 2) partial.errorMessage = Buffer.from(b.buffer, b.byteOffset + cs, ce - cs).toString('utf8');
    });
  });
  return out;
}
