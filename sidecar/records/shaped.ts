// A record the shaping stage made: one line whose safe offset had to be held
// back, several lines joined into one event, or a line with parsed fields or
// masked text. Only pods that turn shaping on ever make one.
import type { CriRecord, Fields, FileMeta, LogRecord, Stream } from './record.ts';

/** Rebuilds a record's fields from its (final, masked) message; the same message always gives the same fields. */
type FieldsOf = (message: string) => Fields | undefined;

/** How a shaper's JSON records get their fields: one per shaper, shared by its records. */
export interface JsonFields {
  readonly fieldsOf: FieldsOf;
  /** The bounds they were decided with (encoders that read the bytes themselves must decide alike). */
  readonly maxFields: number;
  readonly maxDepth: number;
  /** The fields are the message's JSON as it stands: no mask rewrote values inside them. */
  readonly verbatim: boolean;
  /** The message's bytes were found a JSON object within the bounds without JSON.parse (encode/json-anyvalue.ts): a reader of the bytes may trust it. */
  readonly scanned: boolean;
  /**
   * The OTLP record also carries the message as written (log.record.original):
   * its fields do not hold every value of it exactly (see JsonScan.exact in
   * encode/json-anyvalue.ts, and masks), or the operator asked for it on
   * every record (JOBHARVEST_JSON_ORIGINAL=always).
   */
  readonly keepOriginal: boolean;
}

/** Whether an OTLP record with fields also carries its message as written: a record with fields but no say from a shaper keeps it. */
export function keepsOriginal(r: LogRecord): boolean {
  return !(r instanceof ShapedRecord) || r.json === undefined || r.json.keepOriginal;
}

// The encoders ask one record for its fields several times in a row; the
// same message and parser give the same fields, whichever record asks.
let lastMessage: string | undefined;
let lastParser: FieldsOf | undefined;
let lastFields: Fields | undefined;

/**
 * Fields are rebuilt from the message when an encoder asks, not kept: a
 * record lives until its batch is acknowledged, and a parsed object tree per
 * JSON line (dozens of small objects each) would be promoted to the old
 * generation with it. Measured on bench:sidecar's shaped corpus, keeping them
 * put the garbage collector at a third of the sidecar's CPU. Parsing again is
 * cheaper, and its garbage dies young; the OTLP encoder does not parse at all
 * (encode/json-anyvalue.ts).
 */
/** What a ShapedRecord is made of, by name. */
interface ShapedFields {
  readonly file: FileMeta;
  /** The first line's offset: a restart that re-reads and re-joins the same lines gives the same id. */
  readonly offset: number;
  /** The timestamp; absent when it is `origin`'s, decoded only if asked for. */
  readonly ts?: string;
  readonly stream: Stream;
  /** The message; absent when it is `origin`'s, decoded only if asked for. */
  readonly message?: string;
  readonly size: number;
  readonly safe: number;
  readonly flags: number;
  /** A joined record: how many lines. */
  readonly lines?: number;
  /** Set when the message is a JSON object within the bounds. */
  readonly json?: JsonFields;
  /** The parsed line whose bytes (valid UTF-8) are this record's message, when it is one unchanged line. */
  readonly origin?: CriRecord;
  /** What the sink's encoder wrote of the line while the JSON detector read it (delivery/sink.ts's JsonPreparer). */
  readonly prepared?: unknown;
}

export class ShapedRecord implements LogRecord {
  readonly file: FileMeta;
  readonly offset: number;
  private readonly stamp: string | undefined;
  readonly stream: Stream;
  private readonly text: string | undefined;
  readonly size: number;
  public safe: number;
  readonly flags: number;
  readonly lines: number | undefined;
  readonly json: JsonFields | undefined;
  readonly origin: CriRecord | undefined;
  /**
   * What the sink's encoder wrote of the line while the JSON detector read
   * it, for that encoder alone to read: it takes it once and lets go (a
   * record waits for its acknowledgement far longer than for its encoding;
   * an encoding again, a retry, reads the line's bytes).
   */
  prepared: unknown;

  constructor(f: ShapedFields) {
    this.file = f.file;
    this.offset = f.offset;
    this.stamp = f.ts;
    this.stream = f.stream;
    this.text = f.message;
    this.size = f.size;
    this.safe = f.safe;
    this.flags = f.flags;
    this.lines = f.lines;
    this.json = f.json;
    this.origin = f.origin;
    this.prepared = f.prepared;
  }

  get ts(): string {
    return this.stamp ?? this.origin!.ts;
  }

  get message(): string {
    return this.text ?? this.origin!.message;
  }

  get fields(): Fields | undefined {
    const json = this.json;
    if (json === undefined) return undefined;
    const message = this.message;
    if (lastMessage !== message || lastParser !== json.fieldsOf) {
      lastFields = json.fieldsOf(message);
      lastMessage = message;
      lastParser = json.fieldsOf;
    }
    return lastFields;
  }

}
