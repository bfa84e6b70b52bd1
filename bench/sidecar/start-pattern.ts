// `npm run bench:pattern`: what a start-of-event pattern (a tenant's
// `jobharvest.io/multiline-start`) costs per line, in the engine the sidecar
// and the harvester share, against a plain pattern (`^\d`) on the same lines.
//
// Rows, each on lines it was built to be slow on, every line distinct (the
// engine remembers the last line's answer; re2js keeps DFA states between
// lines of one pattern):
//   - the accepted worst cases: the families below at the largest repeat count
//     under MAX_START_PROGRAM, on 256 KiB lines (the default record cap) whose
//     first 1 KiB is what each pattern is slowest on;
//   - one shaping row: those lines through the Shaper, with the longest time
//     the event loop waited for a turn while it ran (the harvester renews its
//     Lease in that loop), sliced (the default) and not;
//   - the program sizes of realistic start patterns, the built-in rules
//     written as RE2 among them, against MAX_START_PROGRAM.
//   - BENCH_PATTERN_BEFORE=1 adds the former bounds: `[a-z]{1,1000}[a-z]{1,1000}b`
//     (4001 instructions, accepted under the 4096 cap) on one whole 256 KiB
//     line after a first one, as the engine matched it before; seconds to
//     minutes.
//
// Not a test: it prints figures. Per-line times are CPU time (process.cpuUsage,
// microsecond resolution), so a loaded machine does not inflate them; the
// longest wait for a loop turn is wall-clock.
import { RE2JS } from 're2js';
import { MAX_START_PROGRAM, START_MATCH_BYTES } from '../../src/contract/shaping-settings.ts';
import { customRule } from '../../sidecar/shape/multiline-rules.ts';
import { Shaper } from '../../sidecar/shape/shaper.ts';
import { parseShaping } from '../../sidecar/shaping-settings.ts';
import { newStats } from '../../sidecar/stats.ts';
import { FileProgress } from '../../sidecar/records/progress.ts';
import { fileKey, idPrefix, type FileMeta, type LogRecord } from '../../sidecar/records/record.ts';

import { LINE, rnd } from '../../test/support/start-pattern-lines.ts';

const LINES = Number(process.env.BENCH_PATTERN_LINES ?? 24);

/** A 256 KiB line whose first 1 KiB is `head`, padded with what the pattern reads past it. */
const line = (head: string, pad: string): string => head + pad.repeat(Math.ceil((LINE - Buffer.byteLength(head)) / pad.length)).slice(0, LINE - head.length);

/** The largest repeat count n for which make(n) stays under the cap. */
function largest(make: (n: number) => string): string {
  let n = 1;
  while (RE2JS.compile(make(n + 1)).programSize() <= MAX_START_PROGRAM) n++;
  return make(n);
}

interface Family {
  name: string;
  pattern: string;
  lines: (i: number) => string;
}

const families: Family[] = [
  // The issue's pattern at the cap: the whole line of 'a' then 'b', and a first 1 KiB of letters that ends in 'b'.
  { name: 'counted (aaa…b)', pattern: largest((n) => `[a-z]{1,${n}}[a-z]{1,${n}}b`), lines: (i) => line('a'.repeat(START_MATCH_BYTES - 1 - i), 'a').slice(0, LINE - 1) + 'b' },
  { name: 'counted (letters)', pattern: largest((n) => `[a-z]{1,${n}}[a-z]{1,${n}}b`), lines: (i) => line(rnd(START_MATCH_BYTES - 1, 'acdefghijklmnopqrstuvwxyz', i + 1) + 'b', 'a') },
  // A DFA that needs 2^n states: re2js gives up its DFA and runs the NFA.
  { name: 'dfa blow-up', pattern: largest((n) => `[ab]*a[ab]{${n}}c`), lines: (i) => line(rnd(START_MATCH_BYTES - 1, 'ab', i + 1) + 'c', 'ab') },
  { name: 'any character', pattern: largest((n) => `.{1,${n}}.{1,${n}}!`), lines: (i) => line(rnd(START_MATCH_BYTES - 1, 'xyz', i + 1) + '!', 'x') },
  { name: 'unicode class', pattern: largest((n) => `\\pL{1,${n}}\\pL{1,${n}}!`), lines: (i) => line(rnd(START_MATCH_BYTES / 2 - 1, 'éü', i + 1) + '!', 'é') },
  { name: 'case folding', pattern: largest((n) => `(?i)(?:k|s){1,${n}}(?:k|s){1,${n}}!`), lines: (i) => line(rnd(START_MATCH_BYTES - 1, 'kKsS', i + 1) + '!', 'k') },
];

