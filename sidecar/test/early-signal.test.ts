// A SIGTERM that arrives while the sidecar is still starting, before its
// pipeline has started: the entry point's latch holds it, and it is honoured
// once the pipeline is up: a full drain, the summary, exit 0. Runs the bundle
// the image ships, as a pod does.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { ensureSidecarBundle } from '../../test/support/sidecar.ts';
import { cri, tmpDir } from '../../test/support/sidecar-helpers.ts';

const LINES = 20;

async function earlySigterm(): Promise<{ code: number | null; entries: Array<Record<string, unknown>>; stdout: string }> {
  const dir = await tmpDir();
  const logDir = path.join(dir, 'logs');
  await mkdir(path.join(logDir, 'main'), { recursive: true });
  await mkdir(path.join(dir, 'state'));
  let text = '';
  for (let i = 0; i < LINES; i++) text += cri(`2024-03-04T05:06:07.${String(i).padStart(9, '0')}Z`, 'stdout', 'F', `early ${i}`);
  await writeFile(path.join(logDir, 'main', '0.log'), text);
  const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', POD_NAMESPACE: 'ns', POD_NAME: 'pod', POD_UID: 'uid', JOBHARVEST_MODE: 'node', JOBHARVEST_LOG_DIR: logDir, JOBHARVEST_STATE_DIR: path.join(dir, 'state'), JOBHARVEST_SINK: 'stdout' };
  const child = spawn(process.execPath, [ensureSidecarBundle()], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
  child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  // The start-up marker (started.ts) is written once the handler is in, before
  // the configuration is read and the pipeline started. (Node's own native
  // SIGTERM handler, in place from early in its boot, exits the process: a
  // handler bit in /proc cannot tell when the latch went in.)
  const marker = path.join(dir, 'state', 'started');
  const until = Date.now() + 10_000;
  while (!existsSync(marker) && Date.now() < until) await sleep(1);
  child.kill('SIGTERM');
  const code = await exited;
  await rm(dir, { recursive: true, force: true });
  const entries = stderr
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  return { code, entries, stdout };
}

describe('a SIGTERM while the sidecar starts', () => {
  it('is caught by the latch the entry point installs first, then drained in full', async () => {
    for (let run = 0; run < 3; run++) {
      const { code, entries, stdout } = await earlySigterm();
      const signal = entries.find((e) => e.msg === 'signal received, draining');
      const summary = entries.find((e) => e.msg === 'summary');
      expect({ code, signal: signal?.signal, outcome: summary?.outcome, shipped: summary?.lines_shipped }).toEqual({ code: 0, signal: 'SIGTERM', outcome: 'complete', shipped: LINES });
      expect(stdout.split('\n').filter(Boolean)).toHaveLength(LINES);
      // The handler went in before the signal came, and the log says when.
      expect(typeof signal?.handlerSinceStartMs).toBe('number');
      expect(signal!.handlerSinceStartMs as number).toBeLessThanOrEqual(signal!.sinceStartMs as number);
    }
  });
});
