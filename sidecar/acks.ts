// Per-file acknowledgement tracking. Batches finish out of order when several
// are in flight; a file's checkpoint may only move over a prefix of its data
// in which every batch has been settled (acknowledged or dead-lettered).

export interface Ticket {
  readonly progress: FileProgress;
  /** Offset the checkpoint may reach once this ticket and all before it settle. */
  end: number;
  done: boolean;
}

export class FileProgress {
  private readonly queue: Ticket[] = [];
  private head = 0;

  constructor(
    /** Highest contiguous settled offset: what the checkpoint stores. */
    public committed: number,
    private readonly onAdvance: (p: FileProgress) => void = () => {},
  ) {}

  open(end: number): Ticket {
    const t: Ticket = { progress: this, end, done: false };
    this.queue.push(t);
    return t;
  }

  settle(t: Ticket): void {
    t.done = true;
    let moved = false;
    while (this.head < this.queue.length && this.queue[this.head]!.done) {
      const end = this.queue[this.head]!.end;
      if (end > this.committed) this.committed = end;
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
