// A record the shaping stage made: one line whose safe offset had to be held
// back, several lines joined into one event, or a line with parsed fields or
// masked text. Only pods that turn shaping on ever make one.
import type { Fields, FileMeta, LogRecord, Stream } from './record.ts';

/** Rebuilds a record's fields from its (final, masked) message; the same message always gives the same fields. */
export type FieldsOf = (message: string) => Fields | undefined;

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
 * cheaper, and its garbage dies young.
 */
export class ShapedRecord implements LogRecord {
  constructor(
    readonly file: FileMeta,
    /** The first line's offset: a restart that re-reads and re-joins the same lines gives the same id. */
    readonly offset: number,
    readonly ts: string,
    readonly stream: Stream,
    readonly message: string,
    readonly size: number,
    readonly safe: number,
    readonly flags: number,
    readonly lines?: number,
    /** Set when the message is a JSON object within the bounds. */
    private readonly fieldsOf?: FieldsOf,
  ) {}

  get fields(): Fields | undefined {
    if (this.fieldsOf === undefined) return undefined;
    if (lastMessage !== this.message || lastParser !== this.fieldsOf) {
      lastFields = this.fieldsOf(this.message);
      lastMessage = this.message;
      lastParser = this.fieldsOf;
    }
    return lastFields;
  }

  withSafe(safe: number): ShapedRecord {
    return new ShapedRecord(this.file, this.offset, this.ts, this.stream, this.message, this.size, safe, this.flags, this.lines, this.fieldsOf);
  }
}
