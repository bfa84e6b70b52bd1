/**
 * Starts the harvester the way an operator runs it out of cluster: its own
 * program (harvester/entry.ts), its own process, against the test cluster's
 * kubeconfig, with a signing key shared with the webhook and a list of
 * approved destinations. Logs go to the cluster's log folder.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ClusterInfo } from '../harness/cluster/harness.ts';

const ROOT = new URL('../../', import.meta.url).pathname;

export interface HarvesterProcess {
  child: ChildProcess;
  logPath: string;
  stop(): Promise<void>;
  exited(): boolean;
}

/** A fresh key file for one webhook + harvester pair. */
export function signingKeyFile(info: Pick<ClusterInfo, 'logsDir'>, name: string): string {
  const file = join(info.logsDir, `signing-${name}-${process.pid}-${Date.now()}.key`);
  writeFileSync(file, randomBytes(32).toString('base64url'), { mode: 0o600 });
  return file;
}

export interface DestinationSpec {
  name: string;
  sink: string;
  endpoint: string;
  allow?: string[];
  auth?: { tokenFile?: string; usernameFile?: string; passwordFile?: string };
}

export function destinationsFile(info: Pick<ClusterInfo, 'logsDir'>, name: string, list: DestinationSpec[]): string {
  const file = join(info.logsDir, `destinations-${name}-${process.pid}-${Date.now()}.json`);
  writeFileSync(file, JSON.stringify(list));
  return file;
}

export function startHarvester(info: ClusterInfo, o: { name: string; signingKeyFile: string; destinationsFile: string; args?: string[] }): HarvesterProcess {
  const args = [
    join(ROOT, 'harvester/entry.ts'),
    '--kubeconfig',
    info.kubeconfigPath,
    '--signing-key-file',
    o.signingKeyFile,
    '--destinations-file',
    o.destinationsFile,
    '--lease-name',
    `${o.name}-harvester`,
    ...(o.args ?? []),
  ];
  const logPath = join(info.logsDir, `harvester-${o.name}-${Date.now()}.log`);
  const log = createWriteStream(logPath, { flags: 'a' });
  const child = spawn(join(ROOT, 'node_modules/.bin/tsx'), args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, POD_NAMESPACE: 'jobharvest', POD_NAME: `${o.name}-${process.pid}-${randomBytes(2).toString('hex')}` } });
  child.stdout!.pipe(log);
  child.stderr!.pipe(log);
  let exitCode: number | null | undefined;
  child.once('exit', (code, signal) => (exitCode = code ?? (signal ? -1 : 0)));
  return {
    child,
    logPath,
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
