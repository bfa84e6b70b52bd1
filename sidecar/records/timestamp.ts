// RFC 3339 (nano) text to epoch seconds + nanoseconds without losing digits.
// Lines of one second share their prefix, so the Date.parse result is cached.

export interface EpochTime {
  readonly sec: number;
  readonly nanos: number;
}

let lastKey = '';
let lastSec = 0;

/** Returns undefined for text that is not an RFC 3339 timestamp. */
export function parseTimestamp(ts: string): EpochTime | undefined {
  if (ts.length < 20 || ts.charCodeAt(10) !== 84 /* T */) return undefined;
  let i = 19;
  let nanos = 0;
  if (ts.charCodeAt(i) === 46 /* . */) {
    i++;
    let digits = 0;
    while (i < ts.length) {
      const c = ts.charCodeAt(i);
      if (c < 48 || c > 57) break;
      if (digits < 9) {
        nanos = nanos * 10 + (c - 48);
        digits++;
      }
      i++;
    }
    if (digits === 0) return undefined;
    for (; digits < 9; digits++) nanos *= 10;
  }
  const zone = ts.slice(i);
  const key = ts.slice(0, 19) + zone;
  if (key !== lastKey) {
    if (zone !== 'Z' && zone !== 'z' && !/^[+-]\d\d:\d\d$/.test(zone)) return undefined;
    const ms = Date.parse(key);
    if (!Number.isFinite(ms)) return undefined;
    lastKey = key;
    lastSec = Math.floor(ms / 1000);
  }
  return { sec: lastSec, nanos };
}

/** Nanoseconds since the epoch as decimal text (exceeds 2^53, so never a number). */
export function nanosText(t: EpochTime): string {
  if (t.sec <= 0) return (BigInt(t.sec) * 1_000_000_000n + BigInt(t.nanos)).toString();
  return `${t.sec}${String(t.nanos).padStart(9, '0')}`;
}

export function nowTime(): EpochTime {
  const ms = Date.now();
  return { sec: Math.floor(ms / 1000), nanos: (ms % 1000) * 1_000_000 };
}

/** digits, '+', '-', '.', ':', 'T', 'Z': keeps the text safe to splice into JSON. */
export const TS_CHAR = new Uint8Array(256);
for (const c of '0123456789+-.:TZ') TS_CHAR[c.charCodeAt(0)] = 1;

/** Length and the '-', '-', 'T' of an RFC 3339 date; TS_CHAR checks the rest. */
export function timestampShape(b: Buffer, s: number, e: number): boolean {
  const n = e - s;
  return n >= 20 && n <= 40 && b[s + 4] === 45 && b[s + 7] === 45 && b[s + 10] === 84;
}

/** b[s, e) looks like an RFC 3339 timestamp as runtimes and the kubelet write it. */
export function isTimestamp(b: Buffer, s: number, e: number): boolean {
  if (!timestampShape(b, s, e)) return false;
  for (let i = s; i < e; i++) if (TS_CHAR[b[i]!] !== 1) return false;
  return true;
}
