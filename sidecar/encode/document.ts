// The JSON document shape shared by the http, elasticsearch and stdout sinks
// and the dead-letter file: one flat object per record with OpenTelemetry
// Kubernetes attribute names. Built by string concatenation with the
// per-file metadata encoded once, because this runs for every line.
import { DOCUMENT_FIELDS as F, JOB_ANNOTATION_PREFIX, JOB_LABEL_PREFIX, SHAPED_FIELDS } from '../../src/contract/record.ts';
import { BodyBuilder } from './body.ts';
import type { Identity } from '../config.ts';
import { CriRecord, FLAG_INCOMPLETE, FLAG_MALFORMED, FLAG_TRUNCATED, type FileMeta, type LogRecord } from '../records/record.ts';

/** `carried: false` leaves the Job's labels and annotations out, for a format that names them its own way (syslog). */
export function metadataFields(identity: Identity, file: Pick<FileMeta, 'container' | 'restart'>, carried = true): Record<string, string | number> {
  const fields: Record<string, string | number> = {
    [F.namespace]: identity.namespace,
    [F.pod]: identity.pod,
    [F.podUid]: identity.podUid,
    [F.container]: file.container,
    [F.restart]: file.restart,
  };
  if (identity.job) fields[F.job] = identity.job;
  if (identity.node) fields[F.node] = identity.node;
  if (!carried) return fields;
  // Per pod, so every encoder caches them with the rest of the file's metadata: a carried label costs nothing per record.
  if (identity.labels) for (const [k, v] of Object.entries(identity.labels)) fields[JOB_LABEL_PREFIX + k] = v;
  if (identity.annotations) for (const [k, v] of Object.entries(identity.annotations)) fields[JOB_ANNOTATION_PREFIX + k] = v;
  return fields;
}

const TRUNCATED = `,${JSON.stringify(F.truncated)}:true`;
const MALFORMED = `,${JSON.stringify(F.malformed)}:true`;
const INCOMPLETE = `,${JSON.stringify(F.incomplete)}:true`;

function flagFields(flags: number): string {
  let s = '';
  if (flags & FLAG_TRUNCATED) s += TRUNCATED;
  if (flags & FLAG_MALFORMED) s += MALFORMED;
  if (flags & FLAG_INCOMPLETE) s += INCOMPLETE;
  return s;
}

const LINES_KEY = `,${JSON.stringify(SHAPED_FIELDS.document.lines)}:`;
const JSON_KEY = `,${JSON.stringify(SHAPED_FIELDS.document.json)}:`;

/**
 * What a shaped record adds after its flags: the line count of a joined
 * record and its JSON fields, nested under their own key. Only records the
 * shaping stage touched get here; a plain line never calls it.
 */
function shapedFields(r: LogRecord): string {
  let s = '';
  if (r.lines !== undefined && r.lines > 1) s += LINES_KEY + r.lines;
  if (r.fields !== undefined) s += JSON_KEY + JSON.stringify(r.fields);
  return s;
}

const MESSAGE_TEXT = `",${JSON.stringify(F.message)}:`;
const MESSAGE_FIELD = Buffer.from(MESSAGE_TEXT);
const STREAM_KEY = `,${JSON.stringify(F.stream)}:`;
const ID_KEY = `,${JSON.stringify(F.id)}:`;
const QUOTE = Buffer.from('"');

/** Encodes records as JSON documents; remembers the metadata tail of the last file it saw. */
export class DocumentEncoder {
  private lastFile: FileMeta | undefined;
  private tail = '';
  /** The tail plus the newline that ends an NDJSON line, encoded once per file. */
  private tailLine: Buffer = Buffer.alloc(0);
  /** The quote that closes the id, then tailLine: one copy for the usual record without flags. */
  private quoteTailLine: Buffer = Buffer.alloc(0);
  /** `,"stream":"<stream>","id":"<id prefix>` of the current file, by stream. */
  private streamId: Record<string, Buffer> = {};
  private readonly tails = new Map<string, string>();
  private readonly head: Buffer;

  constructor(
    private readonly identity: Identity,
    private readonly timeField: string = F.time,
  ) {
    this.head = Buffer.from('{"' + timeField + '":"');
  }

  private fileChanged(file: FileMeta): void {
    this.lastFile = file;
    const k = `${file.container}\0${file.restart}`;
    let t = this.tails.get(k);
    if (t === undefined) {
      t = ',' + JSON.stringify(metadataFields(this.identity, file)).slice(1);
      this.tails.set(k, t);
    }
    this.tail = t;
    this.tailLine = Buffer.from(t + '\n');
    this.quoteTailLine = Buffer.from('"' + t + '\n');
    this.streamId = {};
  }

  private streamIdOf(r: LogRecord): Buffer {
    let b = this.streamId[r.stream];
    if (b === undefined) {
      b = Buffer.from(`${STREAM_KEY}${JSON.stringify(r.stream)}${ID_KEY}${JSON.stringify(r.file.idPrefix).slice(0, -1)}`);
      this.streamId[r.stream] = b;
    }
    return b;
  }

  /**
   * One NDJSON line straight into the body: the same bytes as
   * encode(r) + '\n' without building the document as a string first,
   * which at half a million records a second is most of the garbage.
   */
  writeLine(body: BodyBuilder, r: LogRecord): void {
    if (r.file !== this.lastFile) this.fileChanged(r.file);
    body.bytes(this.head);
    // ts is validated to [0-9TZ:.+-] by the parser (or made by toISOString), so it needs no escaping.
    if (r instanceof CriRecord) {
      // Parsed lines are copied from the bytes they were read as; only non-ASCII messages become strings.
      body.copy(r.src, r.tsAt, r.tsEnd);
      body.bytes(MESSAGE_FIELD);
      if (!body.jsonBytes(r.src, r.msgAt, r.msgEnd)) body.jsonString(r.message);
    } else {
      body.ascii(r.ts);
      body.bytes(MESSAGE_FIELD);
      body.jsonString(r.message);
    }
    body.bytes(this.streamIdOf(r));
    body.uint(r.offset);
    if (r.flags === 0 && r.fields === undefined && r.lines === undefined) body.bytes(this.quoteTailLine);
    else {
      body.bytes(QUOTE);
      if (r.flags !== 0) body.ascii(flagFields(r.flags));
      if (r.fields !== undefined || r.lines !== undefined) body.append(shapedFields(r));
      body.bytes(this.tailLine);
    }
  }

  encode(r: LogRecord): string {
    if (r.file !== this.lastFile) this.fileChanged(r.file);
    // ts is validated to [0-9TZ:.+-] by the parser, so it needs no escaping.
    let s = '{"' + this.timeField + '":"' + r.ts + MESSAGE_TEXT + JSON.stringify(r.message) + STREAM_KEY + '"' + r.stream + '"' + ID_KEY + '"' + r.file.idPrefix + r.offset + '"';
    if (r.flags !== 0) s += flagFields(r.flags);
    if (r.fields !== undefined || r.lines !== undefined) s += shapedFields(r);
    return s + this.tail;
  }

  /** NDJSON body for many records. */
  lines(records: readonly LogRecord[], sizeHint = 0): Buffer {
    const body = new BodyBuilder(sizeHint || records.length * 512);
    for (const r of records) this.writeLine(body, r);
    return body.finish();
  }
}
