import { execFileSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { closedAncestor, runnableByOthers, SidecarProcess } from '../../support/sidecar.ts';

const NOBODY = 65534;
const isRoot = process.getuid?.() === 0;

describe('test/support/sidecar.ts', () => {
  const dir = mkdtempSync(join(tmpdir(), 'jobharvest-sidecar-process-'));
  chmodSync(dir, 0o755);
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const start = (node: string) =>
    SidecarProcess.start({ identity: { namespace: 'ns', pod: 'pod', uid: 'uid' }, logDir: dir, stateDir: dir, sink: 'stdout', node });

  it('fails a sidecar that cannot be started at once, instead of waiting for an exit that never comes', async () => {
    const t0 = performance.now();
    const s = start(join(dir, 'no-such-node'));
    await expect(s.waitForLog('sidecar started')).rejects.toThrow(/could not be started.*ENOENT/);
    await expect(s.exited()).rejects.toThrow(/could not be started/);
    await expect(s.stop()).rejects.toThrow(/could not be started/);
    await s.kill();
    expect(performance.now() - t0).toBeLessThan(2_000);
  });

  it('finds the folder that closes a path to other users', () => {
    const closed = mkdtempSync(join(dir, 'closed-'));
    expect((statSync(closed).mode & 0o777).toString(8)).toBe('700');
    mkdirSync(join(closed, 'clone'), { mode: 0o755 });
    expect(closedAncestor(join(closed, 'clone'))).toBe(closed);
    expect(closedAncestor('/usr/bin')).toBeUndefined();
  });

  it.skipIf(!isRoot)('gives a sidecar run as another user a node and a bundle that user can run, wherever the clone is', () => {
    const { node, bundle } = runnableByOthers();
    expect(closedAncestor(node)).toBeUndefined();
    expect(execFileSync(node, ['-e', 'process.stdout.write(process.version)'], { uid: NOBODY, gid: NOBODY, encoding: 'utf8' })).toBe(process.version);
    // That user can read the entry point (node parses it without running it).
    expect(execFileSync(node, ['--check', bundle], { uid: NOBODY, gid: NOBODY, encoding: 'utf8' })).toBe('');
  });
});
