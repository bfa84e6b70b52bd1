// A record's OpenTelemetry severity from its level-like field (SEVERITY_KEYS):
// from the parsed fields (the object path) or from the JSON bytes where the
// byte path found those fields (json-anyvalue.ts's severityAt).
import { SEVERITY_KEYS } from '../../src/contract/record.ts';
import type { Fields } from '../records/record.ts';
import { severityAt, valueAt } from './json-anyvalue.ts';

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

/** severityOf() over the root's level-like values writeJson found in `src` (before `e`). */
export function severityFound(src: Buffer, e: number): Severity | undefined {
  for (let k = 0; k < SEVERITY_KEYS.length; k++) {
    let at = severityAt[k]!;
    if (at < 0) continue;
    while (at < e && (src[at] === 32 || src[at] === 9 || src[at] === 10 || src[at] === 13)) at++;
    // The value token as written: a string's bytes with its quotes, or a number's (never longer than the cache's slots).
    let end = at;
    if (src[at] === 34) {
      end++;
      while (end < e && end - at < LEVEL_MAX_BYTES && src[end] !== 34 && src[end] !== 92) end++;
      end = end < e && src[end] === 34 ? end + 1 : -1;
    } else {
      while (end < e && end - at < LEVEL_MAX_BYTES && ((src[end]! >= 48 && src[end]! <= 57) || src[end] === 45 || src[end] === 46)) end++;
      // Only a whole token: "3e1" stopped at its e is not the 3 it starts with.
      const next = end < e ? src[end]! : 32;
      if (!(next === 44 || next === 125 || next === 93 || next === 32 || next === 9 || next === 10 || next === 13)) end = -1;
    }
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
