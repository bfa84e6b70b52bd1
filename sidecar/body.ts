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
    const need = this.len + s.length * 3;
    if (need > this.buf.length) {
      const next = take(Math.max(need, this.buf.length * 2));
      this.buf.copy(next, 0, 0, this.len);
      recycleBody(this.buf);
      this.buf = next;
    }
    this.len += this.buf.write(s, this.len);
  }

  get length(): number {
    return this.len;
  }

  /** The bytes written so far (a view, not a copy). */
  finish(): Buffer {
    return this.buf.subarray(0, this.len);
  }
}
