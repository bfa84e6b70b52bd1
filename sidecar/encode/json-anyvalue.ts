// A JSON object line straight to an OTLP AnyValue (a kvlist), from its UTF-8
// bytes: no JSON.parse, no object tree, no string per field. JSON.parse makes
// a few dozen objects per line and the encoder walks them again; on a corpus
// of JSON lines that was most of the sidecar's CPU (the parse, the walk and
// the garbage collector), twice per line (the shaping stage decides with
// a parse, the encoder parses again).
//
// The bytes are read two ways with one grammar: `scanJson` only decides (the
// shaping stage), `writeJson` writes. A container's length is known only once
// its content is written, so the write leaves one byte for it and moves the
// content along when the length needs more (only containers of 128 bytes or
// more: the root, mostly). What the object path (JSON.parse, then otlp.ts's
// measure and writeValue) would make differently is never guessed at: a line
// with a duplicate key (JSON.parse keeps the last), an integer-like key
// (objects list those first), an escaped key, a container deeper than the
// depth bound (kept as JSON text), more fields than the bound (JSON.parse
// would have merged duplicate keys before counting) or nesting past
// MAX_NESTING is answered SLOW, and the caller takes the object path.
// sidecar/test/json-anyvalue.test.ts holds the two paths to the same bytes.
import type { BodyBuilder } from './body.ts';

export const JSON_OK = 0;
/** Not a JSON object: the line stays a plain message. */
export const JSON_PLAIN = -1;
/** Decided by the object path (see above). */
export const JSON_SLOW = -3;

/** Recursion stops here; deeper lines are the object path's (JSON.parse does not recurse). */
const MAX_NESTING = 64;

// AnyValue and its containers (opentelemetry-proto common/v1).
export const T_STRING = (1 << 3) | 2;
export const T_BOOL = (2 << 3) | 0;
export const T_INT = (3 << 3) | 0;
export const T_DOUBLE = (4 << 3) | 1;
export const T_ARRAY = (5 << 3) | 2;
export const T_KVLIST = (6 << 3) | 2;
/** ArrayValue.values, KeyValueList.values */
export const T_VALUES = (1 << 3) | 2;
/** KeyValue.key, KeyValue.value */
export const T_KEY = (1 << 3) | 2;
export const T_VALUE = (2 << 3) | 2;

export function varintSize(v: number): number {
  return v < 0x80 ? 1 : v < 0x4000 ? 2 : v < 0x200000 ? 3 : v < 0x10000000 ? 4 : v < 0x800000000 ? 5 : Math.ceil(Math.log2(v + 1) / 7);
}

/** The AnyValue content length of a number, as the object path encodes it. */
export function numberSize(v: number): number {
  return Number.isSafeInteger(v) ? (v >= 0 ? 1 + varintSize(v) : 11) : 9;
}

/** A number as an AnyValue's content, for the object path: the bytes putNumber writes. */
export function writeNumber(body: BodyBuilder, v: number): void {
  const at = body.claim(11);
  ob = body.buffer;
  o = at;
  putNumber(v);
  body.truncate(o);
  ob = EMPTY;
}

function putVarint(v: number): void {
  const buf = ob;
  let at = o;
  while (v > 0x7f) {
    buf[at++] = (v % 128) | 0x80;
    v = Math.floor(v / 128);
  }
  buf[at++] = v;
  o = at;
}

/** Fills in the one byte left at `at` with the length of what was written after it, moving that along if the length takes more. */
function patch(at: number): void {
  const n = o - at - 1;
  if (n < 0x80) {
    ob[at] = n;
    return;
  }
  const extra = varintSize(n) - 1;
  ob.copyWithin(at + 1 + extra, at + 1, o);
  const end = o + extra;
  o = at;
  putVarint(n);
  o = end;
}

/** src bytes [s, e): a loop for the short runs (keys, most values), one native copy for the rest. */
function putBytes(s: number, e: number): void {
  if (e - s < 32) {
    const buf = ob;
    const src = b;
    let at = o;
    for (let i = s; i < e; i++) buf[at++] = src[i]!;
    o = at;
    return;
  }
  ob.set(b.subarray(s, e), o);
  o += e - s;
}

/** int_value for safe integers (negative ones as ten bytes of two's complement, as int64 is written), double_value otherwise. */
function putNumber(v: number): void {
  if (Number.isSafeInteger(v)) {
    ob[o++] = T_INT;
    if (v >= 0) return putVarint(v);
    let u = BigInt.asUintN(64, BigInt(v));
    while (u > 0x7fn) {
      ob[o++] = Number(u & 0x7fn) | 0x80;
      u >>= 7n;
    }
    ob[o++] = Number(u);
    return;
  }
  ob[o++] = T_DOUBLE;
  ob.writeDoubleLE(v, o);
  o += 8;
}

