import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';

export const RSYSLOGD = '/usr/sbin/rsyslogd';

/**
 * Installs the distribution's rsyslog (the benchmark's peer) when it is missing.
 * Only the daemon is needed: the bench runs its own instance with its own
 * config, never the system service.
 */
export function ensureRsyslog(log: (msg: string) => void = () => {}): string {
  if (existsSync(RSYSLOGD)) return RSYSLOGD;
  if (process.getuid?.() !== 0) {
    throw new Error(`${RSYSLOGD} is missing; install the rsyslog package (needs root: apt-get install -y rsyslog)`);
  }
  log('installing rsyslog from the distribution');
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  execFileSync('apt-get', ['update'], { stdio: 'inherit', env });
  execFileSync('apt-get', ['install', '-y', '--no-install-recommends', 'rsyslog'], { stdio: 'inherit', env });
  if (!existsSync(RSYSLOGD)) throw new Error(`apt-get installed rsyslog but ${RSYSLOGD} is still missing`);
  return RSYSLOGD;
}

export function rsyslogVersion(): string {
  const out = execFileSync(RSYSLOGD, ['-v'], { encoding: 'utf8' });
  return /rsyslogd\s+(\S+)/.exec(out)?.[1]?.replace(/,$/, '') ?? 'unknown';
}
