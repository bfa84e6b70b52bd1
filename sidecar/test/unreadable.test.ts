import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { exitCodeOf, forcedExitCode, INCOMPLETE_EXIT_CODE, drainOutcomeOf } from '../outcome.ts';
import { Pipeline } from '../pipeline.ts';
import { cri, testConfig, tmpDir } from '../../test/support/sidecar-helpers.ts';
import { NdjsonReceiver } from '../../test/support/ndjson-receiver.ts';

// Running as root, mode 000 is still readable: the open failure is injected
// instead, for the paths listed here. (test/integration/sidecar-unreadable
// produces a real EACCES with a non-root sidecar process.)
const denied = new Set<string>();
vi.mock('node:fs/promises', async (importOriginal) => {
  const real = await importOriginal<typeof import('node:fs/promises')>();
  const deny = (file: unknown, syscall: string) =>
    Promise.reject(Object.assign(new Error(`EACCES: permission denied, ${syscall} '${String(file)}'`), { code: 'EACCES', errno: -13, syscall }));
  const open = (file: unknown, ...rest: unknown[]) => (denied.has(String(file)) ? deny(file, 'open') : (real.open as (...a: unknown[]) => unknown)(file, ...rest));
  const readdir = (dir: unknown, ...rest: unknown[]) => (denied.has(String(dir)) ? deny(dir, 'scandir') : (real.readdir as (...a: unknown[]) => unknown)(dir, ...rest));
  return { ...real, open, readdir, default: { ...real, open, readdir } };
});

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  denied.clear();
  for (const c of cleanups.splice(0).reverse()) await c();
});

const TS = (i: number) => `2024-03-04T05:06:07.${String(i).padStart(9, '0')}Z`;
const lines = (from: number, to: number) => Array.from({ length: to - from }, (_, k) => cri(TS(from + k), 'stdout', 'F', `line ${from + k}`)).join('');

async function setup() {
  const root = await tmpDir();
  const logDir = path.join(root, 'pod');
  await mkdir(path.join(logDir, 'main'), { recursive: true });
  await mkdir(path.join(logDir, 'other'), { recursive: true });
  const srv = await new NdjsonReceiver().start();
  cleanups.push(() => srv.stop());
  const config = testConfig({
    JOBHARVEST_SINK: 'http',
    JOBHARVEST_ENDPOINT: srv.url,
    JOBHARVEST_LOG_DIR: logDir,
    JOBHARVEST_STATE_DIR: path.join(root, 'state'),
    JOBHARVEST_POLL_MS: '50',
    JOBHARVEST_BATCH_MAX_WAIT_MS: '50',
  });
  return { srv, logDir, config };
}

describe('log files that exist but cannot be opened', () => {
  it('are counted with their size and make the outcome incomplete', async () => {
    const t = await setup();
    const readable = path.join(t.logDir, 'main', '0.log');
    const unreadable = path.join(t.logDir, 'other', '0.log');
    await writeFile(readable, lines(0, 10));
    await writeFile(unreadable, lines(10, 30));
    denied.add(unreadable);
    const p = new Pipeline(t.config);
    await p.start();
    // Several polls: the file is counted once, not once per poll.
    await new Promise((r) => setTimeout(r, 300));
    const summary = await p.drain();
    expect(t.srv.accepted).toHaveLength(10);
    expect(summary).toMatchObject({
      outcome: 'incomplete',
      lines_read: 10,
      lines_shipped: 10,
      lines_unsent: 0,
      unread_bytes: 0,
      unreadable_files: 1,
      unreadable_bytes: Buffer.byteLength(lines(10, 30)),
    });
  });

  it('a file readable again later is shipped and no longer counted', async () => {
    const t = await setup();
    const file = path.join(t.logDir, 'other', '0.log');
    await writeFile(file, lines(0, 20));
    denied.add(file);
    const p = new Pipeline(t.config);
    await p.start();
    await new Promise((r) => setTimeout(r, 150));
    expect(p.stats.unreadableFiles).toBe(1);
    denied.delete(file);
    const summary = await p.drain();
    expect(t.srv.accepted).toHaveLength(20);
    expect(summary).toMatchObject({ outcome: 'complete', unreadable_files: 0, unreadable_bytes: 0 });
  });

  it('a container directory that cannot be listed counts too', async () => {
    const t = await setup();
    const dir = path.join(t.logDir, 'other');
    await writeFile(path.join(t.logDir, 'main', '0.log'), lines(0, 5));
    await writeFile(path.join(dir, '0.log'), lines(5, 10));
    denied.add(dir);
    const p = new Pipeline(t.config);
    await p.start();
    const summary = await p.drain();
    expect(t.srv.accepted).toHaveLength(5);
    expect(summary).toMatchObject({ outcome: 'incomplete', unreadable_files: 1 });
  });
});

describe('outcome and exit code', () => {
  const clean = { lines_unsent: 0, lines_dead_lettered: 0, unread_bytes: 0, unreadable_files: 0, deadline_hit: false, resume_gaps: 0 };
  it('complete only when nothing was lost', () => {
    expect(drainOutcomeOf(clean)).toBe('complete');
    for (const bad of [{ lines_unsent: 1 }, { lines_dead_lettered: 1 }, { unread_bytes: 1 }, { unreadable_files: 1 }, { deadline_hit: true }, { resume_gaps: 1 }]) {
      expect(drainOutcomeOf({ ...clean, ...bad }), JSON.stringify(bad)).toBe('incomplete');
    }
  });
  it('exit code 0 when complete, the configured code otherwise (default 3)', () => {
    expect(exitCodeOf('complete', 7)).toBe(0);
    expect(exitCodeOf('incomplete', 7)).toBe(7);
    expect(testConfig().failureExitCode).toBe(INCOMPLETE_EXIT_CODE);
    expect(INCOMPLETE_EXIT_CODE).toBe(3);
    expect(testConfig({ JOBHARVEST_FAILURE_EXIT_CODE: '42' }).failureExitCode).toBe(42);
    // 0 is what the webhook passes when every other code would match one of the
    // Job's podFailurePolicy rules.
    expect(testConfig({ JOBHARVEST_FAILURE_EXIT_CODE: '0' }).failureExitCode).toBe(0);
    expect(() => testConfig({ JOBHARVEST_FAILURE_EXIT_CODE: '256' })).toThrow(/JOBHARVEST_FAILURE_EXIT_CODE/);
  });
});

describe('forcedExitCode', () => {
  const name = 'JOBHARVEST_FAILURE_EXIT_CODE';
  it('reads the code the webhook chose, 0-255', () => {
    expect(forcedExitCode({ [name]: '17' }, name)).toBe(17);
    expect(forcedExitCode({ [name]: '0' }, name)).toBe(0);
    expect(forcedExitCode({ [name]: ' 255 ' }, name)).toBe(255);
  });
  it('ignores a missing or unusable value, so the sidecar keeps its own codes', () => {
    expect(forcedExitCode({}, name)).toBeUndefined();
    expect(forcedExitCode({ [name]: '256' }, name)).toBeUndefined();
    expect(forcedExitCode({ [name]: '-1' }, name)).toBeUndefined();
    expect(forcedExitCode({ [name]: 'three' }, name)).toBeUndefined();
  });
});
