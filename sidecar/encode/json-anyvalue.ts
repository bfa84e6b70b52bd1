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
// more: the root, mostly). What the object path (JSON.parse, then otlp-wire.ts's
// sizeAnyValue and putAnyValue) would make differently is never guessed at: a line
// with a duplicate key (JSON.parse keeps the last), an integer-like key
// (objects list those first), an escaped key, a container deeper than the
// depth bound (kept as JSON text), more fields than the bound (JSON.parse
// would have merged duplicate keys before counting) or nesting past
// MAX_NESTING is answered SLOW, and the caller takes the object path.
// sidecar/test/json-anyvalue.test.ts holds the two paths to the same bytes.
import type { BodyBuilder } from './body.ts';
import { ANY_VALUE_ARRAY_VALUE, ANY_VALUE_BOOL_VALUE, ANY_VALUE_KVLIST_VALUE, ANY_VALUE_STRING_VALUE, ARRAY_VALUE_VALUES, KEY_VALUE_KEY, KEY_VALUE_LIST_VALUES, KEY_VALUE_VALUE, putNumberValue } from './otlp-wire.ts';
import { putVarint, varintSize } from './protobuf.ts';

export const JSON_OK = 0;
/** Not a JSON object: the line stays a plain message. */
export const JSON_PLAIN = -1;
/** Decided by the object path (see above). */
export const JSON_SLOW = -3;

/** Recursion stops here; deeper lines are the object path's (JSON.parse does not recurse). */
const MAX_NESTING = 64;

/**
 * Fills in the one byte left at `at` with the length of what was written
 * after it, up to `o`, moving that along if the length takes more; returns
 * the new end.
 */
function patch(ob: Buffer, at: number, o: number): number {
  const n = o - at - 1;
  if (n < 0x80) {
    ob[at] = n;
    return o;
  }
  const extra = varintSize(n) - 1;
  ob.copyWithin(at + 1 + extra, at + 1, o);
  putVarint(ob, at, n);
  return o + extra;
}

/**
 * Steps over the string whose opening quote is at `i`; returns 1 + the index
 * of its closing quote, negated when it holds an escape; 0 when it is no JSON
 * string (unterminated, a raw control character, a bad escape).
 */
