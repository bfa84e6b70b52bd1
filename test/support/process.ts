/**
 * Child processes of the tests, the harnesses and the benchmarks:
 *
 * - `startProcess`: a long-lived process of the test cluster (etcd, the API
 *   server). It leads its own process group and writes stdout and stderr to a
 *   log file, so that a failing run can be read afterwards and a stop reaches
 *   anything the process forked.
 * - `spawnLogged`/`track`: a server or sidecar started by one test, piping its
 *   output into a log stream the test owns.
 * - `trackGroup`: a process group its caller spawned and stops itself (the
 *   test kubelet's containers).
 *
 * None may outlive the test process, even when it crashes before its teardown
 * runs: one exit hook kills them all.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, closeSync, openSync, readFileSync } from 'node:fs';
import type { Writable } from 'node:stream';

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface ManagedProcess {
  name: string;
  pid: number;
  logPath: string;
  /** Set once the process has exited. */
  exit: Exit | undefined;
  exited: Promise<Exit>;
  /** SIGTERM to the group, then SIGKILL once `graceMs` has passed. */
  stop(graceMs?: number): Promise<Exit>;
  /** The last lines of the log, for error messages. */
  logTail(lines?: number): string;
}

// Proxy settings inherited from the developer's shell would send the API
// server's calls to etcd and to loopback webhooks through a proxy that cannot
// reach them.
const PROXY_VARIABLES = ['HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY', 'NO_PROXY'];

export function childEnvironment(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const name of PROXY_VARIABLES) {
    delete env[name];
    delete env[name.toLowerCase()];
  }
  return env;
}

function signalGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // ESRCH: the whole group is already gone.
  }
}

const live = new Set<ManagedProcess>();
const liveChildren = new Set<ChildProcess>();
const liveGroups = new Set<number>();
const exitCleanups = new Set<() => void>();
let exitHookInstalled = false;

/**
 * A runner that exits without running the global teardown (an uncaught error,
 * or vitest's own process.exit on SIGINT and SIGTERM) still fires 'exit',
 * where only synchronous work is possible: kill every group and tracked child
 * outright, then run the registered synchronous cleanups.
 */
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const p of live) signalGroup(p.pid, 'SIGKILL');
    for (const c of liveChildren) c.kill('SIGKILL');
    for (const pgid of liveGroups) signalGroup(pgid, 'SIGKILL');
    for (const cleanup of exitCleanups) {
      try {
        cleanup();
      } catch {
        // Nothing can be reported usefully while the runner exits.
      }
    }
  });
}

/** Registers synchronous work for an abrupt runner exit; returns the way to unregister it. */
export function onRunnerExit(cleanup: () => void): () => void {
  installExitHook();
  exitCleanups.add(cleanup);
  return () => exitCleanups.delete(cleanup);
}

export function startProcess(name: string, binary: string, args: string[], logPath: string): ManagedProcess {
  installExitHook();
  appendFileSync(logPath, `# ${binary} ${args.join(' ')}\n`);
  const logFd = openSync(logPath, 'a');
  const child = spawn(binary, args, {
    detached: true,
    stdio: ['ignore', logFd, logFd],
    env: childEnvironment(),
  });
  closeSync(logFd);
  // Without a pid, spawn failed (missing binary); 'error' carries the reason.
  const spawnError = new Promise<Error>((resolve) => child.once('error', resolve));

  let exit: Exit | undefined;
  const exited = new Promise<Exit>((resolve) => {
    child.once('exit', (code, signal) => {
      exit = { code, signal };
      live.delete(managed);
      resolve(exit);
    });
    void spawnError.then((err) => {
      exit ??= { code: -1, signal: null };
      appendFileSync(logPath, `# could not start: ${err.message}\n`);
      live.delete(managed);
      resolve(exit);
    });
  });
  const managed: ManagedProcess = {
    name,
    pid: child.pid ?? -1,
    logPath,
    get exit() {
      return exit;
    },
    exited,
    async stop(graceMs = 10_000) {
      if (exit !== undefined || managed.pid < 0) return exited;
      signalGroup(managed.pid, 'SIGTERM');
      const timer = setTimeout(() => signalGroup(managed.pid, 'SIGKILL'), graceMs);
      const result = await exited;
      clearTimeout(timer);
      // The leader is gone; anything it left in its group goes with it.
      signalGroup(managed.pid, 'SIGKILL');
      return result;
    },
    logTail(lines = 30) {
      return tailFile(logPath, lines);
    },
  };
  if (managed.pid > 0) live.add(managed);
  return managed;
}

