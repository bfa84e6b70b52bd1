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
import {
  CLOSES,
  COMMA,
  JSON_OK,
  JSON_PLAIN,
  JSON_SLOW,
  LEFT_BRACE,
  LEFT_BRACKET,
  LOWER_F,
  LOWER_N,
  LOWER_T,
  QUOTE,
  BACKSLASH,
  COLON,
  NINE,
  ZERO,
  numberOf,
  objectStart,
  numberEnd,
  literalEnd,
  MINUS,
  skipSpace,
  spaceEnd,
  stringEnd,
} from './json-grammar.ts';

export { JSON_OK, JSON_PLAIN, JSON_SLOW, objectAhead } from './json-grammar.ts';

/** Recursion stops here; deeper lines are the object path's (JSON.parse does not recurse). */
const MAX_NESTING = 64;
/** Root keys whose values a write notes (JsonScan.severityAt). */
const MAX_NOTED_KEYS = 8;
/** Lengths below this take one byte as a varint: the byte left for a container's length, mostly enough. */
const ONE_BYTE_VARINT = 0x80;
/** A key's hash, for duplicate keys: 32-bit FNV-1a. */
const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;
/** Up to this many bytes a loop copies faster than a native call. */
const SHORT_COPY = 32;

/**
 * What a pass over a JSON text found, and the stack it keeps its open
 * containers on (innermost at `top`). The caller owns one and hands it to
 * every call, which sets its results: no call reads or changes another's.
 * Reused from call to call, so a pass allocates nothing.
 */
export class JsonScan {
  /** Where the value ended: in the output for a write, in the input for a decision. */
  end = 0;
  /**
   * Whether the value holds every value of its text exactly, so that the
   * text can go without it: no number a double may not carry digit for digit
   * (more than 15 characters, an exponent, a minus zero), no escaped half of
   * a surrogate pair.
   */
  exact = true;
  /** A write's: where the root's values of the noted keys start, by key index; -1: absent. */
  readonly severityAt = new Int32Array(MAX_NOTED_KEYS);
  // The stack.
  readonly kind = new Uint8Array(MAX_NESTING + 2);
  /** Where the container's length byte is (write). */
  readonly lenAt = new Int32Array(MAX_NESTING + 2);
  /** Where the current element's KeyValue length byte is (objects, write). */
  readonly kvAt = new Int32Array(MAX_NESTING + 2);
  /** Where the current element's value length byte is (write). */
  readonly valueAt = new Int32Array(MAX_NESTING + 2);
  /** Where the container's keys start in keyHashes. */
  readonly keyBase = new Int32Array(MAX_NESTING + 2);
  /** Key hashes of the objects open on the path, for duplicate keys. */
  readonly keyHashes = new Int32Array(1024);
}

/**
 * Fills in the one byte left at `at` with the length of what was written
 * after it, up to `o`, moving that along if the length takes more; returns
 * the new end.
 */
function patch(ob: Buffer, at: number, o: number): number {
  const n = o - at - 1;
  if (n >= ONE_BYTE_VARINT) return patchWide(ob, at, o, n);
  ob[at] = n;
  return o;
}

/** patch() for a length of more than one byte: the content moves along. */
function patchWide(ob: Buffer, at: number, o: number, n: number): number {
  const extra = varintSize(n) - 1;
  ob.copyWithin(at + 1 + extra, at + 1, o);
  putVarint(ob, at, n);
  return o + extra;
}

/** The length and content of the string [i, end) that holds an escape, decoded. */
function putEscaped(ob: Buffer, o: number, src: Buffer, i: number, end: number): number {
  const v = JSON.parse(src.toString('utf8', i, end)) as string;
  o = putVarint(ob, o, Buffer.byteLength(v, 'utf8'));
  return o + ob.write(v, o);
}

