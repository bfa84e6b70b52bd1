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

  constructor(
    private readonly opts: BatcherOptions,
    private readonly onBatch: (b: Batch) => void,
  ) {
    this.cur = this.fresh();
  }

  add(r: LogRecord): void {
    const b = this.cur;
    b.records.push(r);
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
    if (b.bytes >= this.opts.maxBytes || b.records.length >= this.opts.maxRecords) this.flush();
    else if (this.timer === undefined) this.timer = setTimeout(() => this.flush(), this.opts.maxWaitMs);
  }

  /** Records waiting in the batch being filled. */
  get pending(): number {
    return this.cur.records.length;
  }

  /** Hands the current batch on now, if it has anything. */
  flush(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.cur.records.length === 0) return;
    const b = this.cur;
    this.cur = this.fresh();
    this.onBatch(b);
  }

  private fresh(): Batch {
    this.lastFile = undefined;
    this.lastTicket = undefined;
    return { seq: ++this.seq, records: [], bytes: 0, tickets: [] };
  }
}