function stringEnd(src: Buffer, i: number, e: number): number {
  let escaped = false;
  i++;
  while (i < e) {
    const c = src[i]!;
    if (c === 34) return escaped ? -(i + 1) : i + 1;
    if (c === 92) {
      if (i + 1 >= e) return 0;
      escaped = true;
      const x = src[i + 1]!;
      if (x === 117) {
        if (i + 6 > e) return 0;
        for (let k = i + 2; k < i + 6; k++) {
          const h = src[k]!;
          if (!((h >= 48 && h <= 57) || (h >= 65 && h <= 70) || (h >= 97 && h <= 102))) return 0;
        }
        // \uD800-\uDFFF: half of a pair, which a lone one would turn into U+FFFD on its way to UTF-8.
        if ((src[i + 2]! | 0x20) === 100 && src[i + 3]! >= 56) passExact = false;
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

/** The end of the JSON number at `i`, or -1 when there is none. */
function numberEnd(src: Buffer, i: number, e: number): number {
  if (i < e && src[i] === 45) i++;
  if (i < e && src[i] === 48) i++;
  else if (i < e && src[i]! >= 49 && src[i]! <= 57) while (i < e && src[i]! >= 48 && src[i]! <= 57) i++;
  else return -1;
  if (i < e && src[i] === 46) {
    const at = ++i;
    while (i < e && src[i]! >= 48 && src[i]! <= 57) i++;
    if (i === at) return -1;
  }
  if (i < e && (src[i] === 101 || src[i] === 69)) {
    // An exponent can take a number past a double's range (1e400 is Infinity).
    passExact = false;
    i++;
    if (i < e && (src[i] === 43 || src[i] === 45)) i++;
    const at = i;
    while (i < e && src[i]! >= 48 && src[i]! <= 57) i++;
    if (i === at) return -1;
  }
  return i;
}

const POW10 = [1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15];

/** The value of the valid JSON number [s, e), as JSON.parse gives it. */
function numberOf(src: Buffer, s: number, e: number): number {
  let k = s;
  const neg = src[k] === 45;
  if (neg) k++;
  let v = 0;
  let digits = 0;
  let point = -1;
  for (; k < e; k++) {
    const c = src[k]!;
    if (c === 46) point = k;
    else if (c >= 48 && c <= 57) {
      v = v * 10 + (c - 48);
      digits++;
    } else return Number(src.toString('latin1', s, e));
  }
  // At most 15 digits make an integer below 2^53, and a power of ten up to
  // 10^22 is exact: their quotient is correctly rounded, as JSON.parse's is.
  if (digits > 15) return Number(src.toString('latin1', s, e));
  if (point >= 0) v /= POW10[e - point - 1]!;
  return neg ? -v : v;
}

// The open containers of a pass, innermost at `top`; a pass runs to completion before the next starts.
const KIND = new Uint8Array(MAX_NESTING + 2);
/** Where the container's length byte is (write). */
const LEN_AT = new Int32Array(MAX_NESTING + 2);
/** Where the current element's KeyValue length byte is (objects, write). */
const KV_AT = new Int32Array(MAX_NESTING + 2);
/** Where the current element's value length byte is (write). */
const V_AT = new Int32Array(MAX_NESTING + 2);
/** Where the container's keys start in KEY_HASHES. */
const KEY_BASE = new Int32Array(MAX_NESTING + 2);
/** Key hashes of the objects open on the path, for duplicate keys. */
const KEY_HASHES = new Int32Array(1024);

/** Where the root's severity-like values start (write only), by SEVERITY_KEYS index; -1: absent. */
export const severityAt = [-1, -1, -1];
/** Where the last pass ended (write: in the output; decide: in the input). */
let passEnd = 0;
/** Whether the last pass's value holds every value of its text exactly (see passWasExact). */
let passExact = true;

/**
 * Whether the value of the last pass (scanJson, writeJson, AnyValueArena's
 * write) holds every value of its JSON text exactly, so that the text can go
 * without it: no number a double may not carry digit for digit (more than 15
 * characters, an exponent, a minus zero), no escaped half of a surrogate
 * pair. Read it before the next pass (a severity lookup is one).
 */
export function passWasExact(): boolean {
  return passExact;
}

/**
 * One pass over the JSON value at `i` (after JSON whitespace), in one loop
 * over an explicit stack: its state lives in locals, which the loop keeps in
 * registers (recursive functions over module-wide state reload it from
 * memory at every byte). `ob` null: decide only. `whole`: nothing but
 * whitespace may follow the value. `trusted`: scanned already with these
 * bounds, so keys need no second look. `keys`: the root keys whose values'
 * positions go to severityAt.
 */
function pass(src: Buffer, i: number, e: number, ob: Buffer | null, o: number, limit: number, maxDepth: number, trusted: boolean, whole: boolean, keys: readonly Uint8Array[]): number {
  let top = -1;
  let count = 0;
  let keyTop = 0;
  passExact = true;
  for (;;) {
    // A value starts at i.
    while (i < e) {
      const c = src[i]!;
      if (c !== 32 && c !== 10 && c !== 13 && c !== 9) break;
      i++;
    }
    if (i >= e) return JSON_PLAIN;
    let c = src[i]!;
    let opened = false;
    if (c === 34) {
      const r = stringEnd(src, i, e);
      if (r === 0) return JSON_PLAIN;
      if (ob !== null) {
        ob[o++] = ANY_VALUE_STRING_VALUE;
        if (r > 0) {
          const n = r - i - 2;
          if (n < 0x80) ob[o++] = n;
          else o = putVarint(ob, o, n);
          if (n < 32) for (let k = i + 1; k < r - 1; k++) ob[o++] = src[k]!;
          else o += src.copy(ob, o, i + 1, r - 1);
        } else {
          const v = JSON.parse(src.toString('utf8', i, -r)) as string;
          o = putVarint(ob, o, Buffer.byteLength(v, 'utf8'));
          o += ob.write(v, o);
        }
      }
      i = r > 0 ? r : -r;
    } else if (c === 123 || c === 91) {
      // A container at depth top + 2 (the root is 1): deeper than the bound, it would be kept as JSON text.
      if (top + 2 > maxDepth || top + 2 > MAX_NESTING) return JSON_SLOW;
      top++;
      KIND[top] = c;
      KEY_BASE[top] = keyTop;
      if (ob !== null) {
        ob[o++] = c === 123 ? ANY_VALUE_KVLIST_VALUE : ANY_VALUE_ARRAY_VALUE;
        LEN_AT[top] = o++;
      }
      i++;
      while (i < e) {
        const x = src[i]!;
        if (x !== 32 && x !== 10 && x !== 13 && x !== 9) break;
        i++;
      }
      if (i < e && src[i] === c + 2) {
        // Empty: ] is [ + 2, } is { + 2.
        i++;
        if (ob !== null) o = patch(ob, LEN_AT[top]!, o);
        top--;
      } else opened = true;
    } else if (c === 116 || c === 102) {
      const t = c === 116;
      if (t ? !(i + 4 <= e && src[i + 1] === 114 && src[i + 2] === 117 && src[i + 3] === 101) : !(i + 5 <= e && src[i + 1] === 97 && src[i + 2] === 108 && src[i + 3] === 115 && src[i + 4] === 101)) return JSON_PLAIN;
      i += t ? 4 : 5;
      if (ob !== null) {
        ob[o++] = ANY_VALUE_BOOL_VALUE;
        ob[o++] = t ? 1 : 0;
      }
    } else if (c === 110) {
      if (!(i + 4 <= e && src[i + 1] === 117 && src[i + 2] === 108 && src[i + 3] === 108)) return JSON_PLAIN;
      i += 4;
    } else {
      const n = numberEnd(src, i, e);
      if (n < 0) return JSON_PLAIN;
      // Over 15 characters: maybe more significant digits than a double keeps; -0 and -0.0: a zero whose sign an int_value drops.
      if (n - i > 15 || (c === 45 && src[i + 1] === 48)) passExact = false;
      if (ob !== null) o = putNumberValue(ob, o, numberOf(src, i, n));
      i = n;
    }
    if (!opened) {
      // A value is complete: its element closes, then a comma starts the next one, or a bracket closes its container (itself a complete value).
      for (;;) {
        if (top < 0) {
          if (whole) {
            while (i < e) {
              const x = src[i]!;
              if (x !== 32 && x !== 10 && x !== 13 && x !== 9) break;
              i++;
            }
            if (i !== e) return JSON_PLAIN;
          }
          passEnd = ob !== null ? o : i;
          return JSON_OK;
        }
        const kind = KIND[top]!;
        if (ob !== null) {
          o = patch(ob, V_AT[top]!, o);
          if (kind === 123) o = patch(ob, KV_AT[top]!, o);
        }
        while (i < e) {
          const x = src[i]!;
          if (x !== 32 && x !== 10 && x !== 13 && x !== 9) break;
          i++;
        }
        if (i >= e) return JSON_PLAIN;
        c = src[i]!;
        if (c === 44) {
          i++;
          break;
        }
        if (c !== kind + 2) return JSON_PLAIN;
        i++;
        if (ob !== null) o = patch(ob, LEN_AT[top]!, o);
        keyTop = KEY_BASE[top]!;
        top--;
      }
    }
    // An element of the container at top starts at i.
    if (++count > limit) return JSON_SLOW;
    if (KIND[top] === 91) {
      if (ob !== null) {
        ob[o++] = ARRAY_VALUE_VALUES;
        V_AT[top] = o++;
      }
      continue;
    }
    while (i < e) {
      const x = src[i]!;
      if (x !== 32 && x !== 10 && x !== 13 && x !== 9) break;
      i++;
    }
    if (i >= e || src[i] !== 34) return JSON_PLAIN;
    const ks = i + 1;
    const r = stringEnd(src, i, e);
    if (r === 0) return JSON_PLAIN;
    // An escaped key decodes to other bytes; the object path tells.
    if (r < 0) return JSON_SLOW;
    const ke = r - 1;
    i = r;
    if (!trusted) {
      // A key JSON.parse would order first (integer-like) or merge (a duplicate; two equal hashes may be two different keys): the object path tells.
      let hash = 0x811c9dc5;
      let digits = ke > ks;
      for (let k = ks; k < ke; k++) {
        const x = src[k]!;
        if (x < 48 || x > 57) digits = false;
        hash = Math.imul(hash ^ x, 0x01000193);
      }
      hash ^= ke - ks;
      if (digits || keyTop >= KEY_HASHES.length) return JSON_SLOW;
      for (let k = KEY_BASE[top]!; k < keyTop; k++) if (KEY_HASHES[k] === hash) return JSON_SLOW;
      KEY_HASHES[keyTop++] = hash;
    }
    while (i < e) {
      const x = src[i]!;
      if (x !== 32 && x !== 10 && x !== 13 && x !== 9) break;
      i++;
    }
    if (i >= e || src[i] !== 58) return JSON_PLAIN;
    i++;
    if (ob !== null) {
      if (top === 0) noteSeverity(src, ks, ke, i, keys);
      ob[o++] = KEY_VALUE_LIST_VALUES;
      KV_AT[top] = o++;
      ob[o++] = KEY_VALUE_KEY;
      const n = ke - ks;
      if (n < 0x80) ob[o++] = n;
      else o = putVarint(ob, o, n);
      if (n < 32) for (let k = ks; k < ke; k++) ob[o++] = src[k]!;
      else o += src.copy(ob, o, ks, ke);
      ob[o++] = KEY_VALUE_VALUE;
      V_AT[top] = o++;
    }
  }
}

function noteSeverity(src: Buffer, ks: number, ke: number, at: number, keys: readonly Uint8Array[]): void {
  for (let k = 0; k < keys.length; k++) {
    const key = keys[k]!;
    if (key.length !== ke - ks) continue;
    let same = true;
    for (let i = 0; i < key.length; i++) if (key[i] !== src[ks + i]) same = false;
    if (same) severityAt[k] = at;
  }
}

/** Leading spaces and tabs, then an object: where it starts, or -1. */
function objectStart(src: Buffer, s: number, e: number): number {
  while (s < e && (src[s] === 32 || src[s] === 9)) s++;
  return s < e && src[s] === 123 ? s : -1;
}

/** Whether [s, e) begins like a JSON object (after spaces and tabs): scanJson says JSON_PLAIN to any line that does not. */
export function objectAhead(src: Buffer, s: number, e: number): boolean {
  return objectStart(src, s, e) >= 0;
}

/**
 * Whether the UTF-8 bytes [s, e) are a JSON object (after spaces and tabs)
 * this module encodes itself: JSON_OK, JSON_PLAIN or JSON_SLOW.
 */
export function scanJson(src: Buffer, s: number, e: number, maxFields: number, maxDepth: number): number {
  const at = objectStart(src, s, e);
  return at < 0 ? JSON_PLAIN : pass(src, at, e, null, 0, maxFields, maxDepth, false, true, NO_KEYS);
}

const NO_KEYS: readonly Uint8Array[] = [];

/**
 * Appends the object at [s, e) to `body` as an AnyValue (its kvlist tag
 * included) and returns its length, noting in severityAt where the root's
 * `keys` values start. Negative: one of the JSON_ codes, and the body is as
 * it was. `scanned`: scanJson said JSON_OK for these bytes and bounds, so
 * their keys need no second look.
 */
export function writeJson(body: BodyBuilder, src: Buffer, s: number, e: number, maxFields: number, maxDepth: number, scanned: boolean, keys: readonly Uint8Array[]): number {
  severityAt.fill(-1);
  const start = objectStart(src, s, e);
  if (start < 0) return JSON_PLAIN;
  const room = roomFor(s, e);
  const at = body.claim(room);
  const r = writeAt(src, start, e, body.buffer, at, room, maxFields, maxDepth, scanned, keys);
  body.truncate(r === JSON_OK ? passEnd : at);
  return r === JSON_OK ? passEnd - at : r;
}

/** The most the value of [s, e) can take: "-1," (3 bytes) is a 13-byte element. */
function roomFor(s: number, e: number): number {
  return 5 * (e - s) + 64;
}

/** A pass that writes the object at `start` into `buf` at `at`, within `room` bytes: JSON_OK (passEnd is where it ends) or a JSON_ code. */
function writeAt(src: Buffer, start: number, e: number, buf: Buffer, at: number, room: number, maxFields: number, maxDepth: number, trusted: boolean, keys: readonly Uint8Array[]): number {
  const r = pass(src, start, e, buf, at, maxFields, maxDepth, trusted, true, keys);
  if (r === JSON_OK && passEnd > at + room) throw new Error(`JSON value written past its room (${passEnd - at} > ${room} bytes)`);
  return r;
}

/** A slab of the arena: records point into it, and it is freed with the last of them. */
const SLAB_BYTES = 64 * 1024;

/**
 * Where the shaping stage writes JSON lines' OTLP values for the OTLP
 * protobuf sink, in the one pass that also decides they are JSON (the
 * encoder then copies them instead of reading the line again). Append-only
 * slabs: a record holds its slab until its batch is acknowledged, so a slab
 * outlives the writes into it by one in-flight window at most (64 KiB holds
 * about two hundred values).
 */
export class AnyValueArena {
  private slab = Buffer.allocUnsafe(0);
  private used = 0;
  /** The last value written (write() answered JSON_OK): slab, offset, length. */
  buffer: Buffer = this.slab;
  at = 0;
  length = 0;

  /**
   * writeJson's verdict on [s, e) with the checks scanJson makes (the bytes
   * were not scanned before); on JSON_OK the value is at buffer, at, length
   * and severityAt holds where the root's `keys` values start.
   */
  write(src: Buffer, s: number, e: number, maxFields: number, maxDepth: number, keys: readonly Uint8Array[]): number {
    severityAt.fill(-1);
    const start = objectStart(src, s, e);
    if (start < 0) return JSON_PLAIN;
    const room = roomFor(s, e);
    if (this.used + room > this.slab.length) {
      this.slab = Buffer.allocUnsafe(Math.max(SLAB_BYTES, room));
      this.used = 0;
    }
    const r = writeAt(src, start, e, this.slab, this.used, room, maxFields, maxDepth, false, keys);
    if (r !== JSON_OK) return r;
    this.buffer = this.slab;
    this.at = this.used;
    this.length = passEnd - this.used;
    this.used = passEnd;
    return JSON_OK;
  }
}

/** The JSON value starting at `at` (after whitespace) in `src`, as JSON.parse gives it (for a severity field); undefined if there is none. */
export function valueAt(src: Buffer, at: number, e: number): unknown {
  while (at < e && (src[at] === 32 || src[at] === 10 || src[at] === 13 || src[at] === 9)) at++;
  if (pass(src, at, e, null, 0, Infinity, MAX_NESTING, true, false, NO_KEYS) !== JSON_OK) return undefined;
  const end = passEnd;
  if (src[at] === 34) {
    let plain = true;
    for (let i = at + 1; i < end - 1; i++) if (src[i] === 92) plain = false;
    if (plain) return src.toString('utf8', at + 1, end - 1);
  }
  return JSON.parse(src.toString('utf8', at, end));
}