const EMPTY = Buffer.alloc(0);

// The read's state, module-wide: a pass (or valueAt) runs to completion before the next starts.
let b: Buffer = Buffer.alloc(0);
let p = 0;
let end = 0;
/** 0: decide, 1: write. */
let mode = 0;
let status = JSON_OK;
let count = 0;
let limit = 0;
let maxDepth = 0;
/** Write: the buffer and offset the body claimed for the value. */
let ob: Buffer = Buffer.alloc(0);
let o = 0;
/** The bytes were scanned with these bounds already (JSON_OK): keys need no second look. */
let trusted = false;
/** Key hashes of the objects open on the path, for duplicate keys. */
const keyHashes = new Int32Array(1024);
let keyTop = 0;
/** Where the root's severity-like values start (write only), by SEVERITY_KEYS index; -1: absent. */
export const severityAt = [-1, -1, -1];
let severityKeys: readonly Uint8Array[] = [];

function fail(code: number): void {
  if (status === JSON_OK) status = code;
}

// The loops below copy the module's state into locals: module bindings are
// context slots, reloaded on every access, and these loops run per byte.
function skipWs(): void {
  const buf = b;
  const n = end;
  let i = p;
  while (i < n) {
    const c = buf[i]!;
    if (c !== 32 && c !== 10 && c !== 13 && c !== 9) break;
    i++;
  }
  p = i;
}

/**
 * Steps over a string whose opening quote is at p; returns 1 + the index of
 * its closing quote's position, negated when it holds an escape; 0 when it is
 * no JSON string (unterminated, a raw control character, a bad escape).
 */
function skipString(): number {
  const buf = b;
  const n = end;
  let i = p + 1;
  let escaped = false;
  while (i < n) {
    const c = buf[i]!;
    if (c === 34) {
      p = i + 1;
      return escaped ? -(i + 1) : i + 1;
    }
    if (c === 92) {
      if (i + 1 >= n) return 0;
      escaped = true;
      const x = buf[i + 1]!;
      if (x === 117) {
        if (i + 6 > n) return 0;
        for (let k = i + 2; k < i + 6; k++) {
          const h = buf[k]!;
          if (!((h >= 48 && h <= 57) || (h >= 65 && h <= 70) || (h >= 97 && h <= 102))) return 0;
        }
        i += 6;
        continue;
      }
      if (x === 34 || x === 92 || x === 47 || x === 98 || x === 102 || x === 110 || x === 114 || x === 116) {
        i += 2;
        continue;
      }
      return 0;
    }
    if (c < 0x20) return 0;
    i++;
  }
  return 0;
}

/** The decoded value of the escaped string token [s, e) (quotes included). */
function unescape(s: number, e: number): string {
  return JSON.parse(b.toString('utf8', s, e)) as string;
}

function stringValue(): number {
  const s = p;
  const r = skipString();
  if (r === 0) {
    fail(JSON_PLAIN);
    return 0;
  }
  if (mode === 0) return 0;
  ob[o++] = T_STRING;
  if (r > 0) {
    putVarint(r - 1 - (s + 1));
    putBytes(s + 1, r - 1);
    return 0;
  }
  const v = unescape(s, -r);
  putVarint(Buffer.byteLength(v, 'utf8'));
  o += ob.write(v, o);
  return 0;
}

function literal(word: readonly number[]): boolean {
  if (p + word.length > end) return false;
  for (let i = 0; i < word.length; i++) if (b[p + i] !== word[i]) return false;
  p += word.length;
  return true;
}
const TRUE = [116, 114, 117, 101];
const FALSE = [102, 97, 108, 115, 101];
const NULL = [110, 117, 108, 108];

const POW10 = [1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15];

