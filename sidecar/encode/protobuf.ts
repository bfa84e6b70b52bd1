// Protobuf's wire format, the part the OTLP encoder writes
// (https://protobuf.dev/programming-guides/encoding/). Every writer puts its
// bytes into a buffer the caller made room in (BodyBuilder.claim, or a buffer
// of the size the matching size function gave) and returns the offset after
// them: one bounds check per message whose length is known, not one per byte.

/** Wire types. */
export const VARINT = 0;
export const I64 = 1;
export const LEN = 2;
export const I32 = 5;

/** A field's tag: its number and wire type. Every OTLP field number is below 16, so every tag is one byte. */
export const tag = (field: number, wire: number): number => (field << 3) | wire;

/** The bytes putVarint writes for `v`, a non-negative safe integer. */
export function varintSize(v: number): number {
  return v < 0x80 ? 1 : v < 0x4000 ? 2 : v < 0x200000 ? 3 : v < 0x10000000 ? 4 : v < 0x800000000 ? 5 : Math.ceil(Math.log2(v + 1) / 7);
}

/** A length-delimited field of `n` content bytes with its one-byte tag and its length. */
export function lenFieldSize(n: number): number {
  return 1 + varintSize(n) + n;
}

/** A varint of a non-negative safe integer. */
export function putVarint(buf: Buffer, o: number, v: number): number {
  while (v > 0x7f) {
    buf[o++] = (v % 128) | 0x80;
    v = Math.floor(v / 128);
  }
  buf[o++] = v;
  return o;
}

/** The bytes of a negative int64 as protobuf writes it: ten, two's complement. */
export const NEGATIVE_INT64_SIZE = 10;

/** A negative safe integer as an int64 varint (NEGATIVE_INT64_SIZE bytes). */
export function putNegativeInt64(buf: Buffer, o: number, v: number): number {
  let u = BigInt.asUintN(64, BigInt(v));
  while (u > 0x7fn) {
    buf[o++] = Number(u & 0x7fn) | 0x80;
    u >>= 7n;
  }
  buf[o++] = Number(u);
  return o;
}

/** A little-endian 64-bit integer given as its low and high 32-bit halves (fixed64); 8 bytes. */
export function putFixed64(buf: Buffer, o: number, lo: number, hi: number): number {
  buf[o] = lo;
  buf[o + 1] = lo >>> 8;
  buf[o + 2] = lo >>> 16;
  buf[o + 3] = lo >>> 24;
  buf[o + 4] = hi;
  buf[o + 5] = hi >>> 8;
  buf[o + 6] = hi >>> 16;
  buf[o + 7] = hi >>> 24;
  return o + 8;
}

/** A tag and the length that follows it: the head of a length-delimited field whose `n` content bytes the caller writes next. */
export function putLenHead(buf: Buffer, o: number, t: number, n: number): number {
  buf[o++] = t;
  return putVarint(buf, o, n);
}

/** Pre-encoded bytes: a loop for the short ones (keys, attribute heads), one native copy for the rest. */
export function putBytes(buf: Buffer, o: number, b: Buffer): number {
  const n = b.length;
  if (n >= 32) return o + b.copy(buf, o);
  for (let i = 0; i < n; i++) buf[o++] = b[i]!;
  return o;
}

/**
 * A string whose UTF-8 length `n` the caller measured (utf8Length): short
 * ASCII code unit by code unit, cheaper than a call into the encoder, the rest
 * by the encoder.
 */
export function putText(buf: Buffer, o: number, s: string, n: number): number {
  if (n === s.length && n <= SHORT_TEXT) {
    for (let i = 0; i < n; i++) buf[o++] = s.charCodeAt(i);
    return o;
  }
  return o + buf.write(s, o, n, 'utf8');
}

/** Up to this many code units a string is measured and written by a loop (utf8Length, putText). */
const SHORT_TEXT = 48;

/**
 * UTF-8 length of a string. Keys and most values are short ASCII: a loop
 * over them costs less than a call into the encoder, which would run once
 * per string of every JSON line.
 */
export function utf8Length(v: string): number {
  const n = v.length;
  if (n > SHORT_TEXT) return Buffer.byteLength(v, 'utf8');
  for (let i = 0; i < n; i++) if (v.charCodeAt(i) > 0x7f) return Buffer.byteLength(v, 'utf8');
  return n;
}
