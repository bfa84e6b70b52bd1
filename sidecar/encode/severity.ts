// A record's OpenTelemetry severity from its level-like field (SEVERITY_KEYS):
// from the parsed fields (the object path) or from the JSON bytes where the
// byte path found those fields (json-anyvalue.ts's JsonScan.severityAt).
import { SEVERITY_KEYS } from '../../src/contract/record.ts';
import type { Fields } from '../records/record.ts';
import { valueAt, type JsonScan } from './json-anyvalue.ts';
import { BACKSLASH, QUOTE, skipSpace } from './json-grammar.ts';

// A Map: a tenant's level value is looked up here, and an object literal would answer "constructor" or "__proto__" from its prototype.
const SEVERITY_NUMBERS = new Map<string, number>([
  ['trace', 1],
  ['debug', 5],
  ['info', 9],
  ['information', 9],
  ['informational', 9],
  ['notice', 10],
  ['warn', 13],
  ['warning', 13],
  ['error', 17],
  ['err', 17],
  ['fatal', 21],
  ['critical', 21],
  ['crit', 21],
  ['panic', 21],
  ['alert', 21],
  ['emerg', 21],
  ['emergency', 21],
]);
/** pino's and bunyan's numeric levels. */
const NUMERIC_LEVELS = new Map<number, Severity>([10, 20, 30, 40, 50, 60].map((v, i) => [v, { number: [1, 5, 9, 13, 17, 21][i]!, text: ['trace', 'debug', 'info', 'warn', 'error', 'fatal'][i]! }]));

export interface Severity {
  readonly number: number;
  readonly text: string;
}

/** OpenTelemetry's severity of a record from its first level-like field; undefined when none is recognised. */
export function severityOf(fields: Fields): Severity | undefined {
  for (const key of SEVERITY_KEYS) {
    const s = severityOfValue(fields[key]);
    if (s) return s;
  }
  return undefined;
}

function severityOfValue(v: unknown): Severity | undefined {
  if (typeof v === 'string') {
    const n = SEVERITY_NUMBERS.get(v.trim().toLowerCase());
    if (n !== undefined) return { number: n, text: v };
  } else if (typeof v === 'number') return NUMERIC_LEVELS.get(v);
  return undefined;
}

export const SEVERITY_KEY_BYTES = SEVERITY_KEYS.map((k) => Buffer.from(k, 'utf8'));

/**
 * The last level values seen as bytes, with their severity: a Job's lines
 * repeat a handful of levels, and matching the bytes spares a string, its
 * trimmed and lower-cased copies and a lookup per record.
 */
const LEVEL_CACHE_SIZE = 8;
const LEVEL_MAX_BYTES = 24;
const levelBytes = Buffer.alloc(LEVEL_CACHE_SIZE * LEVEL_MAX_BYTES);
const levelLengths = new Int32Array(LEVEL_CACHE_SIZE).fill(-1);
const levelSeverities: (Severity | undefined)[] = new Array<Severity | undefined>(LEVEL_CACHE_SIZE).fill(undefined);
let levelNext = 0;

/** A cached level whose bytes are [s, e) of src; -1 if none. */
function cachedLevel(src: Buffer, s: number, e: number): number {
  const n = e - s;
  for (let c = 0; c < LEVEL_CACHE_SIZE; c++) {
    if (levelLengths[c] !== n) continue;
    const base = c * LEVEL_MAX_BYTES;
    let same = true;
    for (let i = 0; i < n && same; i++) same = levelBytes[base + i] === src[s + i];
    if (same) return c;
  }
  return -1;
}

/** Per byte: 1 for what a number's token holds (digits, minus, point). */
const NUMBER_BYTE = new Uint8Array(256);
for (const c of '0123456789-.') NUMBER_BYTE[c.charCodeAt(0)] = 1;
/** Per byte: 1 for what may follow a whole token (a comma, a closing bracket, whitespace). */
const AFTER_TOKEN = new Uint8Array(256);
for (const c of ',}] \t\n\r') AFTER_TOKEN[c.charCodeAt(0)] = 1;

/**
 * The end of the level value's token at `at` as written: a string's bytes
 * with its quotes, or a number's; -1 when it is neither or longer than the
 * cache's slots.
 */
function tokenEnd(src: Buffer, at: number, e: number): number {
  let end = at;
  if (src[at] === QUOTE) {
    end++;
    while (end < e && end - at < LEVEL_MAX_BYTES && src[end] !== QUOTE && src[end] !== BACKSLASH) end++;
    return end < e && src[end] === QUOTE ? end + 1 : -1;
  }
  while (end < e && end - at < LEVEL_MAX_BYTES && NUMBER_BYTE[src[end]!] === 1) end++;
  // Only a whole token: "3e1" stopped at its e is not the 3 it starts with.
  return end >= e || AFTER_TOKEN[src[end]!] === 1 ? end : -1;
}

/** severityOf() over the root's level-like values a write (writeJson, AnyValueArena.write) found in `src` (before `e`), as `scan` noted them. */
export function severityFound(scan: JsonScan, src: Buffer, e: number): Severity | undefined {
  for (let k = 0; k < SEVERITY_KEYS.length; k++) {
    let at = scan.severityAt[k]!;
    if (at < 0) continue;
    at = skipSpace(src, at, e);
    const end = tokenEnd(src, at, e);
    const cacheable = end > at && end - at <= LEVEL_MAX_BYTES;
    if (cacheable) {
      const c = cachedLevel(src, at, end);
      if (c >= 0) {
        const s = levelSeverities[c];
        if (s) return s;
        continue;
      }
    }
    const s = severityOfValue(valueAt(src, at, e));
    if (cacheable) {
      const c = levelNext;
      levelNext = (levelNext + 1) % LEVEL_CACHE_SIZE;
      src.copy(levelBytes, c * LEVEL_MAX_BYTES, at, end);
      levelLengths[c] = end - at;
      levelSeverities[c] = s;
    }
    if (s) return s;
  }
  return undefined;
}
