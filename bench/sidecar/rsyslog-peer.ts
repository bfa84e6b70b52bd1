import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { RSYSLOGD } from '../../test/harness/servers/rsyslog.ts';
import { exited, terminate, track } from '../../test/support/process.ts';

export interface PeerRun {
  pid: number;
  startedAt: number;
  stop: () => Promise<void>;
  exited: () => ReturnType<typeof exited>;
}

/**
 * Starts a private rsyslogd (foreground, own work directory and pid file,
 * never the system service) that tails `file` from its start with imfile and
 * forwards every line over TCP with omfwd.
 */
export function startRsyslogPeer(opts: { file: string; port: number; workDir: string; cpus?: string }): PeerRun {
  mkdirSync(join(opts.workDir, 'state'), { recursive: true });
  const conf = join(opts.workDir, 'rsyslog.conf');
  writeFileSync(
    conf,
    [
      `global(workDirectory="${join(opts.workDir, 'state')}" maxMessageSize="64k")`,
      'module(load="imfile" mode="inotify")',
      `input(type="imfile" file="${opts.file}" tag="bench" ruleset="fwd" freshStartTail="off" reopenOnTruncate="on")`,
      'ruleset(name="fwd" queue.type="LinkedList" queue.size="200000" queue.dequeueBatchSize="1024") {',
      `  action(type="omfwd" target="127.0.0.1" port="${opts.port}" protocol="tcp" template="RSYSLOG_ForwardFormat"`,
      '         queue.type="LinkedList" queue.size="200000" queue.dequeueBatchSize="1024" action.resumeRetryCount="-1")',
      '}',
      '',
    ].join('\n'),
  );
  const args = ['-n', '-f', conf, '-i', join(opts.workDir, 'rsyslogd.pid')];
  const startedAt = Date.now();
  const child = opts.cpus ? spawn('taskset', ['-c', opts.cpus, RSYSLOGD, ...args], { stdio: 'inherit' }) : spawn(RSYSLOGD, args, { stdio: 'inherit' });
  track(child);
  return { pid: child.pid ?? -1, startedAt, stop: () => terminate(child), exited: () => exited(child) };
}
