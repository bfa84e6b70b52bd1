import { readFileSync, readdirSync } from 'node:fs';

const TICKS = 100;

/**
 * CPU seconds of a live process by thread group, from /proc/<pid>/task: the
 * main thread (the event loop), libuv's pool (gzip and file reads run there),
 * V8's platform workers (concurrent marking, parallel scavenges) and the rest.
 * A thread that already ended is not counted, so read it while the process lives.
 */
export function threadCpu(pid: number): Record<'main' | 'pool' | 'v8' | 'other', number> {
  const out = { main: 0, pool: 0, v8: 0, other: 0 };
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const tid of tids) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    } catch {
      continue;
    }
    const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const cpu = (Number(rest[11]) + Number(rest[12])) / TICKS;
    if (tid === String(pid)) out.main += cpu;
    else if (comm.startsWith('libuv-worker')) out.pool += cpu;
    else if (comm.startsWith('V8') || comm.includes('DefaultWorke')) out.v8 += cpu;
    else out.other += cpu;
  }
  return out;
}
