// The stop handshake with the kubelet: the sidecar's preStop hook
// (`--wait-started`, given to every pod by src/core/inject.ts, stopHook). The
// kubelet runs a container's preStop hook before it sends the container
// SIGTERM, and the hook returns only once the sidecar has written its marker,
// which it does as soon as its SIGTERM handler is in place (signals.ts). So
// the kubelet's SIGTERM cannot come before the handler, even for a pod
// deleted while the sidecar is still booting: as PID 1 of its container the
// sidecar would otherwise lose that signal (the kernel discards a signal to a
// namespace's init that has no handler for it) and run on until the grace
// period's SIGKILL; in a shared PID namespace, where it is not PID 1, the
// signal would kill it before it drained.
//
// The marker names the process that wrote it, by PID and by the kernel's
// start time of that process, so that a marker left in the state volume by an
// earlier run of a restarted sidecar does not count for the run in progress.
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ENV } from '../src/contract/env.ts';

const MARKER = 'started';

function markerPath(env: NodeJS.ProcessEnv): string {
  return path.join(env[ENV.STATE_DIR.name] || ENV.STATE_DIR.default, MARKER);
}

/**
 * The kernel's start time of a process, field 22 of /proc/<pid>/stat (clock
 * ticks since boot), or undefined where there is no such process or no /proc.
 */
export function processStartTime(pid: number | 'self'): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Field 2, the command name, is in parentheses and may hold spaces and parentheses itself.
    const start = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
    return start !== undefined && /^\d+$/.test(start) ? start : undefined;
  } catch {
    return undefined;
  }
}

export function markStarted(env: NodeJS.ProcessEnv): void {
  try {
    writeFileSync(markerPath(env), `${process.pid} ${processStartTime('self') ?? '-'}\n`);
  } catch {
    // An unusable state dir is reported by the pipeline's own start-up check;
    // the hook then gives up after its timeout and the kubelet goes on.
  }
}

/**
 * Whether a marker's text was written by the process that runs under its PID
 * now. Where the writer found no /proc to read its start time in ('-'), the
 * marker alone has to do.
 */
export function markerIsCurrent(text: string): boolean {
  const m = /^(\d+) (\d+|-)\n$/.exec(text);
  if (!m) return false; // none yet, or being written
  return m[2] === '-' || processStartTime(Number(m[1])) === m[2];
}

/**
 * The hook's side: wait for this run's marker. It gives up after `timeoutMs`
 * and still exits 0: a preStop hook's failure changes nothing (the kubelet
 * goes on to SIGTERM), and the time it takes comes out of the grace period.
 */
export async function waitStarted(env: NodeJS.ProcessEnv, timeoutMs = 10_000): Promise<boolean> {
  const file = markerPath(env);
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    let text = '';
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      // not written yet
    }
    if (markerIsCurrent(text)) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return false;
}