/**
 * One pass over the JSON value at `i` (after JSON whitespace), in one loop
 * over an explicit stack (scan's): the loop's state lives in locals, which
 * it keeps in registers (recursive functions over shared state reload it
 * from memory at every byte). Longer than the files' 80-line bound on
 * purpose: split into steps (a key's, a string's, a member head's), the steps
 * outgrow TurboFan's inlining budget for one function and stay calls, and
 * bench:sidecar's shaping stage ran 10% slower per CPU-second on JSON lines.
 * What is rare (escapes, literals, wide lengths) is in functions of its own. `ob` null: decide only. `whole`: nothing but
 * whitespace may follow the value. `trusted`: scanned already with these
 * bounds, so keys need no second look. `keys`: the root keys whose values'
 * positions go to scan.severityAt. On JSON_OK, scan.end is where it ended.
 */
function pass(scan: JsonScan, src: Buffer, i: number, e: number, ob: Buffer | null, o: number, limit: number, maxDepth: number, trusted: boolean, whole: boolean, keys: readonly Uint8Array[]): number {
  const { kind, lenAt, kvAt, valueAt, keyBase, keyHashes } = scan;
  let top = -1;
  let count = 0;
  let keyTop = 0;
  scan.exact = true;
  for (;;) {
    // A value starts at i.
    i = spaceEnd(src, i, e);
    if (i >= e) return JSON_PLAIN;
    let c = src[i]!;
    let opened = false;
    if (c === QUOTE) {
      const r = stringEnd(scan, src, i, e);
      if (r === 0) return JSON_PLAIN;
      if (ob !== null) {
        ob[o++] = ANY_VALUE_STRING_VALUE;
        if (r < 0) o = putEscaped(ob, o, src, i, -r);
        else {
          const n = r - i - 2;
          if (n < ONE_BYTE_VARINT) ob[o++] = n;
          else o = putVarint(ob, o, n);
          if (n < SHORT_COPY) for (let k = i + 1; k < r - 1; k++) ob[o++] = src[k]!;
          else o += src.copy(ob, o, i + 1, r - 1);
        }
      }
      i = r > 0 ? r : -r;
    } else if (c === LEFT_BRACE || c === LEFT_BRACKET) {
      // A container at depth top + 2 (the root is 1): deeper than the bound, it would be kept as JSON text.
      if (top + 2 > maxDepth || top + 2 > MAX_NESTING) return JSON_SLOW;
      top++;
      kind[top] = c;
      keyBase[top] = keyTop;
      if (ob !== null) {
        ob[o++] = c === LEFT_BRACE ? ANY_VALUE_KVLIST_VALUE : ANY_VALUE_ARRAY_VALUE;
        lenAt[top] = o++;
      }
      i = spaceEnd(src, i + 1, e);
      if (i < e && src[i] === c + CLOSES) {
        i++;
        if (ob !== null) o = patch(ob, lenAt[top]!, o);
        top--;
      } else opened = true;
    } else if (c === LOWER_T || c === LOWER_F || c === LOWER_N) {
      const end = literalEnd(src, i, e, c);
      if (end < 0) return JSON_PLAIN;
      if (ob !== null && c !== LOWER_N) {
        ob[o++] = ANY_VALUE_BOOL_VALUE;
        ob[o++] = c === LOWER_T ? 1 : 0;
      }
      i = end;
    } else {
      const n = numberEnd(scan, src, i, e);
      if (n < 0) return JSON_PLAIN;
      // Over 15 characters: maybe more significant digits than a double keeps; -0 and -0.0: a zero whose sign an int_value drops.
      if (n - i > 15 || (c === MINUS && src[i + 1] === ZERO)) scan.exact = false;
      if (ob !== null) o = putNumberValue(ob, o, numberOf(src, i, n));
      i = n;
    }
    if (!opened) {
      // A value is complete: its element closes, then a comma starts the next one, or a bracket closes its container (itself a complete value).
      for (;;) {
        if (top < 0) {
          if (whole && (i = spaceEnd(src, i, e)) !== e) return JSON_PLAIN;
          scan.end = ob !== null ? o : i;
          return JSON_OK;
        }
        const k = kind[top]!;
        if (ob !== null) {
          o = patch(ob, valueAt[top]!, o);
          if (k === LEFT_BRACE) o = patch(ob, kvAt[top]!, o);
        }
        i = spaceEnd(src, i, e);
        if (i >= e) return JSON_PLAIN;
        c = src[i]!;
        if (c === COMMA) {
          i++;
          break;
        }
        if (c !== k + CLOSES) return JSON_PLAIN;
        i++;
        if (ob !== null) o = patch(ob, lenAt[top]!, o);
        keyTop = keyBase[top]!;
        top--;
      }
    }
    // An element of the container at top starts at i.
    if (++count > limit) return JSON_SLOW;
    if (kind[top] === LEFT_BRACKET) {
      if (ob !== null) {
        ob[o++] = ARRAY_VALUE_VALUES;
        valueAt[top] = o++;
      }
      continue;
    }
    i = spaceEnd(src, i, e);
    if (i >= e || src[i] !== QUOTE) return JSON_PLAIN;
    const ks = i + 1;
    const r = stringEnd(scan, src, i, e);
    if (r === 0) return JSON_PLAIN;
    // An escaped key decodes to other bytes; the object path tells.
    if (r < 0) return JSON_SLOW;
    const ke = r - 1;
    i = r;
    if (!trusted) {
      // A key JSON.parse would order first (integer-like) or merge (a duplicate; two equal hashes may be two different keys): the object path tells.
      let hash = FNV_OFFSET;
      let digits = ke > ks;
      for (let k = ks; k < ke; k++) {
        const x = src[k]!;
        if (x < ZERO || x > NINE) digits = false;
        hash = Math.imul(hash ^ x, FNV_PRIME);
      }
      hash ^= ke - ks;
      if (digits || keyTop >= keyHashes.length) return JSON_SLOW;
      for (let k = keyBase[top]!; k < keyTop; k++) if (keyHashes[k] === hash) return JSON_SLOW;
      keyHashes[keyTop++] = hash;
    }
    i = spaceEnd(src, i, e);
    if (i >= e || src[i] !== COLON) return JSON_PLAIN;
    i++;
    if (ob !== null) {
      if (top === 0) noteKey(scan, src, ks, ke, i, keys);
      ob[o++] = KEY_VALUE_LIST_VALUES;
      kvAt[top] = o++;
      ob[o++] = KEY_VALUE_KEY;
      const n = ke - ks;
      if (n < ONE_BYTE_VARINT) ob[o++] = n;
      else o = putVarint(ob, o, n);
      if (n < SHORT_COPY) for (let k = ks; k < ke; k++) ob[o++] = src[k]!;
      else o += src.copy(ob, o, ks, ke);
      ob[o++] = KEY_VALUE_VALUE;
      valueAt[top] = o++;
    }
  }
}

