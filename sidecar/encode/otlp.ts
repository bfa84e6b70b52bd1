// OTLP/HTTP protobuf (ExportLogsServiceRequest) written straight into a
// request body, the way DocumentEncoder writes NDJSON. The generic
// serializers need an SDK record object, a resource map and a size-estimating
// pass per line; here the shape is fixed, so per-file parts (resource, scope,
// the id's prefix) are encoded once and a record costs its timestamp, one
// copy of its message bytes and a few length prefixes.
//
// Two paths: a plain record, whose body is its message, and a shaped one (a
// joined record, or one with JSON fields), whose body is a map and which may
// carry a severity, the line as written and its line count. Both measure the
// record once (otlp-wire.ts's LogRecordFrame) and write it with the same
// writers; the messages' bytes are otlp-wire.ts's, the JSON map bodies
// json-anyvalue.ts's.
import { OTLP_ATTRIBUTES as A, OTLP_RESOURCE as R, serviceNameOf } from '../../src/contract/record.ts';
import type { Identity } from '../config.ts';
import { CriRecord, FLAG_INCOMPLETE, FLAG_MALFORMED, FLAG_TRUNCATED, type FileMeta, type LogRecord, type Stream } from '../records/record.ts';
import { nowTime, parseTimestamp, type EpochTime } from '../records/timestamp.ts';
import { ShapedRecord } from '../records/shaped.ts';
import { utf8Valid } from '../records/utf8.ts';
import { BodyBuilder } from './body.ts';
import { metadataFields } from './document.ts';
import { AnyValueArena, JSON_OK, JsonScan, writeJson } from './json-anyvalue.ts';
import {
  LogRecordFrame,
  attributeField,
  logRecordHeadSize,
  putAnyValue,
  putLogRecordHead,
  putLogRecordTail,
  putMessageValue,
  putResourceLogsHead,
  resourceField,
  resourceLogsHeadRoom,
  scopeField,
  sizeAnyValue,
  sizeLogRecord,
  sizeMessageValue,
} from './otlp-wire.ts';
import { SEVERITY_KEY_BYTES, severityFound, severityOf, type Severity } from './severity.ts';
import { UnixNanos } from './unix-nanos.ts';

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

const STREAM_ATTRIBUTE: Record<Stream, Buffer> = {
  stdout: attributeField(A.stream, 'stdout'),
  stderr: attributeField(A.stream, 'stderr'),
  unknown: Buffer.alloc(0),
};

/** Flag attributes for each combination of the three flags, in the order the JSON documents use. */
const FLAG_ATTRIBUTES: Buffer[] = [];
for (let f = 0; f < 8; f++) {
  const parts: Buffer[] = [];
  if (f & FLAG_TRUNCATED) parts.push(attributeField(A.truncated, true));
  if (f & FLAG_MALFORMED) parts.push(attributeField(A.malformed, true));
  if (f & FLAG_INCOMPLETE) parts.push(attributeField(A.incomplete, true));
  FLAG_ATTRIBUTES.push(Buffer.concat(parts));
}

/** What one container run (resource) and one file contribute to every request. */
interface FileParts {
  /** ResourceLogs.resource, its tag and length included. */
  resource: Buffer;
  /** The string value of log.record.uid up to its offset digits. */
  idPrefix: Buffer;
  /** Grouping key: records of one container run share a resource. */
  key: string;
}

/** What prepare() wrote of a JSON line: its map body, in the arena, and its severity. */
class PreparedValue {
  constructor(
    readonly buffer: Buffer,
    readonly at: number,
    readonly length: number,
    readonly severity: Severity | undefined,
  ) {}
}

/**
 * Encodes records as one ExportLogsServiceRequest per batch. It is also the
 * sink's JsonPreparer (delivery/sink.ts): the shaping stage's JSON detector
 * hands it a line, and it writes the line's map in the pass that decides it
 * is JSON, instead of a pass to decide there and another to write here.
 */
export class OtlpEncoder {
  private readonly resources = new Map<string, Buffer>();
  private readonly files = new WeakMap<FileMeta, FileParts>();
  /** ScopeLogs.scope, its tag and length included. */
  private readonly scope: Buffer;
  private lastFile: FileMeta | undefined;
  private lastParts: FileParts | undefined;
  private readonly time = new UnixNanos();
  /** The record being written, measured once. */
  private readonly frame = new LogRecordFrame();
  /** A map body's lengths (sizeAnyValue), reused from record to record. */
  private readonly sizes: number[] = [];
  private readonly cursor = { at: 0 };
  /** What writeJson found in a record's bytes. */
  private readonly scan = new JsonScan();
  /** The head of a record whose body was written first. */
  private head = Buffer.alloc(256);
  /** Where prepare() writes; made with the first line it is handed. */
  private arena: AnyValueArena | undefined;
  /** What the last prepare() wrote, for the line's record (ShapedRecord.prepared). */
  prepared: PreparedValue | undefined;

