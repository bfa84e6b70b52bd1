// Per-file acknowledgement tracking. Batches finish out of order when several
// are in flight; a file's checkpoint may only move over a prefix of its data
// in which every batch has been settled (acknowledged or dead-lettered).
import type { LogRecord } from './record.ts';

export interface Ticket {
  readonly progress: FileProgress;
  /** Offset the checkpoint may reach once this ticket and all before it settle. */
  end: number;
  done: boolean;
  /** The record that set `end`; api mode resumes from its timestamp. */
  last: LogRecord | undefined;
}

export class FileProgress {
  private readonly queue: Ticket[] = [];
  private head = 0;
  /** The record that ends the committed prefix, once one was settled. */
  committedRecord: LogRecord | undefined;

  constructor(
    /** Highest contiguous settled offset: what the checkpoint stores. */
    public committed: number,
    private readonly onAdvance: (p: FileProgress) => void = () => {},
  ) {}

  open(end: number, last?: LogRecord): Ticket {
    const t: Ticket = { progress: this, end, done: false, last };
    this.queue.push(t);
    return t;
  }

  settle(t: Ticket): void {
    t.done = true;
    let moved = false;
    while (this.head < this.queue.length && this.queue[this.head]!.done) {
      const head = this.queue[this.head]!;
      if (head.end > this.committed) {
        this.committed = head.end;
        if (head.last) this.committedRecord = head.last;
      }
      head.last = undefined;
      this.head++;
      moved = true;
    }
    if (this.head > 64 && this.head * 2 > this.queue.length) {
      this.queue.splice(0, this.head);
      this.head = 0;
    }
    if (moved) this.onAdvance(this);
  }

  /** Tickets handed out but not yet settled. */
  get outstanding(): number {
    return this.queue.length - this.head;
  }
}
