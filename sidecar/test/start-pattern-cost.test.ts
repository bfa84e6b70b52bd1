// What a tenant's start-of-event pattern may cost: it is matched against a
// line's first 1 KiB and its program is capped, so the worst pattern accepted
// ships 256 KiB lines within a few times what a plain pattern takes on the same
// lines; the pattern of the report (4001 instructions, 12.6 s of CPU for one
// such line before) is refused. Times are ratios to `^\d` in the same run, never
// absolutes; `npm run bench:pattern` has the per-line figures.
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { RE2JS } from 're2js';
import { afterEach, describe, expect, it } from 'vitest';
import { MAX_START_PROGRAM, START_MATCH_BYTES, startPatternProblem } from '../../src/contract/shaping-settings.ts';
import { Pipeline } from '../pipeline.ts';
import { customRule, lineStart } from '../shape/multiline-rules.ts';
import { shapingProblems } from '../shape/shaper.ts';
import { NdjsonReceiver } from '../../test/support/ndjson-receiver.ts';
import { cri, testConfig, tmpDir, waitUntil } from '../../test/support/sidecar-helpers.ts';
import { harness, Lines, shaping } from './shape-helpers.ts';
import { costlyLines, HOSTILE, LINE, PLAIN, worstAccepted } from '../../test/support/start-pattern-lines.ts';

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

let tick = 0;
const TS = (): string => `2024-03-04T05:06:07.${String(++tick).padStart(9, '0')}Z`;

/** Milliseconds for a sidecar (node mode, NDJSON sink) to ship `lines` with this start pattern. */
async function shipTime(pattern: string, lines: string[]): Promise<number> {
  const root = await tmpDir();
  const logDir = path.join(root, 'pod');
  await mkdir(path.join(logDir, 'main'), { recursive: true });
  await writeFile(path.join(logDir, 'main', '0.log'), lines.map((l) => cri(TS(), 'stdout', 'F', l)).join(''));
  const srv = await new NdjsonReceiver().start();
  cleanups.push(() => srv.stop());
  const config = testConfig({
    JOBHARVEST_SINK: 'http',
    JOBHARVEST_ENDPOINT: srv.url,
    JOBHARVEST_LOG_DIR: logDir,
    JOBHARVEST_STATE_DIR: path.join(root, 'state'),
    JOBHARVEST_POLL_MS: '20',
    JOBHARVEST_BATCH_MAX_WAIT_MS: '20',
    JOBHARVEST_TERMINATION_LOG: '',
    JOBHARVEST_MULTILINE_START: pattern,
    // Every line starts no event and joins the one before up to the record cap: a line per record.
    JOBHARVEST_MULTILINE_MAX_BYTES: String(LINE),
  });
  const p = new Pipeline(config);
  const t = performance.now();
  await p.start();
  await waitUntil(() => srv.accepted.length >= 1 && srv.accepted.reduce((s, d) => s + String(d.message).length, 0) >= lines.length * LINE, 'every line at the receiver', 120_000);
  const ms = performance.now() - t;
  await p.drain();
  return ms;
}

describe('a start pattern reads a line\'s first 1 KiB', () => {
  it('cuts at 1024 bytes of UTF-8, before a character that would not fit whole', () => {
    expect(START_MATCH_BYTES).toBe(1024);
    expect(lineStart('x'.repeat(341))).toBe('x'.repeat(341));
    expect(lineStart('x'.repeat(5000))).toBe('x'.repeat(1024));
    // 'é' is 2 bytes: 512 fit, the 513th does not.
    expect(lineStart('é'.repeat(600))).toBe('é'.repeat(512));
    // 1023 bytes, then a 2-byte character: cut before it, not through it.
    expect(lineStart('x'.repeat(1023) + 'é'.repeat(10))).toBe('x'.repeat(1023));
    // A surrogate pair is one 4-byte character: 1021 + 4 > 1024.
    expect(lineStart('x'.repeat(1021) + '😀'.repeat(10))).toBe('x'.repeat(1021));
    expect(lineStart('x'.repeat(1020) + '😀'.repeat(10))).toBe('x'.repeat(1020) + '😀');
  });

  it('what comes after the first 1 KiB neither starts nor stops an event', () => {
    const rule = customRule('ERROR');
    expect(rule.start(`${'x'.repeat(1000)} ERROR`)).toBe(0);
    expect(rule.start(`${'x'.repeat(1024)} ERROR`)).toBe(-1);
  });
});

