import { appendFile, mkdir, readFile, stat, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { CHECKPOINT_FILE, MemoryCheckpoint } from '../delivery/checkpoint.ts';
import { CountingDeadLetter, DEAD_LETTER_FILE } from '../delivery/deadletter.ts';
import { UNSENT_REASON } from '../delivery/delivery.ts';
import type { Config } from '../config.ts';
import { Pipeline } from '../pipeline.ts';
import { cri, testConfig, tmpDir, waitUntil } from '../../test/support/sidecar-helpers.ts';
import { NdjsonReceiver, type Doc } from '../../test/support/ndjson-receiver.ts';

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const TS = (i: number) => `2024-03-04T05:06:${String(7 + Math.floor(i / 1e6)).padStart(2, '0')}.${String(i % 1e6).padStart(9, '0')}Z`;
function lines(from: number, to: number, text = (i: number) => `line ${i}`): string {
  let s = '';
  for (let i = from; i < to; i++) s += cri(TS(i), i % 2 ? 'stderr' : 'stdout', 'F', text(i));
  return s;
}
const range = (from: number, to: number) => Array.from({ length: to - from }, (_, k) => `line ${from + k}`);
// With several requests in flight, batches may be accepted in any order: compare
// as multisets, which still catches every lost or duplicated line.
const sorted = (xs: string[]) => [...xs].sort();

async function setup(env: Record<string, string> = {}, server?: NdjsonReceiver, overrides: Partial<Config> = {}) {
  const root = await tmpDir();
  const logDir = path.join(root, 'pod');
  const stateDir = path.join(root, 'state');
  await mkdir(path.join(logDir, 'main'), { recursive: true });
  const srv = server ?? (await new NdjsonReceiver().start());
  if (!server) cleanups.push(() => srv.stop());
  const config = testConfig({
    JOBHARVEST_SINK: 'http',
    JOBHARVEST_ENDPOINT: srv.url,
    JOBHARVEST_LOG_DIR: logDir,
    JOBHARVEST_STATE_DIR: stateDir,
    JOBHARVEST_POLL_MS: '50',
    JOBHARVEST_BATCH_MAX_WAIT_MS: '50',
    JOBHARVEST_BATCH_MAX_RECORDS: '100',
    ...env,
  });
  const start = async () => {
    const p = new Pipeline({ ...config, ...overrides });
    await p.start();
    return p;
  };
  /** One entry per record, with the reason of the batch header line it follows. */
  const deadLetters = async () => {
    let text: string;
    try {
      text = await readFile(path.join(stateDir, DEAD_LETTER_FILE), 'utf8');
    } catch {
      return [];
    }
    const out: Array<{ reason: string; status?: number; record: Doc }> = [];
    let head: { reason: string; status?: number; records: number } | undefined;
    let left = 0;
    for (const l of text.split('\n').filter(Boolean)) {
      const o = JSON.parse(l) as { reason?: string; status?: number; records?: number; record?: Doc };
      if (o.record === undefined) {
        expect(left, 'a header line only after all records of the previous one').toBe(0);
        head = o as typeof head;
        left = head!.records;
        continue;
      }
      expect(left, 'a record line belongs to a header line').toBeGreaterThan(0);
      left--;
      out.push({ reason: head!.reason, ...(head!.status !== undefined ? { status: head!.status } : {}), record: o.record });
    }
    expect(left, 'every record a header announces follows it').toBe(0);
    return out;
  };
  return { srv, logDir, stateDir, log: path.join(logDir, 'main', '0.log'), deadLetterFile: path.join(stateDir, DEAD_LETTER_FILE), start, deadLetters };
}

describe('pipeline against a fake HTTP server', () => {
  it('ships every line exactly once (gzip), drains on demand and checkpoints the end', async () => {
    const t = await setup();
    await writeFile(t.log, lines(0, 1000));
    const p = await t.start();
    await waitUntil(() => t.srv.accepted.length >= 1000, '1000 lines');
    await appendFile(t.log, lines(1000, 1050));
    const summary = await p.drain();
    expect(sorted(t.srv.accepted.map((d) => d.message))).toEqual(sorted(range(0, 1050)));
    expect(new Set(t.srv.accepted.map((d) => d.id)).size).toBe(1050);
    expect(summary).toMatchObject({ lines_read: 1050, lines_shipped: 1050, lines_dead_lettered: 0, lines_unsent: 0, unread_bytes: 0, deadline_hit: false });
    expect(summary.bytes_shipped).toBe(Buffer.byteLength(lines(0, 1050)));
    const cp = JSON.parse(await readFile(path.join(t.stateDir, CHECKPOINT_FILE), 'utf8')) as { files: Record<string, { offset: number }> };
    // The timestamp of the last line is kept for the termination message's resume position.
    expect(Object.values(cp.files)).toEqual([{ offset: Buffer.byteLength(lines(0, 1050)), done: false, ts: TS(1049), n: 1 }]);
  });

  it('honours 429 Retry-After and retries 503 storms until everything is stored', async () => {
    const t = await setup({ JOBHARVEST_GZIP: 'false' });
    const times: number[] = [];
    let n = 0;
    t.srv.handler = (_docs, _req, res) => {
      times.push(Date.now());
      n++;
      if (n === 1) {
        res.writeHead(429, { 'retry-after': '1' }).end();
        return false;
      }
      if (n <= 6) {
        res.writeHead(503).end();
        return false;
      }
      return true;
    };
    await writeFile(t.log, lines(0, 50));
    const p = await t.start();
    await waitUntil(() => t.srv.accepted.length >= 50, 'all lines after retries');
    expect(times[1]! - times[0]!).toBeGreaterThanOrEqual(1000);
    const summary = await p.drain();
    expect(sorted(t.srv.accepted.map((d) => d.message))).toEqual(sorted(range(0, 50)));
    expect(summary.retries).toBeGreaterThanOrEqual(6);
    expect(summary.lines_shipped).toBe(50);
  });

  it('splits on 413 and dead-letters a single record that is still too large', async () => {
    const t = await setup({ JOBHARVEST_BATCH_MAX_RECORDS: '64' });
    t.srv.handler = (docs, _req, res) => {
      if (docs.length > 5 || docs.some((d) => d.message.length > 1000)) {
        res.writeHead(413).end('too large');
        return false;
      }
      return true;
    };
    await writeFile(t.log, lines(0, 64, (i) => (i === 40 ? 'big '.repeat(500) : `line ${i}`)));
    const p = await t.start();
    const summary = await p.drain();
    expect(sorted(t.srv.accepted.map((d) => d.message))).toEqual(sorted(range(0, 64).filter((m) => m !== 'line 40')));
    const dl = await t.deadLetters();
    expect(dl).toHaveLength(1);
    expect(dl[0]).toMatchObject({ status: 413 });
    expect(dl[0]!.record.message).toBe('big '.repeat(500));
    expect(summary).toMatchObject({ lines_shipped: 63, lines_dead_lettered: 1, lines_unsent: 0 });
  });

  it('dead-letters a batch refused with another 4xx, counts it, and goes on', async () => {
    const t = await setup({ JOBHARVEST_BATCH_MAX_RECORDS: '10' });
    t.srv.handler = (docs, _req, res) => {
      if (docs.some((d) => d.message === 'line 13')) {
        res.writeHead(400).end('{"error":"mapping"}');
        return false;
      }
      return true;
    };
    await writeFile(t.log, lines(0, 40));
    const p = await t.start();
    const summary = await p.drain();
    const dl = await t.deadLetters();
    expect(dl.map((d) => d.record.message)).toContain('line 13');
    expect(dl.every((d) => d.status === 400 && d.reason.includes('mapping'))).toBe(true);
    // Nothing lost: shipped + dead-lettered is everything, without overlap.
    const all = [...t.srv.accepted.map((d) => d.message), ...dl.map((d) => d.record.message)].sort();
    expect(all).toEqual(range(0, 40).sort());
    expect(summary.lines_dead_lettered).toBe(dl.length);
    expect(summary.lines_shipped).toBe(40 - dl.length);
  });

  it('at the drain deadline writes what is unacknowledged to the dead-letter file as unsent', async () => {
    const t = await setup({ JOBHARVEST_DRAIN_SECONDS: '2' });
    t.srv.handler = (_docs, _req, res) => {
      res.writeHead(503).end();
      return false;
    };
    await writeFile(t.log, lines(0, 30));
    const p = await t.start();
    await waitUntil(() => t.srv.requests > 0, 'first attempt');
    const started = Date.now();
    const summary = await p.drain();
    expect(Date.now() - started).toBeLessThan(2000);
    expect(summary).toMatchObject({ deadline_hit: true, lines_shipped: 0, lines_unsent: 30 });
    const dl = await t.deadLetters();
    expect(dl.map((d) => d.record.message).sort()).toEqual(range(0, 30).sort());
    expect(dl.every((d) => d.reason === UNSENT_REASON)).toBe(true);
    // Unacknowledged data does not move the checkpoint: a restart would send it again.
    const cp = JSON.parse(await readFile(path.join(t.stateDir, CHECKPOINT_FILE), 'utf8')) as { files: Record<string, { offset: number }> };
    expect(Object.values(cp.files).map((f) => f.offset)).toEqual([0]);
  });

  it('a restarted sidecar resumes from the checkpoint without re-sending acknowledged lines', async () => {
    const t = await setup();
    await writeFile(t.log, lines(0, 200));
    const p1 = await t.start();
    await waitUntil(() => t.srv.accepted.length >= 200, 'first run');
    await p1.drain();
    await appendFile(t.log, lines(200, 260));
    const p2 = await t.start();
    await waitUntil(() => t.srv.accepted.length >= 260, 'second run');
    await p2.drain();
    expect(sorted(t.srv.accepted.map((d) => d.message))).toEqual(sorted(range(0, 260)));
  });

  it('pauses reading while the server is down and loses nothing (server down mid-stream)', async () => {
    const t = await setup({ JOBHARVEST_MAX_IN_FLIGHT: '1', JOBHARVEST_BATCH_MAX_RECORDS: '20' });
    let down = false;
    t.srv.handler = (_docs, _req, res) => {
      if (down) {
        res.socket?.destroy();
        return false;
      }
      return true;
    };
    await writeFile(t.log, lines(0, 100));
    const p = await t.start();
    await waitUntil(() => t.srv.accepted.length >= 100, 'before outage');
    down = true;
    await appendFile(t.log, lines(100, 600));
    await sleep(800);
    // Backpressure: with one request in flight only about one batch plus one chunk is read ahead.
    expect(p.stats.linesShipped).toBe(100);
    down = false;
    await waitUntil(() => t.srv.accepted.length >= 600, 'after outage', 20_000);
    const summary = await p.drain();
    expect(t.srv.accepted.map((d) => d.message)).toEqual(range(0, 600));
    expect(summary.retries).toBeGreaterThan(0);
  });
  // loadConfig refuses both values (config.test.ts); the sinks must still not
  // retry one that gets past it, so these tests hand it in behind its back.
  it.each([
    ['a Loki tenant', { JOBHARVEST_SINK: 'loki' }, { lokiTenant: '团队' }],
    ['a header value', {}, { headers: { 'x-team': '团队' } }],
  ] as Array<[string, Record<string, string>, Partial<Config>]>)('dead-letters at once, without retries, a batch whose request cannot be built (%s no HTTP header can carry)', async (_what, env, overrides) => {
    const t = await setup({ JOBHARVEST_DRAIN_SECONDS: '5', ...env }, undefined, overrides);
    await writeFile(t.log, lines(0, 30));
    const p = await t.start();
    await waitUntil(() => p.stats.linesDeadLettered >= 30, 'the batch to be dead-lettered', 3000);
    const summary = await p.drain();
    expect(t.srv.requests).toBe(0);
    expect(summary).toMatchObject({ retries: 0, lines_shipped: 0, lines_dead_lettered: 30, lines_unsent: 0, deadline_hit: false });
    const dl = await t.deadLetters();
    expect(dl.map((d) => d.record.message).sort()).toEqual(range(0, 30).sort());
    expect(dl.every((d) => d.reason.includes('ERR_INVALID_CHAR'))).toBe(true);
  });
  it('never follows a symlink: a linked log file or container directory is skipped and counted', async () => {
    const t = await setup();
    // Secrets elsewhere on the node, in CRI form so that a followed link would ship them.
    const outside = path.join(t.stateDir, '..', 'outside');
    await mkdir(path.join(outside, 'dir'), { recursive: true });
    await writeFile(path.join(outside, 'environ'), cri(TS(0), 'stdout', 'F', 'TOKEN=secret-file'));
    await writeFile(path.join(outside, 'dir', '0.log'), cri(TS(0), 'stdout', 'F', 'TOKEN=secret-dir'));
    await writeFile(t.log, lines(0, 5));
    await symlink(path.join(outside, 'environ'), path.join(t.logDir, 'main', '1.log'));
    await symlink(path.join(outside, 'dir'), path.join(t.logDir, 'linked'));
    const p = await t.start();
    await waitUntil(() => t.srv.accepted.length >= 5, 'the real file');
    const summary = await p.drain();
    expect(t.srv.accepted.map((d) => d.message)).toEqual(range(0, 5));
    expect(summary).toMatchObject({ lines_read: 5, files: 1, symlinks_skipped: 2 });
  });
  // A ~190-byte answer, as an auth gateway gives to an expired token.
  const BODY_401 = JSON.stringify({ error: 'unauthorized', message: 'The bearer token presented has expired or is not valid for this tenant; request a new token.', code: 'AUTH-401', id: '4f9c2a' });

  it('writes the reason of a refused batch once, not once per record', async () => {
    const t = await setup({ JOBHARVEST_BATCH_MAX_RECORDS: '100' });
    t.srv.handler = (_docs, _req, res) => {
      res.writeHead(401).end(BODY_401);
      return false;
    };
    await writeFile(t.log, lines(0, 300));
    const p = await t.start();
    const summary = await p.drain();
    expect(summary).toMatchObject({ outcome: 'incomplete', lines_dead_lettered: 300, dead_letter_overflow_lines: 0 });
    const dl = await t.deadLetters();
    expect(dl.map((d) => d.record.message).sort()).toEqual(range(0, 300).sort());
    expect(dl.every((d) => d.status === 401 && d.reason.includes('expired'))).toBe(true);
    const text = await readFile(t.deadLetterFile, 'utf8');
    // One header per refused request (3 batches of 100, fewer if coalesced differently).
    expect(text.split('AUTH-401').length - 1).toBe(summary.requests);
    expect(summary.requests).toBeLessThanOrEqual(3);
  });

  it('caps the dead-letter file and counts what does not fit', async () => {
    const cap = 8192;
    const t = await setup({ JOBHARVEST_BATCH_MAX_RECORDS: '50', JOBHARVEST_DEAD_LETTER_MAX_BYTES: String(cap) });
    t.srv.handler = (_docs, _req, res) => {
      res.writeHead(401).end(BODY_401);
      return false;
    };
    await writeFile(t.log, lines(0, 400));
    const p = await t.start();
    const summary = await p.drain();
    const size = (await stat(t.deadLetterFile)).size;
    expect(size).toBeLessThanOrEqual(cap);
    expect(size).toBeGreaterThan(cap / 2);
    const dl = await t.deadLetters();
    expect(dl.length).toBeGreaterThan(0);
    expect(summary).toMatchObject({ lines_dead_lettered: 400, dead_letter_overflow_lines: 400 - dl.length, outcome: 'incomplete' });
    const written = new Set(dl.map((d) => d.record.message));
    const lostBytes = range(0, 400)
      .map((m, i) => (written.has(m) ? 0 : Buffer.byteLength(cri(TS(i), i % 2 ? 'stderr' : 'stdout', 'F', m))))
      .reduce((a, b) => a + b, 0);
    expect(summary.dead_letter_overflow_bytes).toBe(lostBytes);
  });

  it('counts a dead-letter file left by an earlier run against the cap', async () => {
    const cap = 4096;
    const t = await setup({ JOBHARVEST_DEAD_LETTER_MAX_BYTES: String(cap) });
    await mkdir(t.stateDir, { recursive: true });
    await writeFile(t.deadLetterFile, 'x'.repeat(cap - 100) + '\n');
    t.srv.handler = (_docs, _req, res) => {
      res.writeHead(400).end('{"error":"mapping"}');
      return false;
    };
    await writeFile(t.log, lines(0, 20));
    const p = await t.start();
    const summary = await p.drain();
    expect((await stat(t.deadLetterFile)).size).toBe(cap - 99);
    expect(summary).toMatchObject({ lines_dead_lettered: 20, dead_letter_overflow_lines: 20 });
  });
});

describe('the engine options a program gives the pipeline', () => {
  // What the process settings always carry is optional for a program that embeds the engine; without it, the pipeline says what is missing.
  const { logDir: _logDir, pollMs: _pollMs, stateDir: _stateDir, metricsPort: _m, logLevel: _l, failureExitCode: _f, terminationLog: _t, ...engine } = testConfig({ JOBHARVEST_SINK: 'stdout' });

  it('node mode without the log directory is refused at the start', async () => {
    const p = new Pipeline(engine, { checkpoint: new MemoryCheckpoint(new Map()), deadLetter: new CountingDeadLetter() });
    await expect(p.start()).rejects.toThrow(/node mode needs the log directory \(logDir\) and the poll interval \(pollMs\)/);
  });

  it('no state directory: the default checkpoint and dead-letter file are refused, given backends are not', () => {
    expect(() => new Pipeline(engine, { deadLetter: new CountingDeadLetter() })).toThrow(/the checkpoint needs a state directory/);
    expect(() => new Pipeline(engine, { checkpoint: new MemoryCheckpoint(new Map()) })).toThrow(/the dead-letter file needs a state directory/);
    expect(new Pipeline(engine, { checkpoint: new MemoryCheckpoint(new Map()), deadLetter: new CountingDeadLetter() }).openFiles).toBe(0);
  });
});
