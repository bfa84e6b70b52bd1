// The preStop handshake's marker (started.ts): the hook returns only for a
// marker the running sidecar wrote, not for one an earlier run of a restarted
// sidecar left in the state volume, and the image's hook command (the bundle
// with --wait-started) waits for it without loading the sidecar.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ensureSidecarBundle } from '../../test/support/sidecar.ts';
import { markerIsCurrent, markStarted, processStartTime, waitStarted } from '../started.ts';
import { tmpDir } from '../../test/support/sidecar-helpers.ts';

describe('the started marker', () => {
  it('names the process that wrote it, by PID and start time, and counts only while that process runs', async () => {
    const dir = await tmpDir();
    const env = { JOBHARVEST_STATE_DIR: dir };
    markStarted(env);
    const text = readFileSync(path.join(dir, 'started'), 'utf8');
    expect(text).toBe(`${process.pid} ${processStartTime('self')}\n`);
    expect(markerIsCurrent(text)).toBe(true);
    expect(await waitStarted(env, 1_000)).toBe(true);
    await rm(dir, { recursive: true, force: true });
  });

  it('does not count when left by an earlier process under the same PID, or by one that is gone', () => {
    const start = Number(processStartTime('self'));
    expect(markerIsCurrent(`${process.pid} ${start + 1}\n`)).toBe(false);
    expect(markerIsCurrent(`${process.pid} ${start - 1}\n`)).toBe(false);
    // PIDs stop at 2^22 on Linux.
    expect(markerIsCurrent(`${2 ** 23} ${start}\n`)).toBe(false);
  });

  it('does not count half written or malformed, and counts a marker whose writer had no /proc', () => {
    for (const text of ['', `${process.pid}`, `${process.pid} `, `${process.pid} 12x\n`, `x ${processStartTime('self')}\n`]) expect(markerIsCurrent(text)).toBe(false);
    expect(markerIsCurrent(`${process.pid} -\n`)).toBe(true);
  });

  it('makes the hook wait past a stale marker, and give up after its timeout', async () => {
    const dir = await tmpDir();
    await writeFile(path.join(dir, 'started'), `${process.pid} 1\n`);
    const t0 = Date.now();
    expect(await waitStarted({ JOBHARVEST_STATE_DIR: dir }, 300)).toBe(false);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(300);
    await rm(dir, { recursive: true, force: true });
  });

  it('is what the bundle\'s --wait-started waits for: it returns once the sidecar started beside it wrote its own', async () => {
    const bundle = ensureSidecarBundle();
    const dir = await tmpDir();
    const state = path.join(dir, 'state');
    await mkdir(path.join(dir, 'logs'), { recursive: true });
    await mkdir(state);
    // An earlier run's marker.
    await writeFile(path.join(state, 'started'), `${process.pid} 1\n`);
    const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', POD_NAMESPACE: 'ns', POD_NAME: 'pod', POD_UID: 'uid', JOBHARVEST_MODE: 'node', JOBHARVEST_LOG_DIR: path.join(dir, 'logs'), JOBHARVEST_STATE_DIR: state, JOBHARVEST_SINK: 'stdout' };
    const hook = spawn(process.execPath, [bundle, '--wait-started'], { env, stdio: 'ignore' });
    const hookExited = new Promise<number | null>((resolve) => hook.once('exit', (code) => resolve(code)));
    // The hook must not return on the stale marker.
    const early = await Promise.race([hookExited, new Promise((r) => setTimeout(() => r('waiting'), 1_000))]);
    expect(early).toBe('waiting');
    const sidecar = spawn(process.execPath, [bundle], { env, stdio: 'ignore' });
    const sidecarExited = new Promise<number | null>((resolve) => sidecar.once('exit', (code) => resolve(code)));
    expect(await hookExited).toBe(0);
    expect(readFileSync(path.join(state, 'started'), 'utf8')).toBe(`${sidecar.pid} ${processStartTime(sidecar.pid!)}\n`);
    sidecar.kill('SIGTERM');
    expect(await sidecarExited).toBe(0);
    await rm(dir, { recursive: true, force: true });
  });
});