  constructor(
    private readonly identity: Identity,
    scopeName: string,
    scopeVersion: string,
  ) {
    this.scope = scopeField(scopeName, scopeVersion);
  }

  /** scanJson's verdict on the line's bytes; on JSON_OK, `prepared` holds its map body and severity. */
  prepare(scan: JsonScan, line: CriRecord, maxFields: number, maxDepth: number): number {
    const arena = (this.arena ??= new AnyValueArena());
    const verdict = arena.write(scan, line.src, line.msgAt, line.msgEnd, maxFields, maxDepth, SEVERITY_KEY_BYTES);
    this.prepared = verdict === JSON_OK ? new PreparedValue(arena.buffer, arena.at, arena.length, severityFound(scan, line.src, line.msgEnd)) : undefined;
    return verdict;
  }

  private partsOf(file: FileMeta): FileParts {
    let p = this.files.get(file);
    if (p) return p;
    const key = `${file.container}\0${file.restart}`;
    let resource = this.resources.get(key);
    if (!resource) {
      resource = resourceField({ ...metadataFields(this.identity, file), ...resourceFields(this.identity) });
      this.resources.set(key, resource);
    }
    p = { resource, idPrefix: Buffer.from(file.idPrefix, 'utf8'), key };
    this.files.set(file, p);
    return p;
  }

  /** The request body for `records`; `observed` is the time they were read, the same for the batch. */
  request(records: readonly LogRecord[], observed: EpochTime = nowTime(), sizeHint = 0): Buffer {
    const body = new BodyBuilder(sizeHint || records.length * 320);
    const f = this.frame;
    this.time.set(observed.sec, observed.nanos);
    f.observedLo = this.time.lo;
    f.observedHi = this.time.hi;
    let i = 0;
    while (i < records.length) {
      const parts = this.partsOf(records[i]!.file);
      // Room for the longest head; the gap closed once the group's length is known.
      const room = resourceLogsHeadRoom(parts.resource, this.scope);
      const at = body.claim(room);
      const start = body.length;
      do {
        this.record(body, records[i]!, observed);
        i++;
      } while (i < records.length && (records[i]!.file === records[i - 1]!.file || this.partsOf(records[i]!.file).key === parts.key));
      body.closeGap(putResourceLogsHead(body.buffer, at, parts.resource, this.scope, body.length - start), at + room);
    }
    return body.finish();
  }

  private record(body: BodyBuilder, r: LogRecord, observed: EpochTime): void {
    if (r.file !== this.lastFile) {
      this.lastFile = r.file;
      this.lastParts = this.partsOf(r.file);
    }
    const f = this.frame;
    f.idPrefix = this.lastParts!.idPrefix;
    f.offset = r.offset;
    f.stream = STREAM_ATTRIBUTE[r.stream];
    f.flags = FLAG_ATTRIBUTES[r.flags & 7]!;
    if (r instanceof CriRecord) return this.plain(body, r, r, observed);
    // A ShapedRecord's fields are parsed when asked for: its `json` says whether it has any.
    const shaped = r instanceof ShapedRecord ? r : undefined;
    if (r.lines === undefined && (shaped ? shaped.json === undefined : r.fields === undefined)) return this.plain(body, r, shaped?.origin, observed);
    this.shaped(body, r, shaped, observed);
  }

  /**
   * time_unix_nano from the line's timestamp bytes when it has them, else
   * from the record's timestamp text; the observed time when that is none.
   */
  private stamp(r: LogRecord, line: CriRecord | undefined, observed: EpochTime): void {
    const t = this.time;
    if (!(line && t.setBytes(line.src, line.tsAt, line.tsEnd))) {
      const p = parseTimestamp(r.ts) ?? observed;
      t.set(p.sec, p.nanos);
    }
    this.frame.timeLo = t.lo;
    this.frame.timeHi = t.hi;
  }

  /**
   * A record whose body is its message: the bytes as read when `line` has
   * them and they are valid UTF-8 (protobuf strings must be), else the
   * decoded string, whose invalid sequences became U+FFFD. Every length is
   * known first: the record is claimed whole and written straight into the
   * body.
   */
  private plain(body: BodyBuilder, r: LogRecord, line: CriRecord | undefined, observed: EpochTime): void {
    const f = this.frame;
    if (line && utf8Valid(line.src, line.msgAt, line.msgEnd)) f.messageBytes(line.src, line.msgAt, line.msgEnd);
    else f.messageText(r.message);
    this.stamp(r, line, observed);
    f.severityNumber = 0;
    f.original = false;
    f.lines = 0;
    f.body = sizeMessageValue(f);
    const size = sizeLogRecord(f);
    const at = body.claim(size);
    const buf = body.buffer;
    let o = putLogRecordHead(buf, at, f);
    o = putMessageValue(buf, o, f);
    written(putLogRecordTail(buf, o, f), at + size);
  }