function numberValue(): number {
  const buf = b;
  const n = end;
  const s = p;
  let i = p;
  let simple = true;
  /** Digits after the point of a number without exponent; -1: none or an exponent. */
  let fraction = -1;
  if (i < n && buf[i] === 45) i++;
  if (i < n && buf[i] === 48) i++;
  else if (i < n && buf[i]! >= 49 && buf[i]! <= 57) while (i < n && buf[i]! >= 48 && buf[i]! <= 57) i++;
  else {
    fail(JSON_PLAIN);
    return 0;
  }
  if (i < n && buf[i] === 46) {
    simple = false;
    i++;
    const at = i;
    while (i < n && buf[i]! >= 48 && buf[i]! <= 57) i++;
    if (i === at) {
      fail(JSON_PLAIN);
      return 0;
    }
    fraction = i - at;
  }
  if (i < n && (buf[i] === 101 || buf[i] === 69)) {
    simple = false;
    fraction = -1;
    i++;
    if (i < n && (buf[i] === 43 || buf[i] === 45)) i++;
    const at = i;
    while (i < n && buf[i]! >= 48 && buf[i]! <= 57) i++;
    if (i === at) {
      fail(JSON_PLAIN);
      return 0;
    }
  }
  p = i;
  if (mode === 0) return 0;
  let v: number;
  const digits = i - s - (buf[s] === 45 ? 1 : 0) - (fraction >= 0 ? 1 : 0);
  if ((simple || fraction >= 0) && digits <= 15) {
    // At most 15 digits make an integer below 2^53, and a power of ten up to
    // 10^22 is exact: their quotient is correctly rounded, as JSON.parse's is.
    let neg = false;
    let k = s;
    if (buf[k] === 45) {
      neg = true;
      k++;
    }
    v = 0;
    for (; k < i; k++) if (buf[k] !== 46) v = v * 10 + (buf[k]! - 48);
    if (fraction > 0) v /= POW10[fraction]!;
    if (neg) v = -v;
  } else v = Number(buf.toString('latin1', s, i));
  putNumber(v);
  return 0;
}

function value(depth: number): number {
  skipWs();
  if (p >= end) {
    fail(JSON_PLAIN);
    return 0;
  }
  const c = b[p]!;
  if (c === 34) return stringValue();
  if (c === 123 || c === 91) {
    // A container at depth + 1: deeper than the bound, it would be kept as JSON text.
    if (depth + 1 > maxDepth || depth + 1 > MAX_NESTING) {
      fail(JSON_SLOW);
      return 0;
    }
    return c === 123 ? object(depth + 1) : array(depth + 1);
  }
  if (c === 116 || c === 102) {
    if (!literal(c === 116 ? TRUE : FALSE)) {
      fail(JSON_PLAIN);
      return 0;
    }
    if (mode === 1) {
      ob[o++] = T_BOOL;
      ob[o++] = c === 116 ? 1 : 0;
    }
    return 2;
  }
  if (c === 110) {
    if (!literal(NULL)) fail(JSON_PLAIN);
    return 0;
  }
  return numberValue();
}

function array(depth: number): number {
  p++;
  let lenAt = 0;
  if (mode === 1) {
    ob[o++] = T_ARRAY;
    lenAt = o++;
  }
  skipWs();
  if (p < end && b[p] === 93) {
    p++;
    if (mode === 1) patch(lenAt);
    return 0;
  }
  for (;;) {
    if (++count > limit) {
      fail(JSON_SLOW);
      return 0;
    }
    if (mode === 1) {
      ob[o++] = T_VALUES;
      const at = o++;
      value(depth);
      patch(at);
    } else value(depth);
    if (status !== JSON_OK) return 0;
    skipWs();
    const c = b[p];
    if (p < end && c === 44) {
      p++;
      continue;
    }
    if (p < end && c === 93) {
      p++;
      if (mode === 1) patch(lenAt);
      return 0;
    }
    fail(JSON_PLAIN);
    return 0;
  }
}

function object(depth: number): number {
  p++;
  const base = keyTop;
  let lenAt = 0;
  if (mode === 1) {
    ob[o++] = T_KVLIST;
    lenAt = o++;
  }
  skipWs();
  if (p < end && b[p] === 125) {
    p++;
    if (mode === 1) patch(lenAt);
    return 0;
  }
  for (;;) {
    if (++count > limit) {
      fail(JSON_SLOW);
      return 0;
    }
    if (p >= end || b[p] !== 34) {
      fail(JSON_PLAIN);
      return 0;
    }
    const ks = p + 1;
    const r = skipString();
    if (r === 0) {
      fail(JSON_PLAIN);
      return 0;
    }
    if (r < 0) {
      fail(JSON_SLOW);
      return 0;
    }
    const ke = r - 1;
    if (!trusted && !newKey(base, ks, ke)) return 0;
    skipWs();
    if (p >= end || b[p] !== 58) {
      fail(JSON_PLAIN);
      return 0;
    }
    p++;
    if (mode === 1) {
      if (depth === 1) noteSeverity(ks, ke);
      ob[o++] = T_VALUES;
      const kvAt = o++;
      ob[o++] = T_KEY;
      putVarint(ke - ks);
      putBytes(ks, ke);
      ob[o++] = T_VALUE;
      const vAt = o++;
      value(depth);
      patch(vAt);
      patch(kvAt);
    } else value(depth);
    if (status !== JSON_OK) return 0;
    skipWs();
    const c = b[p];
    if (p < end && c === 44) {
      p++;
      skipWs();
      continue;
    }
    if (p < end && c === 125) {
      p++;
      keyTop = base;
      if (mode === 1) patch(lenAt);
      return 0;
    }
    fail(JSON_PLAIN);
    return 0;
  }
}

