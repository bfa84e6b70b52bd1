import { readFileSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { appendFile, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SidecarPipeline } from '../run.ts';
import {
  decodeTermination,
  encodeTermination,
  RunPositions,
  TERMINATION_MESSAGE_MAX_BYTES,
  TerminationLog,
  type RunPosition,
  type TerminationCounts,
} from '../termination.ts';
import { cri, testConfig, tmpDir, waitUntil } from '../../test/support/sidecar-helpers.ts';
import { NdjsonReceiver } from '../../test/support/ndjson-receiver.ts';

const counts: TerminationCounts = { state: 'incomplete', mode: 'api', sink: 'loki', shipped: 1200, unsent: 300, dead_lettered: 2 };
const TS = (i: number) => `2024-03-04T05:06:${String(7 + Math.floor(i / 1e6)).padStart(2, '0')}.${String(i % 1e6).padStart(9, '0')}Z`;

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe('termination message encoding', () => {
  it('round-trips counts, positions and finished runs on one line', () => {
    const runs: RunPosition[] = [['main', 0, '2024-03-04T05:06:07.5Z', 2, 41]];
    const text = encodeTermination(counts, runs, ['init/0']);
    expect(text.endsWith('\n')).toBe(true);
    expect(text.split('\n')).toHaveLength(2);
    const m = decodeTermination(text)!;
    expect(m).toMatchObject({ v: 1, state: 'incomplete', mode: 'api', sink: 'loki', shipped: 1200, unsent: 300, dead_lettered: 2, runs, done: ['init/0'] });
    expect(m.cut).toBeUndefined();
  });

  it('stays under 4096 bytes: finished runs go first, then positions from the end, counts always stay', () => {
    const done = Array.from({ length: 400 }, (_, i) => `worker-container-${i}/0`);
    const runs: RunPosition[] = Array.from({ length: 200 }, (_, i) => [`worker-container-${i}`, 1, TS(i), 1, i]);
    const text = encodeTermination(counts, runs, done);
    expect(Buffer.byteLength(text)).toBeLessThanOrEqual(TERMINATION_MESSAGE_MAX_BYTES);
    const m = decodeTermination(text)!;
    expect(m.done).toEqual([]);
    expect(m.runs.length).toBeGreaterThan(10);
    expect(m.runs).toEqual(runs.slice(0, m.runs.length));
    expect(m.cut).toBe(400 + 200 - m.runs.length);
    expect(m).toMatchObject({ shipped: 1200, unsent: 300, dead_lettered: 2 });
    // As long as possible: one more run would not fit.
    const more = JSON.stringify({ ...m, runs: runs.slice(0, m.runs.length + 1), cut: m.cut! - 1 }) + '\n';
    expect(Buffer.byteLength(more)).toBeGreaterThan(TERMINATION_MESSAGE_MAX_BYTES);
  });

  it('keeps every position when only the finished runs are too many', () => {
    const done = Array.from({ length: 600 }, (_, i) => `c-${i}/0`);
    const runs: RunPosition[] = [['main', 3, TS(1), 1]];
    const m = decodeTermination(encodeTermination(counts, runs, done))!;
    expect(m.runs).toEqual(runs);
    expect(m.done.length).toBeGreaterThan(0);
    expect(m.done).toEqual(done.slice(0, m.done.length));
    expect(m.done.length + m.cut!).toBe(600);
  });

  it('carries resume gaps when there are any, and leaves the field out otherwise', () => {
    const withGaps = encodeTermination({ ...counts, resume_gaps: 3 }, [], ['main/0']);
    expect(decodeTermination(withGaps)?.resume_gaps).toBe(3);
    for (const none of [counts, { ...counts, resume_gaps: 0 }]) {
      const text = encodeTermination(none, [], ['main/0']);
      expect(text).not.toContain('resume_gaps');
      expect(decodeTermination(text)?.resume_gaps).toBeUndefined();
    }
  });

  it('keeps the resume gaps when positions have to be cut to fit', () => {
    const runs: RunPosition[] = Array.from({ length: 200 }, (_, i) => [`container-${i}`, 0, TS(i), 1]);
    const m = decodeTermination(encodeTermination({ ...counts, resume_gaps: 7 }, runs, []))!;
    expect(m.cut).toBeGreaterThan(0);
    expect(m.resume_gaps).toBe(7);
  });

  it('reads a message of an older sidecar without resume gaps as before, and rejects a count that is not a number', () => {
    const older = '{"v":1,"state":"complete","mode":"api","sink":"loki","shipped":5,"unsent":0,"dead_lettered":0,"runs":[],"done":["main/0"]}';
    expect(decodeTermination(older)).toEqual({ v: 1, state: 'complete', mode: 'api', sink: 'loki', shipped: 5, unsent: 0, dead_lettered: 0, runs: [], done: ['main/0'] });
    expect(decodeTermination(older.replace('"runs"', '"resume_gaps":"2","runs"'))).toBeUndefined();
  });

  it('rejects text that is not a message of this version, and reads only the first line', () => {
    expect(decodeTermination(undefined)).toBeUndefined();
    expect(decodeTermination('')).toBeUndefined();
    expect(decodeTermination('Error: something crashed')).toBeUndefined();
    expect(decodeTermination('{"v":2,"runs":[],"done":[],"shipped":1,"unsent":0,"dead_lettered":0}')).toBeUndefined();
    const text = encodeTermination(counts, [], ['main/0']);
    expect(decodeTermination(text + 'garbage left from a longer earlier message')?.done).toEqual(['main/0']);
  });
});

describe('run positions from checkpoint entries', () => {
  it('api mode: a finished run is done, an unfinished one resumes after its last acknowledged line with the line number', () => {
    const p = new RunPositions('api');
    const out = p.update(
      new Map([
        ['init/0/api', { offset: 10, done: true, ts: TS(9), n: 1 }],
        ['main/0/api', { offset: 7, done: false, ts: TS(6), n: 3 }],
        ['main/1/api', { offset: 0, done: false }],
      ]),
    );
    expect(out.done).toEqual(['init/0']);
    expect(out.runs).toEqual([
      ['main', 0, TS(6), 3, 7],
      ['main', 1, null, 0],
    ]);
  });

  it('node mode: the earliest unfinished file of a run wins; a rotation without acknowledged lines starts where the finished ones ended, even after they were forgotten', () => {
    const p = new RunPositions('node');
    p.update(new Map([['main/0/fpA', { offset: 100, done: true, ts: '2024-03-04T05:06:07.9Z', n: 1 }]]));
    const out = p.update(
      new Map([
        ['main/0/fpB', { offset: 0, done: false }],
        ['main/0/fpC', { offset: 50, done: false, ts: '2024-03-04T05:06:07.123Z', n: 1 }],
      ]),
    );
    // .123 is earlier than .9 although it sorts after it as text.
    expect(out.runs).toEqual([['main', 0, '2024-03-04T05:06:07.123Z', 1]]);
    expect(out.done).toEqual([]);
    const later = p.update(new Map());
    expect(later).toEqual({ runs: [], done: [] });
  });

  it('node mode: a run whose files are all finished stays done after the files are forgotten', () => {
    const p = new RunPositions('node');
    p.update(new Map([['main/0/fpA', { offset: 100, done: true, ts: TS(1), n: 1 }]]));
    expect(p.update(new Map()).done).toEqual(['main/0']);
  });
});

describe('termination log file', () => {
  it('rewrites the file in place, shorter messages included', async () => {
    const dir = await tmpDir();
    const file = path.join(dir, 'termination-log');
    await writeFile(file, '');
    const t = new TerminationLog(file);
    t.write('x'.repeat(100) + '\n');
    t.write('short\n');
    t.close();
    expect(await readFile(file, 'utf8')).toBe('short\n');
  });

  it('neither fails nor creates the file when it is absent (not in a pod)', async () => {
    const file = path.join(await tmpDir(), 'absent');
    const t = new TerminationLog(file);
    expect(() => t.write('x\n')).not.toThrow();
    await expect(readFile(file)).rejects.toThrow(/ENOENT/);
  });
});

describe('pipeline termination message', () => {
  async function setup(env: Record<string, string>) {
    const root = await tmpDir();
    const logDir = path.join(root, 'pod');
    await mkdir(path.join(logDir, 'main'), { recursive: true });
    const srv = await new NdjsonReceiver().start();
    cleanups.push(() => srv.stop());
    const termination = path.join(root, 'termination-log');
    await writeFile(termination, '');
    const config = testConfig({
      JOBHARVEST_SINK: 'http',
      JOBHARVEST_ENDPOINT: srv.url,
      JOBHARVEST_LOG_DIR: logDir,
      JOBHARVEST_STATE_DIR: path.join(root, 'state'),
      JOBHARVEST_POLL_MS: '50',
      JOBHARVEST_BATCH_MAX_WAIT_MS: '50',
      JOBHARVEST_BATCH_MAX_RECORDS: '20',
      JOBHARVEST_MAX_IN_FLIGHT: '1',
      JOBHARVEST_TERMINATION_LOG: termination,
      ...env,
    });
    return { srv, log: path.join(logDir, 'main', '0.log'), termination, config };
  }
  const lines = (from: number, to: number) => Array.from({ length: to - from }, (_, k) => cri(TS(from + k), 'stdout', 'F', `line ${from + k}`)).join('');

  it('complete: the run is done and nothing is to resume', async () => {
    const t = await setup({});
    await writeFile(t.log, lines(0, 50));
    const p = new SidecarPipeline(t.config);
    await p.start();
    await waitUntil(() => t.srv.accepted.length >= 50, '50 lines');
    const summary = await p.drain();
    expect(summary.outcome).toBe('complete');
    const m = decodeTermination(await readFile(t.termination, 'utf8'))!;
    expect(m).toMatchObject({ state: 'complete', mode: 'node', sink: 'http', shipped: 50, unsent: 0, runs: [], done: ['main/0'] });
  });

  it('server down at the drain deadline: resume after the last acknowledged line, and a snapshot was there before the drain', async () => {
    const t = await setup({ JOBHARVEST_DRAIN_SECONDS: '2' });
    let down = false;
    t.srv.handler = (_docs, _req, res) => {
      if (!down) return true;
      res.writeHead(503).end();
      return false;
    };
    await writeFile(t.log, lines(0, 40));
    const p = new SidecarPipeline(t.config);
    await p.start();
    await waitUntil(() => t.srv.accepted.length >= 40, '40 lines');
    // The snapshot a SIGKILL would leave behind.
    await waitUntil(() => decodeTermination(readFileSync(t.termination, 'utf8'))?.runs[0]?.[2] === TS(39), 'a snapshot at line 39');
    const snap = decodeTermination(await readFile(t.termination, 'utf8'))!;
    expect(snap).toMatchObject({ state: 'running', runs: [['main', 0, TS(39), 1]], done: [] });
    down = true;
    await appendFile(t.log, lines(40, 100));
    await waitUntil(() => t.srv.requests > 3, 'attempts while down');
    const summary = await p.drain();
    expect(summary).toMatchObject({ outcome: 'incomplete', lines_shipped: 40, lines_unsent: 60 });
    const m = decodeTermination(await readFile(t.termination, 'utf8'))!;
    expect(m).toMatchObject({ state: 'incomplete', shipped: 40, unsent: 60, runs: [['main', 0, TS(39), 1]], done: [] });
    const acceptedIds = new Set(t.srv.accepted.map((d) => d.message));
    expect(acceptedIds.has('line 39') && !acceptedIds.has('line 40')).toBe(true);
  });
});