export function describeExit(e: Exit): string {
  return e.signal !== null ? `killed by ${e.signal}` : `exited with code ${e.code}`;
}

/**
 * A shell loop, in its own process group, that outlives a runner killed with
 * SIGKILL (where no JavaScript runs): once the runner's pid is gone it kills
 * every process group listed in `pidFile` and deletes `dataDir`. Logs stay.
 */
export function startWatchdog(pidFile: string, dataDir: string): ManagedProcess {
  const script = [
    'runner=$1; pids=$2; data=$3',
    'while kill -0 "$runner" 2>/dev/null; do sleep 1; done',
    'if [ -f "$pids" ]; then while read -r g; do kill -KILL -- "-$g" 2>/dev/null; done < "$pids"; fi',
    'rm -rf "$data"',
  ].join('\n');
  const child = spawn('bash', ['-c', script, 'jobharvest-cluster-watchdog', String(process.pid), pidFile, dataDir], {
    detached: true,
    stdio: 'ignore',
  });
  let exit: Exit | undefined;
  const exited = new Promise<Exit>((resolve) => {
    child.once('exit', (code, signal) => resolve((exit = { code, signal })));
  });
  const pid = child.pid ?? -1;
  return {
    name: 'watchdog',
    pid,
    logPath: '',
    get exit() {
      return exit;
    },
    exited,
    async stop() {
      if (exit === undefined && pid > 0) signalGroup(pid, 'SIGKILL');
      return exited;
    },
    logTail: () => '',
  };
}

/**
 * Kills the process group `pgid` (a child spawned with `detached: true`) when
 * the test process exits first; returns the way to forget it once it is gone.
 */
export function trackGroup(pgid: number): () => void {
  installExitHook();
  liveGroups.add(pgid);
  return () => liveGroups.delete(pgid);
}

/** Kills `child` when the test process exits while the child still runs. */
export function track(child: ChildProcess): void {
  installExitHook();
  liveChildren.add(child);
  child.once('exit', () => liveChildren.delete(child));
}

/** Resolves with the exit code (or signal) once the child has exited. */
export function exited(child: ChildProcess): Promise<Exit> {
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

/** One of the project's own programs (webhook, harvester) run as a process by a test or bench. */
export interface ProgramProcess {
  child: ChildProcess;
  logPath: string;
  /** SIGTERM, SIGKILL after 5 s; resolves once it has exited. */
  stop(): Promise<void>;
  exited(): boolean;
}

/**
 * Starts a program whose output goes to `logPath` through a file descriptor
 * of its own, as a container's output goes to a file the runtime drains: over
 * a pipe to this process, a busy test or bench would hold up its synchronous
 * log writes. Tracked, so it dies with the test run.
 */
export function startProgram(bin: string, args: string[], o: { logPath: string; cwd?: string; env?: NodeJS.ProcessEnv }): ProgramProcess {
  const fd = openSync(o.logPath, 'a');
  const child = spawn(bin, args, { cwd: o.cwd, stdio: ['ignore', fd, fd], env: { ...process.env, ...o.env } });
  closeSync(fd);
  track(child);
  let exitCode: number | null | undefined;
  child.once('exit', (code, signal) => (exitCode = code ?? (signal ? -1 : 0)));
  return {
    child,
    logPath: o.logPath,
    exited: () => exitCode !== undefined,
    stop: () =>
      new Promise<void>((resolve) => {
        if (exitCode !== undefined) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
        setTimeout(() => child.kill('SIGKILL'), 5000).unref();
      }),
  };
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
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}