/** Records the key [ks, ke) of the object whose keys start at `base`; false (and SLOW) when the object path could order or merge it differently. */
function newKey(base: number, ks: number, ke: number): boolean {
  // An integer-like key goes first in an object's key order, so the object path would move it.
  const buf = b;
  let hash = 0x811c9dc5;
  let digits = ke > ks;
  for (let i = ks; i < ke; i++) {
    const c = buf[i]!;
    if (c < 48 || c > 57) digits = false;
    hash = Math.imul(hash ^ c, 0x01000193);
  }
  hash ^= ke - ks;
  // Two equal hashes may be two different keys: the object path tells.
  let clash = digits || keyTop >= keyHashes.length;
  for (let i = base; i < keyTop && !clash; i++) if (keyHashes[i] === hash) clash = true;
  if (clash) {
    fail(JSON_SLOW);
    return false;
  }
  keyHashes[keyTop++] = hash;
  return true;
}

function noteSeverity(ks: number, ke: number): void {
  for (let k = 0; k < severityKeys.length; k++) {
    const key = severityKeys[k]!;
    if (key.length !== ke - ks) continue;
    let same = true;
    for (let i = 0; i < key.length; i++) if (key[i] !== b[ks + i]) same = false;
    if (same) severityAt[k] = p;
  }
}

/** Runs one pass over [s, e): leading spaces and tabs, one object, trailing JSON whitespace. */
function run(src: Buffer, s: number, e: number, m: number, maxFields: number, depthBound: number, checked: boolean): number {
  trusted = checked;
  b = src;
  p = s;
  end = e;
  mode = m;
  status = JSON_OK;
  count = 0;
  limit = maxFields;
  maxDepth = depthBound;
  keyTop = 0;
  while (p < end && (b[p] === 32 || b[p] === 9)) p++;
  if (p >= end || b[p] !== 123) return JSON_PLAIN;
  object(1);
  if (status === JSON_OK) {
    skipWs();
    if (p !== end) status = JSON_PLAIN;
  }
  return status;
}

/**
 * Whether the UTF-8 bytes [s, e) are a JSON object (after spaces and tabs)
 * this module encodes itself: JSON_OK, JSON_PLAIN or JSON_SLOW.
 */
export function scanJson(src: Buffer, s: number, e: number, maxFields: number, maxDepth: number): number {
  return run(src, s, e, 0, maxFields, maxDepth, false);
}

/**
 * Appends the object at [s, e) to `body` as an AnyValue (its kvlist tag
 * included) and returns its length, noting in severityAt where the root's
 * `keys` values start. Negative: one of the JSON_ codes, and the body is as
 * it was. `scanned`: scanJson said JSON_OK for these bytes and bounds, so
 * their keys need no second look.
 */
export function writeJson(body: BodyBuilder, src: Buffer, s: number, e: number, maxFields: number, maxDepth: number, scanned: boolean, keys: readonly Uint8Array[]): number {
  // The most a JSON byte can become: "-1," (3 bytes) is a 13-byte element.
  const room = 5 * (e - s) + 64;
  const at = body.claim(room);
  ob = body.buffer;
  o = at;
  severityKeys = keys;
  severityAt.fill(-1);
  try {
    const r = run(src, s, e, 1, maxFields, maxDepth, scanned);
    if (o > at + room) throw new Error(`JSON value written past its room (${o - at} > ${room} bytes)`);
    body.truncate(r === JSON_OK ? o : at);
    return r === JSON_OK ? o - at : r;
  } finally {
    ob = EMPTY;
  }
}
/** The JSON value starting at `at` in the bytes last written, as JSON.parse gives it (for a severity field). */
export function valueAt(src: Buffer, at: number, e: number): unknown {
  b = src;
  p = at;
  end = e;
  mode = 0;
  status = JSON_OK;
  count = 0;
  limit = Infinity;
  maxDepth = MAX_NESTING;
  trusted = true;
  keyTop = 0;
  skipWs();
  const s = p;
  value(0);
  if (status !== JSON_OK) return undefined;
  if (src[s] === 34) {
    let plain = true;
    for (let i = s + 1; i < p - 1; i++) if (src[i] === 92) plain = false;
    if (plain) return src.toString('utf8', s + 1, p - 1);
  }
  return JSON.parse(src.toString('utf8', s, p));
}
