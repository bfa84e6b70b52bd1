// The lines and patterns of the start-pattern cost tests, sidecar's and harvester's.
import { RE2JS } from 're2js';
import { MAX_START_PROGRAM } from '../../src/contract/shaping-settings.ts';

/** The report's pattern: 27 bytes, 4001 instructions. */
export const HOSTILE = '[a-z]{1,1000}[a-z]{1,1000}b';
/** The record cap's default: the longest line a sidecar ships as one record. */
export const LINE = 256 * 1024;
/** A plain pattern on the same lines: the baseline of every time budget here. */
export const PLAIN = '^\\d';

/** The worst accepted pattern bench:pattern found: its DFA needs 2^n states, so re2js runs its NFA, every instruction live at every byte. */
export function worstAccepted(): string {
  let n = 1;
  while (RE2JS.compile(`[ab]*a[ab]{${n + 1}}c`).programSize() <= MAX_START_PROGRAM) n++;
  return `[ab]*a[ab]{${n}}c`;
}

/** `n` characters of `alphabet`, the same for the same seed. */
export function rnd(n: number, alphabet: string, seed: number): string {
  let x = seed;
  let s = '';
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) & 0x7fffffff;
    s += alphabet[(x >> 8) % alphabet.length];
  }
  return s;
}

/**
 * 256 KiB lines, each distinct, half of each kind: the report's ('a' to the
 * end, then 'b'), and ones whose every byte keeps the worst accepted
 * pattern's NFA busy (no 'c' until the last byte). Neither starts with a digit.
 */
export function costlyLines(n: number): string[] {
  return Array.from({ length: n }, (_, i) => (i % 2 === 0 ? 'a'.repeat(LINE - 1 - i) + 'b'.repeat(i + 1) : rnd(LINE - 1, 'ab', i + 1) + 'c'));
}

