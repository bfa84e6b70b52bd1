// Splits a byte stream into lines for both sources: node mode's CRI files and
// api mode's pods/log responses (where the kubelet has joined the runtime's
// P/F fragments, so a line can be any length). A line over the limit is
// capped, the rest counted and dropped, and never buffered whole. Also the one
// way a message is cut to the record limit.

/** Receives the lines of a stream, appending what it makes of them to `out`. */
export interface LineHandler<T> {
  /**
   * Content is b[s, e) without the newline. The line starts at stream offset
   * `start` and took `size` bytes of the stream (its newline included, when
   * it had one); `dropped` bytes over the limit were cut from its end.
   */
  line(b: Buffer, s: number, e: number, start: number, size: number, dropped: number, out: T[]): void;
}

const NL = 10;

export class LineSplitter<T> {
  /** Stream offset of the next byte pushed. */
  position: number;
  private carry: Buffer | undefined;
  private carryLen = 0;
  private carryStart = 0;
  private overflow = 0;

  constructor(
    private readonly handler: LineHandler<T>,
    /** Longest line content kept. */
    private readonly limit: number,
    position = 0,
  ) {
    this.position = position;
  }

  /**
   * A chunk that starts at `position`. Lines inside it are handed over as
   * slices of it, so the caller must never write to the chunk again; only an
   * unterminated tail is copied, to be joined with the next chunk.
   */
  push(chunk: Buffer, out: T[]): void {
    const base = this.position;
    const len = chunk.length;
    let s = 0;
    if (this.carryLen > 0 || this.overflow > 0) {
      const nl = chunk.indexOf(NL);
      if (nl < 0) {
        this.append(chunk, 0, len);
        this.position = base + len;
        return;
      }
      this.append(chunk, 0, nl);
      const size = this.carryLen + this.overflow + 1;
      const dropped = this.overflow;
      const lineLen = this.carryLen;
      const line = this.carry!;
      // The handler keeps slices of the lines it is given: a carried line must
      // not be written over by the next one.
      this.carry = undefined;
      this.carryLen = 0;
      this.overflow = 0;
      this.handler.line(line, 0, lineLen, this.carryStart, size, dropped, out);
      s = nl + 1;
    }
    const limit = this.limit;
    for (;;) {
      const nl = chunk.indexOf(NL, s);
      if (nl < 0) break;
      const over = nl - s - limit;
      if (over > 0) this.handler.line(chunk, s, s + limit, base + s, nl - s + 1, over, out);
      else this.handler.line(chunk, s, nl, base + s, nl - s + 1, 0, out);
      s = nl + 1;
    }
    if (s < len) {
      this.carryStart = base + s;
      this.append(chunk, s, len);
    }
    this.position = base + len;
  }

  /** True while an unterminated line is held. */
  get partial(): boolean {
    return this.carryLen > 0 || this.overflow > 0;
  }

  /** Bytes held back because their line has not ended yet. */
  get buffered(): number {
    return this.carryLen;
  }

  /** The stream is complete: an unterminated last line is a line too, of `size` = its bytes without a newline. */
  end(out: T[]): void {
    if (!this.partial) return;
    const line = this.carry!;
    const lineLen = this.carryLen;
    const size = this.carryLen + this.overflow;
    const dropped = this.overflow;
    this.carry = undefined;
    this.carryLen = 0;
    this.overflow = 0;
    this.handler.line(line, 0, lineLen, this.carryStart, size, dropped, out);
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

export function truncationMarker(dropped: number): string {
  return ` [jobharvest: truncated ${dropped} bytes]`;
}

/**
 * Longest prefix of at most `max` bytes that does not end inside a UTF-8
 * sequence, so a truncated message decodes without a replacement character.
 */
export function utf8Prefix(buf: Buffer, max: number): number {
  const len = Math.min(max, buf.length);
  for (let i = len - 1; i >= 0 && i >= len - 4; i--) {
    const c = buf[i]!;
    if ((c & 0x80) === 0) return len;
    if ((c & 0xc0) === 0xc0) {
      const need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
      return i + need <= len ? len : i;
    }
  }
  return len;
}

/** `head` then the first `keep` bytes of `body`, then `tail`, in one new buffer: the rare records that are not a plain slice of a chunk. */
export function joined(head: Buffer, body: Buffer, keep: number, tail?: string): Buffer {
  const t = tail === undefined ? 0 : Buffer.byteLength(tail, 'latin1');
  const out = Buffer.allocUnsafe(head.length + keep + t);
  head.copy(out, 0);
  body.copy(out, head.length, 0, keep);
  if (tail !== undefined) out.write(tail, head.length + keep, 'latin1');
  return out;
}

/**
 * `head`, then `msg` cut to at most `max` bytes on a UTF-8 boundary, then the
 * marker that counts what was cut: this cut plus `dropped` bytes that never
 * reached `msg`.
 */
export function truncated(head: Buffer, msg: Buffer, max: number, dropped: number): Buffer {
  const cut = utf8Prefix(msg, max);
  return joined(head, msg, cut, truncationMarker(msg.length - cut + dropped));
}
