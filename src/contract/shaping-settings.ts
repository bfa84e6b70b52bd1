/**
 * The values the record-shaping variables of the env contract accept, and the
 * check a pattern must pass before it reaches a sidecar. The webhook refuses
 * a tenant's pattern at admission (a warning, the level below wins) and an
 * operator's at start-up; the sidecar compiles what it is given with the same
 * engine, so what passes here compiles there.
 */
import { RE2JS } from 're2js';

/** Built-in start-of-event rules of JOBHARVEST_MULTILINE. */
export const MULTILINE_RULES = ['python', 'java', 'go', 'nodejs'] as const;
export type MultilineRule = (typeof MULTILINE_RULES)[number];

/** Values of JOBHARVEST_PARSE. */
export const PARSE_FORMATS = ['json', 'none'] as const;
export type ParseFormat = (typeof PARSE_FORMATS)[number];

/** Built-in masks of JOBHARVEST_MASK (`all` names every one of them). */
export const MASK_BUILTINS = ['bearer', 'aws-access-key', 'private-key', 'password', 'url-userinfo'] as const;
export type MaskBuiltin = (typeof MASK_BUILTINS)[number] | 'all';

/** A pattern is matched against every line, so its text is kept short. */
export const MAX_PATTERN_BYTES = 1024;
/**
 * RE2 runs in time linear in the line, but the factor is the compiled
 * program's size, which repeat counts multiply (`.{1000}` alone is 1002
 * instructions): a bounded program keeps every line's match cheap.
 */
export const MAX_PATTERN_PROGRAM = 4096;

/**
 * A start-of-event pattern is a tenant's (the `jobharvest.io/multiline-start`
 * annotation) and runs in shared programs too (the harvester applies a pod's
 * shaping), so it gets a tighter bound than the operator's masks: it is
 * matched against a line's first START_MATCH_BYTES bytes only, and its
 * program is at most MAX_START_PROGRAM instructions. The worst accepted
 * pattern measured (one whose DFA needs 2^314 states, so re2js runs its NFA)
 * then costs at most 27 ms of CPU per line, where `[a-z]{1,1000}[a-z]{1,1000}b`
 * cost 12.6 s on one 256 KiB line before (`npm run bench:pattern`). The cap
 * is measured against the built-in rules: the four written as RE2 and joined
 * with a timestamp-and-level pattern compile to 307 instructions.
 */
export const MAX_START_PROGRAM = 320;
/** What decides whether a line starts an event is its start: a timestamp, a level, `Traceback`, `panic:`. */
export const START_MATCH_BYTES = 1024;

// A namespace's pattern is checked again for each of its Jobs: the verdicts
// of recent patterns are kept (bounded, since tenants write them).
const VERDICTS_MAX = 256;
const verdicts = new Map<string, string | undefined>();

/** Why a pattern is refused, or undefined when RE2 compiles it within the bounds. */
export function patternProblem(pattern: string, maxProgram = MAX_PATTERN_PROGRAM): string | undefined {
  // Only short texts are remembered: a long one is refused before compiling anyway.
  if (pattern.length > MAX_PATTERN_BYTES) return check(pattern, maxProgram);
  const key = `${maxProgram}\u0000${pattern}`;
  if (verdicts.has(key)) return verdicts.get(key);
  const why = check(pattern, maxProgram);
  if (verdicts.size >= VERDICTS_MAX) verdicts.clear();
  verdicts.set(key, why);
  return why;
}

/** Why a start-of-event pattern is refused: a pattern's bounds, with the start pattern's program cap. */
export function startPatternProblem(pattern: string): string | undefined {
  return patternProblem(pattern, MAX_START_PROGRAM);
}

function check(pattern: string, maxProgram: number): string | undefined {
  if (pattern.length === 0) return 'empty';
  const bytes = Buffer.byteLength(pattern);
  if (bytes > MAX_PATTERN_BYTES) return `longer than ${MAX_PATTERN_BYTES} bytes (${bytes})`;
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(pattern)) return 'contains control characters (write \\t or \\x00 escapes instead)';
  // RE2 reads these as a malformed named group; say what they are instead.
  if (/\(\?<?[=!]/.test(pattern)) return 'not an RE2 pattern: lookahead and lookbehind are not supported (they cannot run in linear time)';
  let size: number;
  try {
    size = RE2JS.compile(pattern).programSize();
  } catch (e) {
    // re2js quotes the offending part; the first line is the whole reason.
    return `not an RE2 pattern: ${String((e as Error).message ?? e).split('\n')[0]!.replace(/^error parsing regexp: /, '')}`;
  }
  if (size > maxProgram) return `compiles to ${size} instructions, more than ${maxProgram} (lower the repeat counts)`;
  return undefined;
}
