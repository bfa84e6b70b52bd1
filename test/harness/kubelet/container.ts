/**
 * One run of one container: a local process in its own process group, whose
 * stdout and stderr become CRI lines through the kubelet-exact log writer.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { constants } from 'node:os';
import type { ContainerLogWriter, Stream } from '../../support/kubelet-log-writer.ts';
import { trackGroup } from '../../support/process.ts';

export interface InstanceResult {
  exitCode: number;
  /** Completed, Error, or StartError when the process could not be started. */
  reason: string;
  signal: NodeJS.Signals | null;
  message?: string;
  startedAt: Date;
  finishedAt: Date;
}

export interface StartSpec {
  argv: string[];
  env: Record<string, string>;
  cwd: string;
  log: ContainerLogWriter;
  /**
   * Signals as to a PID namespace's init: dropped unless the process has a
   * handler for them (SIGKILL aside), as the kernel does for a container's
   * PID 1 in a pod that does not share its PID namespace.
   */
  init?: boolean;
  /** Lines of output kept in memory, for tests that read a container's last words after its pod is gone. */
  keepLines?: number;
}

export class ContainerInstance {
  readonly startedAt = new Date();
  readonly done: Promise<InstanceResult>;
  /** The last lines the container printed, both streams. */
  readonly output: string[] = [];
  private readonly child: ChildProcess;
  private exited = false;

  constructor(private readonly spec: StartSpec) {
    const [cmd, ...args] = spec.argv;
    // detached: its own process group, which plays the container's PID
    // namespace: when the main process ends, everything it left is killed.
    this.child = spawn(cmd!, args, { cwd: spec.cwd, env: spec.env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    const pid = this.child.pid;
    // A crashing test run must not leave containers behind.
    const untrack = pid !== undefined ? trackGroup(pid) : undefined;
    this.pipe(this.child.stdout!, 'stdout');
    this.pipe(this.child.stderr!, 'stderr');
    this.done = new Promise((resolve) => {
      let startError: Error | undefined;
      this.child.once('error', (err) => (startError = err));
      this.child.once('exit', () => {
        this.exited = true;
        if (pid !== undefined) {
          this.killGroup('SIGKILL');
          untrack?.();
        }
      });
      this.child.once('close', (code, signal) => {
        this.exited = true;
        const finishedAt = new Date();
        if (startError && pid === undefined) {
          const message = `failed to start ${cmd}: ${startError.message}`;
          this.record(message);
          resolve({ exitCode: 128, reason: 'StartError', signal: null, message, startedAt: this.startedAt, finishedAt });
          return;
        }
        const exitCode = code ?? 128 + (signal ? (constants.signals[signal] ?? 0) : 0);
        resolve({ exitCode, reason: exitCode === 0 ? 'Completed' : 'Error', signal, startedAt: this.startedAt, finishedAt });
      });
    });
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get running(): boolean {
    return !this.exited;
  }

  /** A signal to the main process, as the runtime sends it to the container's PID 1. */
  signal(sig: NodeJS.Signals): void {
    if (this.exited) return;
    if (this.spec.init && sig !== 'SIGKILL' && !catches(this.child.pid, sig)) return;
    try {
      this.child.kill(sig);
    } catch {
      // gone meanwhile
    }
  }

  /** SIGKILL to every process of the container. */
  kill(): void {
    this.killGroup('SIGKILL');
  }

  private killGroup(sig: NodeJS.Signals): void {
    const pid = this.child.pid;
    if (pid === undefined) return;
    try {
      process.kill(-pid, sig);
    } catch {
      // the group is empty
    }
  }

  private record(line: string): void {
    const keep = this.spec.keepLines ?? 200;
    this.output.push(line);
    if (this.output.length > keep) this.output.splice(0, this.output.length - keep);
  }

  private pipe(stream: NodeJS.ReadableStream, name: Stream): void {
    // The runtime frames complete lines; a line still open when the data ends
    // is written as it is.
    let pending: Buffer = Buffer.alloc(0);
    const write = (b: Buffer) => {
      this.spec.log.write(name, b);
      const text = b.toString('utf8');
      for (const l of text.split('\n').slice(-(this.spec.keepLines ?? 200))) this.record(l);
    };
    stream.on('data', (chunk: Buffer) => {
      const buf = pending.length > 0 ? Buffer.concat([pending, chunk]) : chunk;
      const nl = buf.lastIndexOf(0x0a);
      if (nl === -1) {
        pending = buf;
        return;
      }
      write(buf.subarray(0, nl));
      pending = Buffer.from(buf.subarray(nl + 1));
    });
    stream.on('end', () => {
      if (pending.length > 0) write(pending);
      pending = Buffer.alloc(0);
    });
  }
}

/** Whether the process has a handler for the signal: its bit in /proc/<pid>/status SigCgt (Linux). */
function catches(pid: number | undefined, sig: NodeJS.Signals): boolean {
  if (pid === undefined) return false;
  try {
    const mask = /^SigCgt:\s*([0-9a-f]+)$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return mask !== undefined && ((BigInt(`0x${mask}`) >> BigInt(constants.signals[sig] - 1)) & 1n) === 1n;
  } catch {
    return false; // gone meanwhile
  }
}
