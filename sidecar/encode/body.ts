// Request bodies are written straight into one growing Buffer, record by
// record. Concatenating a batch into one big JS string first would keep a
// multi-megabyte string tree alive per in-flight request and double the
// copying. Finished bodies are recycled: allocating and freeing megabyte
// buffers for every request fragments the C heap and inflates RSS.

// A few more than MAX_IN_FLIGHT's default: a body is handed back once compressed.
const POOL_MAX = 8;
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

/** Per byte: 0 copies as is into a JSON string, ESCAPE needs a backslash, NON_ASCII is part of a multi-byte sequence. */
const ESCAPE = 1;
const NON_ASCII = 2;
const BYTE_KIND = new Uint8Array(256);
for (let c = 0; c < 256; c++) BYTE_KIND[c] = c >= 0x80 ? NON_ASCII : c < 0x20 || c === 34 || c === 92 ? ESCAPE : 0;

/** recycleBody(body) the first time the returned function is called, and never again. */
export function releaser(body: Buffer): () => void {
  let held = true;
  return () => {
    if (held) recycleBody(body);
    held = false;
  };
}

// Decimal writers into bytes a caller has claimed (BodyBuilder.claim): each returns the offset after what it wrote.

/** How many digits `v` (a non-negative safe integer) has in decimal. */
export function decimalDigits(v: number): number {
  if (v > 0x7fffffff) return String(v).length;
  return v < 100000 ? (v < 100 ? (v < 10 ? 1 : 2) : v < 1000 ? 3 : v < 10000 ? 4 : 5) : v < 10000000 ? (v < 1000000 ? 6 : 7) : v < 100000000 ? 8 : v < 1000000000 ? 9 : 10;
}

/** `v` in decimal, its `digits` (decimalDigits) written from the last. */
export function putUint(buf: Buffer, o: number, v: number, digits: number): number {
  // Offsets past 2 GiB are rare enough for the generic conversion; below, int32 arithmetic is cheap.
  if (v > 0x7fffffff) {
    const text = String(v);
    for (let i = 0; i < text.length; i++) buf[o++] = text.charCodeAt(i);
    return o;
  }
  let at = o + digits;
  let i = v | 0;
  do {
    const q = (i / 10) | 0;
    buf[--at] = 48 + i - q * 10;
    i = q;
  } while (i > 0);
  return o + digits;
}

export class BodyBuilder {
  private buf: Buffer;
  private len = 0;
  /** jsonBytes' 32-bit view of the chunk it last read: records of one chunk come in a row. */
  private viewOf: Buffer | undefined;
  private view: DataView | undefined;

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

  /** Bytes [s, e) of `src`; for the short runs (timestamps) a loop beats a native call. */
  copy(src: Buffer, s: number, e: number): void {
    this.ensure(e - s);
    const buf = this.buf;
    let o = this.len;
    for (let i = s; i < e; i++) buf[o++] = src[i]!;
    this.len = o;
  }

  /** A non-negative safe integer in decimal, digits written in place. */
  uint(v: number): void {
    const digits = decimalDigits(v);
    this.ensure(digits);
    this.len = putUint(this.buf, this.len, v, digits);
  }

  /**
   * A JSON string literal. JSON.stringify's own scan and copy beat any check
   * written here (measured: a regex test alone costs as much), so the one
   * short-lived copy per message stays.
   */
  jsonString(s: string): void {
    this.append(JSON.stringify(s));
  }

  /**
   * The UTF-8 bytes [s, e) of `src` as a JSON string literal, escaped as
   * JSON.stringify would. Only ASCII is handled here: on the first byte
   * above 0x7f it writes nothing and returns false, and the caller goes
   * through jsonString, which also replaces invalid UTF-8 as a string
   * decode does.
   */
  jsonBytes(src: Buffer, s: number, e: number): boolean {
    // Four bytes at a time: any byte below 0x20, '"', '\\' or above 0x7f sets
    // its top bit in `hit` (SWAR). Then one native copy: 4x faster than
    // copying byte by byte. Only a hit needs the per-byte table.
    if (src !== this.viewOf) {
      this.viewOf = src;
      this.view = new DataView(src.buffer, src.byteOffset, src.byteLength);
    }
    const view = this.view!;
    let hit = 0;
    let i = s;
    for (; i + 4 <= e; i += 4) {
      const x = view.getUint32(i, true);
      const q = x ^ 0x22222222;
      const bs = x ^ 0x5c5c5c5c;
      hit |= ((x - 0x20202020) & ~x) | ((q - 0x01010101) & ~q) | ((bs - 0x01010101) & ~bs) | x;
    }
    hit &= 0x80808080;
    for (; i < e; i++) hit |= BYTE_KIND[src[i]!]!;
    let kind = 0;
    if (hit !== 0) for (let j = s; j < e; j++) kind |= BYTE_KIND[src[j]!]!;
    if (kind & NON_ASCII) return false;
    if (kind === 0) {
      this.ensure(e - s + 2);
      const buf = this.buf;
      buf[this.len] = 34;
      src.copy(buf, this.len + 1, s, e);
      this.len += e - s + 2;
      buf[this.len - 1] = 34;
      return true;
    }
    // Worst case: every byte becomes \u00XX.
    this.ensure((e - s) * 6 + 2);
    const buf = this.buf;
    let o = this.len;
    buf[o++] = 34;
    for (let i = s; i < e; i++) {
      const c = src[i]!;
      if (c >= 0x20 && c !== 34 && c !== 92) {
        buf[o++] = c;
        continue;
      }
      buf[o++] = 92;
      if (c === 34 || c === 92) buf[o++] = c;
      else if (c === 10) buf[o++] = 110;
      else if (c === 13) buf[o++] = 114;
      else if (c === 9) buf[o++] = 116;
      else if (c === 8) buf[o++] = 98;
      else if (c === 12) buf[o++] = 102;
      else {
        buf[o++] = 117;
        buf[o++] = 48;
        buf[o++] = 48;
        buf[o++] = c < 16 ? 48 : 49;
        const d = c & 15;
        buf[o++] = d < 10 ? 48 + d : 87 + d;
      }
    }
    buf[o++] = 34;
    this.len = o;
    return true;
  }

  /**
   * Makes room for exactly `n` bytes that the caller writes itself into
   * `buffer` from the returned offset on: one bounds check for a whole
   * message whose length is known, rather than one per byte.
   */
  claim(n: number): number {
    this.ensure(n);
    const at = this.len;
    this.len += n;
    return at;
  }

  /** Gives back what a claim did not use: the body ends at `length` again. */
  truncate(length: number): void {
    if (length > this.len) throw new RangeError('truncate past the end');
    this.len = length;
  }

  /** Puts bytes [0, n) of `head` at `at`, moving what was written from there on along: a message's head written after its content. */
  insert(at: number, head: Buffer, n: number): void {
    this.ensure(n);
    this.buf.copyWithin(at + n, at, this.len);
    head.copy(this.buf, at, 0, n);
    this.len += n;
  }

  /** The buffer claim() made room in; valid until the next call that writes. */
  get buffer(): Buffer {
    return this.buf;
  }

  /** Takes out bytes [from, to), moving what was written after them along: the part of a claim for a head of a length known only later that the head did not use. */
  closeGap(from: number, to: number): void {
    if (from > to) throw new RangeError('head longer than its reservation');
    if (from < to) this.buf.copyWithin(from, to, this.len);
    this.len -= to - from;
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
