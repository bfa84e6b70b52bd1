// Request bodies are written straight into one growing Buffer, record by
// record. Concatenating a batch into one big JS string first would keep a
// multi-megabyte string tree alive per in-flight request and double the
// copying. Finished bodies are recycled: allocating and freeing megabyte
// buffers for every request fragments the C heap and inflates RSS.

const POOL_MAX = 16;
const MIN_POOLED = 64 * 1024;
const pool: Buffer[] = [];

function take(min: number): Buffer {
  for (let i = pool.length - 1; i >= 0; i--) {
    if (pool[i]!.length >= min) return pool.splice(i, 1)[0]!;
  }
  return Buffer.allocUnsafeSlow(Math.max(min, MIN_POOLED));
}

/** Gives a body returned by BodyBuilder.finish() back once the request no longer needs it. */
export function recycleBody(body: Buffer): void {
  if (body.byteOffset !== 0 || body.buffer.byteLength < MIN_POOLED || pool.length >= POOL_MAX) return;
  pool.push(Buffer.from(body.buffer, 0, body.buffer.byteLength));
}

export class BodyBuilder {
  private buf: Buffer;
  private len = 0;

  constructor(sizeHint = MIN_POOLED) {
    this.buf = take(sizeHint);
  }

  append(s: string): void {
    // UTF-8 needs at most 3 bytes per UTF-16 code unit.
    this.ensure(s.length * 3);
    this.len += this.buf.write(s, this.len);
  }

  /** Pre-encoded bytes. */
  bytes(b: Uint8Array): void {
    this.ensure(b.length);
    this.buf.set(b, this.len);
    this.len += b.length;
  }

  /**
   * Text known to be ASCII (timestamps, ids, flag fields): copied code unit by
   * code unit, cheaper than a call into the encoder for a few dozen bytes.
   */
  ascii(s: string): void {
    const n = s.length;
    this.ensure(n);
    const buf = this.buf;
    let o = this.len;
    for (let i = 0; i < n; i++) buf[o++] = s.charCodeAt(i);
    this.len = o;
  }

  /** A non-negative safe integer in decimal, digits written in place. */
  uint(v: number): void {
    let digits = 1;
    for (let x = v; x >= 10; x = Math.floor(x / 10)) digits++;
    this.ensure(digits);
    const buf = this.buf;
    let o = this.len + digits;
    this.len = o;
    let x = v;
    do {
      buf[--o] = 48 + (x % 10);
      x = Math.floor(x / 10);
    } while (x > 0);
  }

  /**
   * A JSON string literal. JSON.stringify's own scan and copy beat any check
   * written here (measured: a regex test alone costs as much), so the one
   * short-lived copy per message stays.
   */
  jsonString(s: string): void {
    this.append(JSON.stringify(s));
  }

  private ensure(extra: number): void {
    const need = this.len + extra;
    if (need <= this.buf.length) return;
    const next = take(Math.max(need, this.buf.length * 2));
    this.buf.copy(next, 0, 0, this.len);
    recycleBody(this.buf);
    this.buf = next;
  }

  get length(): number {
    return this.len;
  }

  /** The bytes written so far (a view, not a copy). */
  finish(): Buffer {
    return this.buf.subarray(0, this.len);
  }
}
