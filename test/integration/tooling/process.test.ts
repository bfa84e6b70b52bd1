import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { exited } from '../../support/process.ts';

const PROCESS_TS = fileURLToPath(new URL('../../support/process.ts', import.meta.url));
const TSX = fileURLToPath(new URL('../../../node_modules/.bin/tsx', import.meta.url));

/** Gone, or a zombie nobody has reaped yet: either way no longer running. */
function running(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

describe('test/support/process.ts', () => {
  const dir = mkdtempSync(join(tmpdir(), 'jobharvest-process-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  // A runner that dies without its teardown must take every kind of child
  // with it: a cluster process group, a tracked server and a container group.
  it('kills every kind of child when the runner crashes', async () => {
    const script = join(dir, 'runner.ts');
    writeFileSync(
      script,
      `
      import { spawn } from 'node:child_process';
      import { PassThrough } from 'node:stream';
      import { spawnLogged, startProcess, trackGroup } from ${JSON.stringify(PROCESS_TS)};
      const cluster = startProcess('sleeper', 'sleep', ['300'], ${JSON.stringify(join(dir, 'sleeper.log'))});
      const server = spawnLogged('sleep', ['300'], new PassThrough());
      const container = spawn('sleep', ['300'], { detached: true, stdio: 'ignore' });
      trackGroup(container.pid!);
      console.log(JSON.stringify([cluster.pid, server.pid, container.pid]));
      setTimeout(() => { throw new Error('runner crashed'); }, 200);
      `,
    );
    const runner = spawn(TSX, [script], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    runner.stdout.on('data', (b: Buffer) => (out += b.toString()));
    const exit = await exited(runner);
    expect(exit.code).not.toBe(0);
    const pids = JSON.parse(out.trim()) as number[];
    expect(pids).toHaveLength(3);
    for (const pid of pids) expect(pid).toBeGreaterThan(0);
    // SIGKILL is delivered at once; the init process may take a moment to reap.
    const deadline = Date.now() + 5_000;
    while (pids.some(running) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(pids.filter(running)).toEqual([]);
  });
});
