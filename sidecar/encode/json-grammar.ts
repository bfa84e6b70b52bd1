// JSON's grammar over UTF-8 bytes, the steps json-anyvalue.ts's pass is made
// of: where a string, number, literal, key or colon ends, and whether the
// text stays exact (Exactness). Each step answers one offset (or a negative
// code), so the pass keeps its own state in locals.

/** What the steps tell the pass beside an offset. */
interface Exactness {
  /** The value holds every value of its text exactly (see JsonScan.exact). */
  exact: boolean;
}

export const JSON_OK = 0;
/** Not a JSON object: the line stays a plain message. */
export const JSON_PLAIN = -1;
/** Decided by the object path (see json-anyvalue.ts). */
export const JSON_SLOW = -3;

// The bytes of JSON's grammar.
const TAB = 0x09;
const LF = 0x0a;
const CR = 0x0d;
const SPACE = 0x20;
export const QUOTE = 0x22;
const PLUS = 0x2b;
export const COMMA = 0x2c;
export const MINUS = 0x2d;
const DOT = 0x2e;
const SLASH = 0x2f;
export const ZERO = 0x30;
const ONE = 0x31;
const EIGHT = 0x38;
export const NINE = 0x39;
export const COLON = 0x3a;
const UPPER_E = 0x45;
export const LEFT_BRACKET = 0x5b;
export const BACKSLASH = 0x5c;
const LOWER_B = 0x62;
const LOWER_D = 0x64;
const LOWER_E = 0x65;
export const LOWER_F = 0x66;
export const LOWER_N = 0x6e;
const LOWER_R = 0x72;
export const LOWER_T = 0x74;
const LOWER_U = 0x75;
export const LEFT_BRACE = 0x7b;
/** A container's closing bracket is its opening one plus this: `]` is `[` + 2, `}` is `{` + 2. */
export const CLOSES = 2;
/** ASCII upper case to lower case. */
const LOWER_CASE = 0x20;
/** Below this, a raw byte in a string is a control character, which JSON escapes. */
const FIRST_PRINTABLE = 0x20;

const TRUE = Buffer.from('true');
const FALSE = Buffer.from('false');
const NULL = Buffer.from('null');

/** Per byte: 1 for a hex digit. */
const HEX_DIGIT = new Uint8Array(256);
for (const c of '0123456789abcdefABCDEF') HEX_DIGIT[c.charCodeAt(0)] = 1;
/** Per byte: 1 for the letter of a two-character escape (\" \\ \/ \b \f \n \r \t). */
const SHORT_ESCAPE = new Uint8Array(256);
for (const c of [QUOTE, BACKSLASH, SLASH, LOWER_B, LOWER_F, LOWER_N, LOWER_R, LOWER_T]) SHORT_ESCAPE[c] = 1;

/** Where the JSON whitespace from `i` on ends. */
export function skipSpace(src: Buffer, i: number, e: number): number {
  while (i < e) {
    const c = src[i]!;
    if (c !== SPACE && c !== LF && c !== CR && c !== TAB) break;
    i++;
  }
  return i;
}

/** skipSpace() where there is mostly none (compact JSON): a byte above SPACE is no whitespace, and only the rest take the loop. */
export function spaceEnd(src: Buffer, i: number, e: number): number {
  return src[i]! > SPACE ? i : skipSpace(src, i, e);
}

/**
 * Steps over the string whose opening quote is at `i`; returns 1 + the index
 * of its closing quote, negated when it holds an escape; 0 when it is no JSON
 * string (unterminated, a raw control character, a bad escape).
 */
export function stringEnd(scan: Exactness, src: Buffer, i: number, e: number): number {
  i++;
  while (i < e) {
    const c = src[i]!;
    if (c === QUOTE) return i + 1;
    if (c === BACKSLASH) return escapedStringEnd(scan, src, i, e);
    if (c < FIRST_PRINTABLE) return 0;
    i++;
  }
  return 0;
}

