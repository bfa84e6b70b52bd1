// A time as OTLP's fixed64 time_unix_nano: an unsigned 64-bit count of
// nanoseconds, held as its low and high 32-bit halves (2^64 is past a
// double's integers). A Job's lines mostly share their second with the line
// before, so the CRI timestamp bytes are parsed only when their second changes.
import { parseTimestamp } from '../records/timestamp.ts';

const TWO_32 = 2 ** 32;
const TWO_16 = 2 ** 16;
const T = 0x54;
const DOT = 0x2e;
const ZERO = 0x30;
const NINE = 0x39;
/** "2024-05-06T07:08:09": the seconds of an RFC 3339 timestamp, before its fraction and zone. */
const SECONDS_LENGTH = 19;
const MAX_TIMESTAMP = 40;

export class UnixNanos {
  lo = 0;
  hi = 0;
  // The last timestamp's second, as the bytes it was parsed from (the text without its fraction: seconds and zone), and in nanoseconds.
  private readonly lastKey = Buffer.alloc(MAX_TIMESTAMP);
  private lastKeyLen = 0;
  private secLo = 0;
  private secHi = 0;

  /** sec * 1e9 + nanos (times before 1970 wrap, as uint64 does). */
  set(sec: number, nanos: number): void {
    if (sec >= 0 && sec < TWO_32) {
      // sec * 1e9 exceeds 2^53: split sec in 16-bit halves so every product and sum stays exact.
      const a = Math.floor(sec / TWO_16) * 1e9;
      const x = (a % TWO_16) * TWO_16 + (sec % TWO_16) * 1e9 + nanos;
      this.lo = x % TWO_32 >>> 0;
      this.hi = (Math.floor(a / TWO_16) + Math.floor(x / TWO_32)) >>> 0;
      return;
    }
    const v = BigInt.asUintN(64, BigInt(sec) * 1_000_000_000n + BigInt(nanos));
    this.lo = Number(v & 0xffffffffn);
    this.hi = Number(v >> 32n);
  }

  /**
   * The time of the CRI timestamp bytes [a, e): their second from the last
   * one parsed when the bytes match, else parsed once. False if the bytes
   * are no RFC 3339 timestamp.
   */
  setBytes(src: Buffer, a: number, e: number): boolean {
    const n = e - a;
    if (n < SECONDS_LENGTH + 1 || n > MAX_TIMESTAMP || src[a + 10] !== T) return false;
    let i = a + SECONDS_LENGTH;
    let nanos = 0;
    if (src[i] === DOT) {
      i++;
      let digits = 0;
      for (; i < e; i++) {
        const c = src[i]!;
        if (c < ZERO || c > NINE) break;
        if (digits < 9) {
          nanos = nanos * 10 + (c - ZERO);
          digits++;
        }
      }
      if (digits === 0) return false;
      for (; digits < 9; digits++) nanos *= 10;
    }
    if (!this.sameSecond(src, a, i, e) && !this.parseSecond(src, a, i, e)) return false;
    // The second's nanoseconds, then the line's: nanos < 2^30, so at most one carry.
    const lo = this.secLo + nanos;
    if (lo < TWO_32) {
      this.lo = lo;
      this.hi = this.secHi;
    } else {
      this.lo = lo - TWO_32;
      this.hi = (this.secHi + 1) >>> 0;
    }
    return true;
  }

  /** Whether the timestamp [a, e), its zone from `zone` on, has the last one's second. */
  private sameSecond(src: Buffer, a: number, zone: number, e: number): boolean {
    if (SECONDS_LENGTH + (e - zone) !== this.lastKeyLen) return false;
    const k = this.lastKey;
    for (let j = 0; j < SECONDS_LENGTH; j++) if (k[j] !== src[a + j]) return false;
    for (let j = zone, o = SECONDS_LENGTH; j < e; j++, o++) if (k[o] !== src[j]) return false;
    return true;
  }

  private parseSecond(src: Buffer, a: number, zone: number, e: number): boolean {
    const t = parseTimestamp(src.toString('latin1', a, e));
    if (!t) return false;
    src.copy(this.lastKey, 0, a, a + SECONDS_LENGTH);
    src.copy(this.lastKey, SECONDS_LENGTH, zone, e);
    this.lastKeyLen = SECONDS_LENGTH + (e - zone);
    this.set(t.sec, 0);
    this.secLo = this.lo;
    this.secHi = this.hi;
    return true;
  }
}
