// Harvests at once (--concurrency), apart from reconciles at once
// (--reconciles). Most reconciles only read the Job and its pods and write the
// record and its Event: a few API calls each, whose latency, not memory, sets
// the pace, so many may run. A harvest holds a request and a batch in memory
// and a connection to a log server, so few may: they wait here for a slot.

export class Slots {
  private free: number;
  private readonly waiting: Array<() => void> = [];

  constructor(readonly size: number) {
    if (!Number.isInteger(size) || size < 1) throw new Error(`slots must be a whole number of at least 1, got ${size}`);
    this.free = size;
  }

  /** Runs `fn` once a slot is free, first come first served; the slot is given back however `fn` ends. */
  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.free > 0) this.free--;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    try {
      return await fn();
    } finally {
      const next = this.waiting.shift();
      // The slot passes straight to the next in line, so a newcomer cannot take it first.
      if (next) next();
      else this.free++;
    }
  }

  /** Slots in use now. */
  get busy(): number {
    return this.size - this.free;
  }
}