const PLAIN = '^\\d';

/** CPU milliseconds (user + system) since `from`: on a shared machine the figure that does not count other processes' turns. */
const cpuMs = (from: NodeJS.CpuUsage): number => {
  const d = process.cpuUsage(from);
  return (d.user + d.system) / 1000;
};

/** Per-line CPU times (ms) of a fresh rule over the lines, each asked once. */
function perLine(pattern: string, lines: string[]): number[] {
  const rule = customRule(pattern);
  return lines.map((l) => {
    const t = process.cpuUsage();
    rule.start(l);
    return cpuMs(t);
  });
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const f = (ms: number): string => (ms < 10 ? ms.toFixed(3) : ms.toFixed(1)).padStart(8);

console.log(`start patterns: first ${START_MATCH_BYTES} bytes of a line, at most ${MAX_START_PROGRAM} instructions; ${LINES} distinct lines of ${LINE} bytes per row`);
console.log(`${'family'.padEnd(18)} ${'program'.padStart(7)} ${'median'.padStart(8)} ${'max'.padStart(8)} ${'plain med'.padStart(9)} ${'plain max'.padStart(9)} ${'ratio (medians)'.padStart(16)}  pattern`);
let worst = 0;
for (const fam of families) {
  const lines = Array.from({ length: LINES }, (_, i) => fam.lines(i));
  const plain = perLine(PLAIN, lines);
  const hostile = perLine(fam.pattern, lines);
  worst = Math.max(worst, ...hostile);
  const prog = RE2JS.compile(fam.pattern).programSize();
  console.log(`${fam.name.padEnd(18)} ${String(prog).padStart(7)} ${f(median(hostile))} ${f(Math.max(...hostile))} ${f(median(plain)).padStart(9)} ${f(Math.max(...plain)).padStart(9)} ${`${(median(hostile) / median(plain)).toFixed(1)}x`.padStart(16)}  ${fam.pattern}`);
}
console.log(`worst line: ${worst.toFixed(1)} ms (bound promised: 50 ms)`);

// The Shaper over the worst family's lines, as the sidecar and the harvester run it: CPU and the longest wait for a loop turn.
async function shaperRow(pattern: string, lines: string[], sliceMs: number | undefined): Promise<{ ms: number; longestTurn: number }> {
  const { settings } = parseShaping({ JOBHARVEST_MULTILINE_START: pattern }, LINE);
  const shaper = new Shaper(settings, newStats(), async () => {}, undefined, sliceMs === undefined ? {} : { sliceMs });
  const file: FileMeta = { container: 'main', restart: 0, fingerprint: 'fp0000000000000a', key: fileKey('main', 0, 'fp0000000000000a'), idPrefix: idPrefix('uid-1', 'main', 0, 'fp0000000000000a'), progress: new FileProgress(0) };
  let offset = 0;
  const records: LogRecord[] = lines.map((message) => {
    const size = message.length + 40;
    const r: LogRecord = { file, offset, ts: '2026-01-01T00:00:00.000000000Z', stream: 'stdout', message, size, safe: offset + size, flags: 0 };
    offset += size;
    return r;
  });
  let longestTurn = 0;
  let last = performance.now();
  let ticking = true;
  const tick = (): void => {
    const now = performance.now();
    longestTurn = Math.max(longestTurn, now - last);
    last = now;
    if (ticking) setImmediate(tick);
  };
  setImmediate(tick);
  const t = process.cpuUsage();
  await shaper.push(records);
  await shaper.flush();
  const ms = cpuMs(t);
  // The turn that ends the wait, if the push never gave one.
  await new Promise((resolve) => setImmediate(resolve));
  ticking = false;
  return { ms, longestTurn };
}

const blow = families.find((x) => x.name === 'dfa blow-up')!;
const many = Array.from({ length: 4 * LINES }, (_, i) => blow.lines(i).slice(0, START_MATCH_BYTES));
for (const [label, slice] of [['sliced (default)', undefined], ['unsliced', Infinity]] as const) {
  const plain = await shaperRow(PLAIN, many, slice);
  const hostile = await shaperRow(blow.pattern, many, slice);
  console.log(`shaper, ${many.length} lines of 1 KiB, dfa blow-up, ${label}: ${hostile.ms.toFixed(0)} ms CPU (plain ${plain.ms.toFixed(1)} ms, ratio ${(hostile.ms / plain.ms).toFixed(0)}x); longest wait for a loop turn ${hostile.longestTurn.toFixed(1)} ms (plain ${plain.longestTurn.toFixed(1)} ms)`);
}

const realistic: Record<string, string> = {
  'iso date': String.raw`^\d{4}-\d{2}-\d{2}`,
  'timestamp and level': String.raw`^\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?\s+(?:TRACE|DEBUG|INFO|WARN(?:ING)?|ERROR|FATAL)\b`,
  python: String.raw`^(?:Traceback \(most recent call last\):|  \+ Exception Group Traceback \(most recent call last\):)`,
  java: String.raw`^(?:Exception in thread "|[^\s:]*\.[^\s:]*(?:Exception|Error|Throwable)(?::|$))`,
  go: String.raw`^(?:panic: |fatal error: |goroutine \d+ \[)`,
  nodejs: String.raw`^(?:(?:Uncaught )?[A-Z]?[A-Za-z]*Error(?: \[[A-Z0-9_]+\])?(?::|$)|\S+\.(?:m|c)?[jt]s:\d+$)`,
  syslog: String.raw`^[A-Z][a-z]{2} [ 0-9]\d \d{2}:\d{2}:\d{2} `,
  klog: String.raw`^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d{6}`,
  'level, any case': String.raw`(?i)^(?:\S+\s+){0,3}(?:trace|debug|info|warn(?:ing)?|error|fatal|critical)\b`,
};
const builtIns = ['python', 'java', 'go', 'nodejs'].map((k) => `(?:${realistic[k]})`).join('|');
realistic['the 4 built-ins as one'] = builtIns;
realistic['timestamp and level | the 4 built-ins'] = `(?:${realistic['timestamp and level']})|${builtIns}`;
console.log(`program sizes (cap ${MAX_START_PROGRAM}):`);
for (const [name, p] of Object.entries(realistic)) console.log(`  ${name.padEnd(38)} ${String(RE2JS.compile(p).programSize()).padStart(4)}`);

if (process.env.BENCH_PATTERN_BEFORE === '1') {
  const re = RE2JS.compile('[a-z]{1,1000}[a-z]{1,1000}b');
  // A first line exhausts re2js's DFA cache; from then on it runs its NFA, 4001 threads a byte.
  re.test(rnd(64 * 1024 - 1, 'acdefghijklmnopqrstuvwxyz', 5) + 'b');
  const whole = rnd(LINE - 1, 'acdefghijklmnopqrstuvwxyz', 7) + 'b';
  const t = process.cpuUsage();
  re.test(whole);
  const ms = cpuMs(t);
  const p = RE2JS.compile(PLAIN);
  const t2 = process.cpuUsage();
  p.test(whole);
  const plainMs = cpuMs(t2);
  console.log(`before: [a-z]{1,1000}[a-z]{1,1000}b (${re.programSize()} instructions), one whole ${LINE}-byte line after a first: ${ms.toFixed(0)} ms CPU (plain ${plainMs.toFixed(3)} ms)`);
}
