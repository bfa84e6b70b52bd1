// Shared fixtures for the sidecar's unit tests and the harvester's, which run the same engine.
import { mkdtemp } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import os from 'node:os';
import path from 'node:path';
import { FileProgress } from '../../sidecar/records/progress.ts';
import { loadConfig, type Config } from '../../sidecar/config.ts';
import { fileKey, idPrefix, type FileMeta, type LogRecord } from '../../sidecar/records/record.ts';

export function makeMeta(container = 'main', restart = 0, fp = 'fp0000000000000a'): FileMeta {
  return {
    container,
    restart,
    fingerprint: fp,
    key: fileKey(container, restart, fp),
    idPrefix: idPrefix('uid-1', container, restart, fp),
    progress: new FileProgress(0),
  };
}

export function makeRecord(message: string, over: Partial<LogRecord> = {}): LogRecord {
  const file = over.file ?? makeMeta();
  return {
    file,
    offset: 0,
    ts: '2024-05-06T07:08:09.123456789Z',
    stream: 'stdout',
    message,
    size: message.length + 40,
    safe: message.length + 40,
    flags: 0,
    ...over,
  };
}

export function tmpDir(prefix = 'jh-sidecar-'): Promise<string> {
  return mkdtemp(path.join(os.tmpdir(), prefix));
}

export function testConfig(env: Record<string, string> = {}): Config {
  return loadConfig({
    POD_NAME: 'job-abc-xyz',
    POD_NAMESPACE: 'team-a',
    POD_UID: 'uid-1',
    NODE_NAME: 'node-1',
    JOBHARVEST_JOB_NAME: 'job-abc',
    ...env,
  });
}

/** A CRI line as the runtime writes it. */
export function cri(ts: string, stream: 'stdout' | 'stderr', tag: 'P' | 'F', text: string): string {
  return `${ts} ${stream} ${tag} ${text}\n`;
}

/** Polls `cond` every 20 ms; fails with `what` once `ms` have passed. */
export async function waitUntil(cond: () => boolean, what: string, ms = 10_000): Promise<void> {
  const until = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}
