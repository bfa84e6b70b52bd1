import type { ChildProcess } from 'node:child_process';

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