  /**
   * A record the shaping stage touched: the body is the fields' map (the
   * line as written also in log.record.original when the map does not hold
   * every value of it exactly, so nothing is lost) and the severity comes
   * from a level field; a joined record without fields keeps its message as
   * its body, with its line count.
   */
  private shaped(body: BodyBuilder, r: LogRecord, shaped: ShapedRecord | undefined, observed: EpochTime): void {
    const f = this.frame;
    const origin = shaped?.origin;
    this.stamp(r, origin, observed);
    f.lines = r.lines ?? 0;
    const json = shaped?.json;
    // A record with fields but no say from a shaper keeps its line as written.
    f.original = json === undefined || json.keepOriginal;
    // The value prepare() wrote already, with its severity: copied once. A request encoded again (a retry, a split batch) reads the line's bytes instead, so a slab is freed once its records are encoded, not acknowledged.
    const prepared = shaped?.prepared;
    if (prepared instanceof PreparedValue && origin) {
      shaped!.prepared = undefined;
      return this.copyPrepared(body, origin, prepared);
    }
    // The map straight from the line's bytes when they are the fields as they stand (no mask rewrote values).
    if (json?.verbatim && this.verbatim(body, r, origin, json.maxFields, json.maxDepth, json.scanned)) return;
    const fields = r.fields;
    f.messageText(r.message);
    const sizes = this.sizes;
    sizes.length = 0;
    if (fields !== undefined) {
      setSeverity(f, severityOf(fields));
      f.body = sizeAnyValue(fields, sizes);
    } else {
      setSeverity(f, undefined);
      f.original = false;
      f.body = sizeMessageValue(f);
    }
    const size = sizeLogRecord(f);
    const at = body.claim(size);
    const buf = body.buffer;
    let o = putLogRecordHead(buf, at, f);
    if (fields === undefined) o = putMessageValue(buf, o, f);
    else {
      this.cursor.at = 0;
      o = putAnyValue(buf, o, fields, sizes, this.cursor);
    }
    written(putLogRecordTail(buf, o, f), at + size);
  }

  private copyPrepared(body: BodyBuilder, line: CriRecord, p: PreparedValue): void {
    const f = this.frame;
    f.messageBytes(line.src, line.msgAt, line.msgEnd);
    setSeverity(f, p.severity);
    f.body = p.length;
    const size = sizeLogRecord(f);
    const at = body.claim(size);
    const buf = body.buffer;
    let o = putLogRecordHead(buf, at, f);
    o += p.buffer.copy(buf, o, p.at, p.at + p.length);
    written(putLogRecordTail(buf, o, f), at + size);
  }

  /**
   * The map body written from the message's JSON bytes first, at the end of
   * the body, and the record's head put in front of it once its length is
   * known; false, with the body as it was, when the bytes are for the object
   * path (json-anyvalue.ts).
   */
  private verbatim(body: BodyBuilder, r: LogRecord, origin: CriRecord | undefined, maxFields: number, maxDepth: number, scanned: boolean): boolean {
    const f = this.frame;
    const src = origin ? origin.src : Buffer.from(r.message, 'utf8');
    const s = origin ? origin.msgAt : 0;
    const e = origin ? origin.msgEnd : src.length;
    const bodyAt = body.length;
    const anyLen = writeJson(this.scan, body, src, s, e, maxFields, maxDepth, scanned, SEVERITY_KEY_BYTES);
    if (anyLen <= 0) return false;
    setSeverity(f, severityFound(this.scan, src, e));
    f.messageBytes(src, s, e);
    f.body = anyLen;
    sizeLogRecord(f);
    const n = logRecordHeadSize(f);
    if (this.head.length < n) this.head = Buffer.alloc(Math.max(n, this.head.length * 2));
    written(putLogRecordHead(this.head, 0, f), n);
    body.insert(bodyAt, this.head, n);
    const at = body.claim(f.tail);
    written(putLogRecordTail(body.buffer, at, f), at + f.tail);
    return true;
  }
}

function setSeverity(f: LogRecordFrame, s: Severity | undefined): void {
  f.severityNumber = s ? s.number : 0;
  f.severityText = s ? s.text : '';
}

/** Checks that a message took the bytes it was measured at. */
function written(o: number, end: number): void {
  if (o !== end) throw new Error(`OTLP message written up to ${o}, sized up to ${end}`);
}
