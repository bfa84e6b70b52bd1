import { readFileSync } from 'node:fs';

/** Clock ticks per second for /proc/<pid>/stat times (USER_HZ; 100 on Linux). */
const TICKS = 100;

export interface ProcSample {
  cpuSeconds: number;
  peakRssMiB: number;
}

/** CPU time (user + system) and peak resident set (VmHWM) of a live process, or undefined once it is gone. */
export function sample(pid: number): ProcSample | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const cpuSeconds = (Number(rest[11]) + Number(rest[12])) / TICKS;
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const hwm = /VmHWM:\s+(\d+) kB/.exec(status);
    return { cpuSeconds, peakRssMiB: hwm ? Number(hwm[1]) / 1024 : 0 };
  } catch {
    return undefined;
  }
}

/** Samples a process every `ms` and keeps the latest values, so a reading survives the process exiting. */
export class Sampler {
  last: ProcSample = { cpuSeconds: 0, peakRssMiB: 0 };
  private readonly timer: NodeJS.Timeout;
  constructor(private readonly pid: number, ms = 100) {
    this.timer = setInterval(() => this.poll(), ms);
  }
  poll(): ProcSample {
    const s = sample(this.pid);
    if (s) this.last = { cpuSeconds: s.cpuSeconds, peakRssMiB: Math.max(this.last.peakRssMiB, s.peakRssMiB) };
    return this.last;
  }
  stop(): ProcSample {
    this.poll();
    clearInterval(this.timer);
    return this.last;
  }
}
