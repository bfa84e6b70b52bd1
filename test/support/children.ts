import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import type { Writable } from 'node:stream';

// Servers started by a test must not outlive the test process, even when the
// test crashes before its afterAll hook runs.
const live = new Set<ChildProcess>();
let hooked = false;

export function track(child: ChildProcess): void {
  live.add(child);
  child.once('exit', () => live.delete(child));
  if (!hooked) {
    hooked = true;
    process.once('exit', () => {
      for (const c of live) c.kill('SIGKILL');
    });
  }
}

/** Resolves with the exit code (or signal) once the child has exited. */
export function exited(child: ChildProcess): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  if (child.exitCode !== null || child.signalCode !== null) {
    return Promise.resolve({ code: child.exitCode, signal: child.signalCode });
  }
  return new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
}

/** SIGTERM, then SIGKILL after `graceMs`; resolves once the child is gone. */
export async function terminate(child: ChildProcess, graceMs = 10_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const done = exited(child);
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await done;
  clearTimeout(timer);
}

/** Starts a server process with both its streams appended to `log`, tracked so it dies with the test run. */
export function spawnLogged(bin: string, args: string[], log: Writable): ChildProcess {
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  track(child);
  child.stdout?.pipe(log, { end: false });
  child.stderr?.pipe(log, { end: false });
  return child;
}

/**
 * Polls `ready` until it says yes. A child that exits first, or a deadline
 * passed, fails with the end of the server's log, which says why.
 */
export async function waitStarted(child: ChildProcess, what: string, ready: () => Promise<boolean>, timeoutMs: number, logFile: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`${what} exited during start-up:\n${tailFile(logFile)}`);
    if (await ready().catch(() => false)) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${what} not ready after ${timeoutMs} ms:\n${tailFile(logFile)}`);
}

/** The last lines of a log file, for error messages. */
export function tailFile(file: string, lines = 40): string {
  try {
    return readFileSync(file, 'utf8').split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}