/** Notes in scan.severityAt where the value of the root key [ks, ke) starts, if it is one of `keys`. */
function noteKey(scan: JsonScan, src: Buffer, ks: number, ke: number, at: number, keys: readonly Uint8Array[]): void {
  for (let k = 0; k < keys.length; k++) {
    const key = keys[k]!;
    if (key.length !== ke - ks) continue;
    let same = true;
    for (let i = 0; i < key.length; i++) if (key[i] !== src[ks + i]) same = false;
    if (same) scan.severityAt[k] = at;
  }
}

/**
 * Whether the UTF-8 bytes [s, e) are a JSON object (after spaces and tabs)
 * this module encodes itself: JSON_OK, JSON_PLAIN or JSON_SLOW; with
 * JSON_OK, scan.exact says whether the value holds the text exactly.
 */
export function scanJson(scan: JsonScan, src: Buffer, s: number, e: number, maxFields: number, maxDepth: number): number {
  const at = objectStart(src, s, e);
  return at < 0 ? JSON_PLAIN : pass(scan, src, at, e, null, 0, maxFields, maxDepth, false, true, NO_KEYS);
}

const NO_KEYS: readonly Uint8Array[] = [];

/**
 * Appends the object at [s, e) to `body` as an AnyValue (its kvlist tag
 * included) and returns its length, noting in scan.severityAt where the
 * root's `keys` values start. Negative: one of the JSON_ codes, and the body
 * is as it was. `scanned`: scanJson said JSON_OK for these bytes and bounds,
 * so their keys need no second look.
 */
