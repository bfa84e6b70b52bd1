// Splits a pods/log response into lines. With timestamps=true the kubelet
// writes `<RFC3339Nano> <message>\n`, one line per log line with runtime
// fragments (P/F) already joined, so a line can be any length: it is capped
// (the rest counted and dropped) and never buffered whole.

/** content is b[s, e) without the newline; the line took `size` bytes of the stream; `dropped` bytes were cut. */
export type LineSink = (b: Buffer, s: number, e: number, size: number, dropped: number) => void;

const NL = 10;

export class LineSplitter {
  private carry: Buffer | undefined;
  private carryLen = 0;
  private overflow = 0;

  constructor(private readonly limit: number) {}

  push(chunk: Buffer, onLine: LineSink): void {
    let s = 0;
    if (this.carryLen > 0 || this.overflow > 0) {
      const nl = chunk.indexOf(NL);
      if (nl < 0) {
        this.append(chunk, 0, chunk.length);
        return;
      }
      this.append(chunk, 0, nl);
      const size = this.carryLen + this.overflow + 1;
      const dropped = this.overflow;
      const len = this.carryLen;
      this.carryLen = 0;
      this.overflow = 0;
      onLine(this.carry!, 0, len, size, dropped);
      s = nl + 1;
    }
    for (;;) {
      const nl = chunk.indexOf(NL, s);
      if (nl < 0) break;
      const over = nl - s - this.limit;
      onLine(chunk, s, over > 0 ? s + this.limit : nl, nl - s + 1, over > 0 ? over : 0);
      s = nl + 1;
    }
    if (s < chunk.length) this.append(chunk, s, chunk.length);
  }

  /** True while an unterminated line is held. */
  get partial(): boolean {
    return this.carryLen > 0 || this.overflow > 0;
  }

  /** The stream is complete: an unterminated last line is a line too. */
  end(onLine: LineSink): void {
    if (!this.partial) return;
    const len = this.carryLen;
    const size = this.carryLen + this.overflow;
    const dropped = this.overflow;
    this.carryLen = 0;
    this.overflow = 0;
    onLine(this.carry!, 0, len, size, dropped);
  }

  /** The connection broke: the next one starts again at a line boundary. */
  reset(): void {
    this.carryLen = 0;
    this.overflow = 0;
  }

  private append(src: Buffer, s: number, e: number): void {
    const take = Math.min(this.limit - this.carryLen, e - s);
    if (take < e - s) this.overflow += e - s - Math.max(0, take);
    if (take <= 0) return;
    if (!this.carry || this.carry.length < this.carryLen + take) {
      const next = Buffer.allocUnsafe(Math.min(this.limit, Math.max(this.carryLen + take, (this.carry?.length ?? 0) * 2, 4096)));
      if (this.carry) this.carry.copy(next, 0, 0, this.carryLen);
      this.carry = next;
    }
    src.copy(this.carry, this.carryLen, s, s + take);
    this.carryLen += take;
  }
}
