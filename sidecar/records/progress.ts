// Per-file acknowledgement tracking. Batches finish out of order when several
// are in flight; a file's checkpoint may only move over a prefix of its data
// in which every batch has been settled (acknowledged or dead-lettered).
//
// `M` is the resume mark a ticket carries besides its offset: api mode resumes
// from the timestamp of the last record, node mode needs only the offset. It is
// a type parameter so that this file need not know what a record is.

export interface Ticket<M> {
  readonly progress: FileProgress<M>;
  /** Offset the checkpoint may reach once this ticket and all before it settle. */
  end: number;
  done: boolean;
  /** The mark that goes with `end`. */
  last: M | undefined;
}

export class FileProgress<M> {
  private readonly queue: Ticket<M>[] = [];
  private head = 0;
  /** The mark that ends the committed prefix, once one was settled. */
  committedMark: M | undefined;

  constructor(
    /** Highest contiguous settled offset: what the checkpoint stores. */
    public committed: number,
    private readonly onAdvance: (p: FileProgress<M>) => void = () => {},
  ) {}

  open(end: number, last?: M): Ticket<M> {
    const t: Ticket<M> = { progress: this, end, done: false, last };
    this.queue.push(t);
    return t;
  }

  settle(t: Ticket<M>): void {
    t.done = true;
    let moved = false;
    while (this.head < this.queue.length && this.queue[this.head]!.done) {
      const head = this.queue[this.head]!;
      if (head.end > this.committed) {
        this.committed = head.end;
        if (head.last !== undefined) this.committedMark = head.last;
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