/** stringEnd() from the string's first backslash, at `i`, on: most strings have none, and the common case stays small enough to inline. */
function escapedStringEnd(scan: Exactness, src: Buffer, i: number, e: number): number {
  while (i < e) {
    const c = src[i]!;
    if (c === QUOTE) return -(i + 1);
    if (c === BACKSLASH) {
      if (i + 1 >= e) return 0;
      const x = src[i + 1]!;
      if (x === LOWER_U) {
        if (i + 6 > e) return 0;
        for (let k = i + 2; k < i + 6; k++) if (HEX_DIGIT[src[k]!] === 0) return 0;
        // \uD800-\uDFFF: half of a pair, which a lone one would turn into U+FFFD on its way to UTF-8.
        if ((src[i + 2]! | LOWER_CASE) === LOWER_D && src[i + 3]! >= EIGHT) scan.exact = false;
        i += 6;
        continue;
      }
      if (SHORT_ESCAPE[x] === 0) return 0;
      i += 2;
      continue;
    }
    if (c < FIRST_PRINTABLE) return 0;
    i++;
  }
  return 0;
}

/** Where the digits from `i` on end. */
function digitsEnd(src: Buffer, i: number, e: number): number {
  while (i < e && src[i]! >= ZERO && src[i]! <= NINE) i++;
  return i;
}

/** The end of the JSON number at `i`, or -1 when there is none. */
export function numberEnd(scan: Exactness, src: Buffer, i: number, e: number): number {
  if (i < e && src[i] === MINUS) i++;
  if (i < e && src[i] === ZERO) i++;
  else if (i < e && src[i]! >= ONE && src[i]! <= NINE) i = digitsEnd(src, i, e);
  else return -1;
  if (i < e && src[i] === DOT) {
    const at = ++i;
    i = digitsEnd(src, i, e);
    if (i === at) return -1;
  }
  if (i < e && (src[i] === LOWER_E || src[i] === UPPER_E)) {
    // An exponent can take a number past a double's range (1e400 is Infinity).
    scan.exact = false;
    i++;
    if (i < e && (src[i] === PLUS || src[i] === MINUS)) i++;
    const at = i;
    i = digitsEnd(src, i, e);
    if (i === at) return -1;
  }
  return i;
}

const POW10 = [1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15];

/** The value of the valid JSON number [s, e), as JSON.parse gives it. */
export function numberOf(src: Buffer, s: number, e: number): number {
  let k = s;
  const neg = src[k] === MINUS;
  if (neg) k++;
  let v = 0;
  let digits = 0;
  let point = -1;
  for (; k < e; k++) {
    const c = src[k]!;
    if (c === DOT) point = k;
    else if (c >= ZERO && c <= NINE) {
      v = v * 10 + (c - ZERO);
      digits++;
    } else return Number(src.toString('latin1', s, e));
  }
  // At most 15 digits make an integer below 2^53, and a power of ten up to
  // 10^22 is exact: their quotient is correctly rounded, as JSON.parse's is.
  if (digits > 15) return Number(src.toString('latin1', s, e));
  if (point >= 0) v /= POW10[e - point - 1]!;
  return neg ? -v : v;
}

/** Whether `word` is at `i`. */
function wordAt(src: Buffer, i: number, e: number, word: Buffer): boolean {
  if (i + word.length > e) return false;
  for (let k = 1; k < word.length; k++) if (src[i + k] !== word[k]) return false;
  return true;
}

/** The end of the true, false or null that starts with `c` at `i`, or -1 when there is none. */
export function literalEnd(src: Buffer, i: number, e: number, c: number): number {
  const word = c === LOWER_T ? TRUE : c === LOWER_F ? FALSE : NULL;
  return wordAt(src, i, e, word) ? i + word.length : -1;
}

/** Leading spaces and tabs, then an object: where it starts, or -1. */
export function objectStart(src: Buffer, s: number, e: number): number {
  while (s < e && (src[s] === SPACE || src[s] === TAB)) s++;
  return s < e && src[s] === LEFT_BRACE ? s : -1;
}

/** Whether [s, e) begins like a JSON object (after spaces and tabs): scanJson says JSON_PLAIN to any line that does not. */
export function objectAhead(src: Buffer, s: number, e: number): boolean {
  return objectStart(src, s, e) >= 0;
}

