// A record the shaping stage made: one line whose safe offset had to be held
// back, several lines joined into one event, or a line with parsed fields or
// masked text. Only pods that turn shaping on ever make one.
import type { Fields, FileMeta, LogRecord, Stream } from './record.ts';

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
    readonly fields?: Fields,
  ) {}

  withSafe(safe: number): ShapedRecord {
    return new ShapedRecord(this.file, this.offset, this.ts, this.stream, this.message, this.size, safe, this.flags, this.lines, this.fields);
  }
}
