/**
 * Starts the harvester the way an operator runs it out of cluster: its own
 * program (harvester/entry.ts), its own process, against the test cluster's
 * kubeconfig, with a signing key shared with the webhook and a list of
 * approved destinations. Logs go to the cluster's log folder.
 */
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ClusterInfo } from '../harness/cluster/harness.ts';
import { startProgram, type ProgramProcess } from './process.ts';

const ROOT = new URL('../../', import.meta.url).pathname;

export type HarvesterProcess = ProgramProcess;

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

export interface HarvesterOptions {
  name: string;
  signingKeyFile: string;
  destinationsFile: string;
  args?: string[];
  /** Run the built bundle (dist/harvester.mjs, `npm run build`) on plain node, as the image does, instead of the source through tsx. */
  bundle?: boolean;
  /** Another identity than the cluster's admin, e.g. the chart's ServiceAccount (a TokenRequest token). */
  kubeconfig?: string;
  /** Flags for node itself (with `bundle`), e.g. the chart's NODE_OPTIONS. */
  nodeArgs?: string[];
}

export function startHarvester(info: ClusterInfo, o: HarvesterOptions): HarvesterProcess {
  const args = [
    ...(o.bundle ? (o.nodeArgs ?? []) : []),
    join(ROOT, o.bundle ? 'dist/harvester.mjs' : 'harvester/entry.ts'),
    '--kubeconfig',
    o.kubeconfig ?? info.kubeconfigPath,
    '--signing-key-file',
    o.signingKeyFile,
    '--destinations-file',
    o.destinationsFile,
    '--lease-name',
    `${o.name}-harvester`,
    ...(o.args ?? []),
  ];
  return startProgram(o.bundle ? process.execPath : join(ROOT, 'node_modules/.bin/tsx'), args, {
    cwd: ROOT,
    logPath: join(info.logsDir, `harvester-${o.name}-${Date.now()}.log`),
    env: { POD_NAMESPACE: 'jobharvest', POD_NAME: `${o.name}-${process.pid}-${randomBytes(2).toString('hex')}` },
  });
}
