import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { CountingHttpReceiver } from '../support/counting-receiver.ts';
import { ensureSidecarBundle, SidecarProcess, summaryNumber } from '../support/sidecar.ts';

/**
 * Files the sidecar cannot open, for real: the sidecar runs as a non-root
 * user (65534, as a restricted pod would) against root-owned 0600 files, the
 * way CRI-O's conmon created them before 2.1.13. As root, mode bits would not
 * stop it.
 */
const NOBODY = 65534;
const isRoot = process.getuid?.() === 0;

const cri = (i: number) => `2026-12-01T06:00:00.${String(i).padStart(9, '0')}Z stdout F line ${i}\n`;
const lines = (from: number, to: number) => Array.from({ length: to - from }, (_, k) => cri(from + k)).join('');

describe.skipIf(!isRoot)('sidecar with log files it cannot open (non-root sidecar, root-owned files)', () => {
  let root: string | undefined;
  let receiver: CountingHttpReceiver | undefined;
  let sidecar: SidecarProcess | undefined;

  beforeAll(() => {
    ensureSidecarBundle();
  });
  afterEach(async () => {
    if (sidecar && sidecar.child.exitCode === null) await sidecar.kill();
    sidecar = undefined;
    await receiver?.close();
    receiver = undefined;
    if (root) rmSync(root, { recursive: true, force: true });
    root = undefined;
  });

  function pod(files: Record<string, { text: string; mode: number }>, lockedDirs: string[] = []) {
    root = mkdtempSync(join(tmpdir(), 'jh-unreadable-'));
    chmodSync(root, 0o755);
    const logDir = join(root, 'ns_pod_uid');
    const stateDir = join(root, 'state');
    mkdirSync(logDir, { mode: 0o755 });
    mkdirSync(stateDir);
    chownSync(stateDir, NOBODY, NOBODY);
    for (const [rel, f] of Object.entries(files)) {
      const dir = join(logDir, rel.split('/')[0]!);
      mkdirSync(dir, { recursive: true, mode: 0o755 });
      writeFileSync(join(logDir, rel), f.text);
      chmodSync(join(logDir, rel), f.mode);
    }
    for (const d of lockedDirs) chmodSync(join(logDir, d), 0o700);
    return { logDir, stateDir };
  }

  async function run(dirs: { logDir: string; stateDir: string }, expectLines: number, extraEnv: Record<string, string> = {}, gid = NOBODY) {
    receiver = await CountingHttpReceiver.start();
    sidecar = SidecarProcess.start({
      identity: { namespace: 'ns', pod: 'pod', uid: 'uid' },
      logDir: dirs.logDir,
      stateDir: dirs.stateDir,
      sink: 'http',
      endpoint: receiver.url,
      settings: { POLL_MS: '50', BATCH_MAX_WAIT_MS: '50' },
      uid: NOBODY,
      gid,
      extraEnv,
    });
    await sidecar.waitForLog('sidecar started');
    await receiver.waitForLines(expectLines, 20_000);
    // A few polls, so that a per-poll warning would show.
    await new Promise((r) => setTimeout(r, 300));
    const s = sidecar;
    return { exit: await s.stop(), sidecar: s };
  }

  it('counts them, reports outcome=incomplete and exits 3', async () => {
    const dirs = pod(
      {
        'main/0.log': { text: lines(0, 50), mode: 0o644 },
        'crio/0.log': { text: lines(50, 80), mode: 0o600 },
        'locked/0.log': { text: lines(80, 90), mode: 0o644 },
      },
      ['locked'],
    );
    const { exit, sidecar: s } = await run(dirs, 50);
    expect(receiver!.stats.lines).toBe(50);
    expect(exit.code, s.tail()).toBe(3);
    expect(exit.summary, s.tail()).toMatchObject({
      outcome: 'incomplete',
      lines_shipped: 50,
      lines_unsent: 0,
      unread_bytes: 0,
      unreadable_files: 2,
      // The locked directory's files cannot even be listed: only the file's size is known.
      unreadable_bytes: statSync(join(dirs.logDir, 'crio/0.log')).size,
    });
    // One warning per unreadable path, not one per poll.
    const warnings = s.logEntries().filter((e) => e.msg === 'cannot open a log file or directory; its lines are not shipped');
    expect(warnings.map((w) => w.path).sort()).toEqual([join(dirs.logDir, 'crio/0.log'), join(dirs.logDir, 'locked')].sort());
  });

  it('exits with JOBHARVEST_FAILURE_EXIT_CODE when it is set', async () => {
    const dirs = pod({ 'main/0.log': { text: lines(0, 5), mode: 0o644 }, 'crio/0.log': { text: lines(5, 10), mode: 0o600 } });
    const { exit, sidecar: s } = await run(dirs, 5, { JOBHARVEST_FAILURE_EXIT_CODE: '17' });
    expect(exit.code, s.tail()).toBe(17);
    expect(summaryNumber(exit.summary, 'unreadable_files')).toBe(1);
  });

  it('uses JOBHARVEST_FAILURE_EXIT_CODE for every failure, a bad configuration too', async () => {
    const dirs = pod({ 'main/0.log': { text: lines(0, 5), mode: 0o644 } });
    const start = (extraEnv: Record<string, string>) =>
      SidecarProcess.start({
        identity: { namespace: 'ns', pod: 'pod', uid: 'uid' },
        logDir: dirs.logDir,
        stateDir: dirs.stateDir,
        sink: 'http',
        endpoint: 'http://127.0.0.1:9/',
        settings: { BATCH_MAX_BYTES: 'lots' },
        uid: NOBODY,
        gid: NOBODY,
        extraEnv,
      });
    const own = start({});
    const ownExit = await own.exited();
    expect(ownExit.code, own.tail()).toBe(2);
    const forced = start({ JOBHARVEST_FAILURE_EXIT_CODE: '17' });
    const forcedExit = await forced.exited();
    expect(forcedExit.code, forced.tail()).toBe(17);
    expect(forced.tail()).toMatch(/JOBHARVEST_BATCH_MAX_BYTES/);
  });

  it('exits 0 with outcome=complete when every file was read and delivered', async () => {
    // containerd's root:root 0640 files, read through group 0 as the injected sidecar does.
    const dirs = pod({ 'main/0.log': { text: lines(0, 20), mode: 0o640 }, 'other/0.log': { text: lines(20, 30), mode: 0o640 } });
    const { exit, sidecar: s } = await run(dirs, 30, {}, 0);
    expect(exit.code, s.tail()).toBe(0);
    expect(exit.summary, s.tail()).toMatchObject({ outcome: 'complete', lines_shipped: 30, unreadable_files: 0, unreadable_bytes: 0 });
  });
});