describe('the report\'s pattern, and the worst one accepted', () => {
  it('the report\'s pattern is refused at admission and by the sidecar, which says why', async () => {
    expect(RE2JS.compile(HOSTILE).programSize()).toBeGreaterThan(MAX_START_PROGRAM);
    expect(startPatternProblem(HOSTILE)).toMatch(/^compiles to 4001 instructions, more than 320/);
    expect(shapingProblems(shaping({ MULTILINE_START: HOSTILE }))).toEqual([expect.stringMatching(/JOBHARVEST_MULTILINE_START compiles to 4001 instructions, more than 320/)]);
    const root = await tmpDir();
    const p = new Pipeline(testConfig({ JOBHARVEST_SINK: 'http', JOBHARVEST_ENDPOINT: 'http://127.0.0.1:9/', JOBHARVEST_LOG_DIR: root, JOBHARVEST_STATE_DIR: path.join(root, 'state'), JOBHARVEST_MULTILINE_START: HOSTILE }));
    await expect(p.start()).rejects.toThrow(/more than 320/);
  });

  it('the worst accepted pattern is within the cap', () => {
    const worst = worstAccepted();
    expect(startPatternProblem(worst)).toBeUndefined();
    expect(startPatternProblem(`${worst}c`)).toMatch(/more than 320/);
    expect(RE2JS.compile(worst).programSize()).toBeGreaterThan(MAX_START_PROGRAM - 10);
  });

  it('through the sidecar, 256 KiB lines with the worst accepted pattern ship within 3x the time of ^\\d on the same lines', async () => {
    const lines = costlyLines(16);
    const worst = worstAccepted();
    // Alternated, the fastest of each: a shared machine slows one run, not a pattern.
    const plain: number[] = [];
    const hostile: number[] = [];
    for (let i = 0; i < 2; i++) {
      plain.push(await shipTime(PLAIN, lines));
      hostile.push(await shipTime(worst, lines));
    }
    const ratio = Math.min(...hostile) / Math.min(...plain);
    console.log(`sidecar: ^\\d ${plain.map((x) => x.toFixed(0)).join(', ')} ms; worst accepted ${hostile.map((x) => x.toFixed(0)).join(', ')} ms; ratio ${ratio.toFixed(2)}`);
    expect(ratio, `plain ${plain.map((x) => x.toFixed(0))} ms, worst accepted ${hostile.map((x) => x.toFixed(0))} ms`).toBeLessThan(3);
  }, 120_000);
});

describe('shaping lets the event loop run', () => {
  it('a push of costly lines gives the loop a turn between lines once its slice is used, and flush() waits for the push to finish its lines', async () => {
    const h = harness(shaping({ MULTILINE_START: worstAccepted() }), undefined, { sliceMs: 0 });
    const lines = new Lines().make(costlyLines(6).map((l) => l.slice(0, 2048)));
    let turns = 0;
    let ticking = true;
    const tick = (): void => {
      turns++;
      if (ticking) setImmediate(tick);
    };
    setImmediate(tick);
    const pushed = h.shaper.push(lines);
    // Called while the push is between lines: it must not end the events before the push has fed them all.
    const flushed = h.shaper.flush();
    await Promise.all([pushed, flushed]);
    ticking = false;
    expect(turns).toBeGreaterThanOrEqual(5);
    expect(h.out.map((r) => r.message)).toEqual(lines.map((l) => l.message));
  });

  it('a pattern that is plain literals does not watch the clock', async () => {
    const h = harness(shaping({ MULTILINE_START: '^(?:INFO|WARN) ' }), undefined, { sliceMs: 0 });
    let turns = 0;
    setImmediate(() => turns++);
    await h.shaper.push(new Lines().make(['INFO a', 'x', 'WARN b', 'y']));
    expect(turns).toBe(0);
  });
});
