// Groups records into batches by size, count and age. Each batch carries one
// acknowledgement ticket per file it touches, so settling the batch moves
// those files' checkpoints.
import type { Ticket } from '../records/progress.ts';
import { messageLength, type FileMeta, type LogRecord } from '../records/record.ts';

export interface Batch {
  readonly seq: number;
  readonly records: LogRecord[];
  /** Estimated encoded size. */
  bytes: number;
  readonly tickets: Ticket<LogRecord>[];
}

export interface BatcherOptions {
  readonly maxBytes: number;
  readonly maxRecords: number;
  readonly maxWaitMs: number;
}

/** Per-record envelope estimate (metadata, keys, quoting) on top of the message. */
export const RECORD_OVERHEAD_BYTES = 320;

export class Batcher {
  private cur: Batch;
  private seq = 0;
  private timer: NodeJS.Timeout | undefined;
  private lastFile: FileMeta | undefined;
  private lastTicket: Ticket<LogRecord> | undefined;
  /** Records in `cur`, whose array is allocated at its expected size. */
  private count = 0;
  /** The size of the last batch handed on: the next is most likely as large. */
  private expected = 64;

  constructor(
    private readonly opts: BatcherOptions,
    private readonly onBatch: (b: Batch) => void,
  ) {
    this.cur = this.fresh();
  }

  add(r: LogRecord): void {
    const b = this.cur;
    // Written by index into an array allocated at the expected size: growing
    // it by push copies it over and over, and that garbage shortens the time
    // records in flight have before they are promoted to the old generation
    // (each promoted record costs a mark-compact's share later).
    b.records[this.count++] = r;
    b.bytes += messageLength(r) + RECORD_OVERHEAD_BYTES;
    if (r.file !== this.lastFile) {
      this.lastFile = r.file;
      this.lastTicket = b.tickets.find((t) => t.progress === r.file.progress);
      if (!this.lastTicket) {
        this.lastTicket = r.file.progress.open(r.safe, r);
        b.tickets.push(this.lastTicket);
      }
    }
    const t = this.lastTicket!;
    if (r.safe > t.end) {
      t.end = r.safe;
      t.last = r;
    }
    if (b.bytes >= this.opts.maxBytes || this.count >= this.opts.maxRecords) this.flush();
    else if (this.timer === undefined) this.timer = setTimeout(() => this.flush(), this.opts.maxWaitMs);
  }

  /** Records waiting in the batch being filled. */
  get pending(): number {
    return this.count;
  }

  /** Hands the current batch on now, if it has anything. */
  flush(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.count === 0) return;
    const b = this.cur;
    b.records.length = this.count;
    this.expected = Math.min(this.count, this.opts.maxRecords);
    this.cur = this.fresh();
    this.onBatch(b);
  }

  private fresh(): Batch {
    this.lastFile = undefined;
    this.lastTicket = undefined;
    this.count = 0;
    return { seq: ++this.seq, records: new Array<LogRecord>(this.expected), bytes: 0, tickets: [] };
  }
}