export function writeJson(scan: JsonScan, body: BodyBuilder, src: Buffer, s: number, e: number, maxFields: number, maxDepth: number, scanned: boolean, keys: readonly Uint8Array[]): number {
  scan.severityAt.fill(-1);
  const start = objectStart(src, s, e);
  if (start < 0) return JSON_PLAIN;
  const room = roomFor(s, e);
  const at = body.claim(room);
  const r = writeAt(scan, src, start, e, body.buffer, at, room, maxFields, maxDepth, scanned, keys);
  body.truncate(r === JSON_OK ? scan.end : at);
  return r === JSON_OK ? scan.end - at : r;
}

/** The most the value of [s, e) can take: "-1," (3 bytes) is a 13-byte element. */
function roomFor(s: number, e: number): number {
  return 5 * (e - s) + 64;
}

/** A pass that writes the object at `start` into `buf` at `at`, within `room` bytes: JSON_OK (scan.end is where it ends) or a JSON_ code. */
function writeAt(scan: JsonScan, src: Buffer, start: number, e: number, buf: Buffer, at: number, room: number, maxFields: number, maxDepth: number, trusted: boolean, keys: readonly Uint8Array[]): number {
  if (keys.length > MAX_NOTED_KEYS) throw new RangeError(`at most ${MAX_NOTED_KEYS} keys are noted`);
  const r = pass(scan, src, start, e, buf, at, maxFields, maxDepth, trusted, true, keys);
  if (r === JSON_OK && scan.end > at + room) throw new Error(`JSON value written past its room (${scan.end - at} > ${room} bytes)`);
  return r;
}

/** A slab of the arena: records point into it, and it is freed with the last of them. */
const SLAB_BYTES = 64 * 1024;

/**
 * Where the OTLP encoder writes JSON lines' values in the one pass that also
 * decides, for the shaping stage, that they are JSON (OtlpEncoder.prepare),
 * and copies them from when it encodes their records instead of reading the
 * lines again. Append-only slabs: a record holds its slab until it is
 * encoded, so a slab outlives the writes into it by a batch or so (64 KiB
 * holds about two hundred values).
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
   * and scan.severityAt holds where the root's `keys` values start.
   */
  write(scan: JsonScan, src: Buffer, s: number, e: number, maxFields: number, maxDepth: number, keys: readonly Uint8Array[]): number {
    scan.severityAt.fill(-1);
    const start = objectStart(src, s, e);
    if (start < 0) return JSON_PLAIN;
    const room = roomFor(s, e);
    if (this.used + room > this.slab.length) {
      this.slab = Buffer.allocUnsafe(Math.max(SLAB_BYTES, room));
      this.used = 0;
    }
    const r = writeAt(scan, src, start, e, this.slab, this.used, room, maxFields, maxDepth, false, keys);
    if (r !== JSON_OK) return r;
    this.buffer = this.slab;
    this.at = this.used;
    this.length = scan.end - this.used;
    this.used = scan.end;
    return JSON_OK;
  }
}

/** valueAt's: a pass of its own, which leaves its callers' scans as they were. */
const VALUE_SCAN = new JsonScan();

/** The JSON value starting at `at` (after whitespace) in `src`, as JSON.parse gives it (for a severity field); undefined if there is none. */
export function valueAt(src: Buffer, at: number, e: number): unknown {
  at = skipSpace(src, at, e);
  if (pass(VALUE_SCAN, src, at, e, null, 0, Infinity, MAX_NESTING, true, false, NO_KEYS) !== JSON_OK) return undefined;
  const end = VALUE_SCAN.end;
  if (src[at] === QUOTE) {
    let plain = true;
    for (let i = at + 1; i < end - 1; i++) if (src[i] === BACKSLASH) plain = false;
    if (plain) return src.toString('utf8', at + 1, end - 1);
  }
  return JSON.parse(src.toString('utf8', at, end));
}
