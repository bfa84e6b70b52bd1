/**
 * Starts the webhook the way a developer runs it out of cluster — the real CLI,
 * `jobharvest webhook`, as its own process against the test cluster's
 * kubeconfig — and stops it. Each process logs to the cluster's log folder, so a
 * failing run keeps what the webhook said.
 */
import { request } from 'node:https';
import { join } from 'node:path';
import type { TLSSocket } from 'node:tls';
import { freePort } from './ports.ts';
import { startProgram, type ProgramProcess } from './process.ts';
import { waitFor } from './wait.ts';
import type { ClusterInfo } from '../harness/cluster/harness.ts';

const ROOT = new URL('../../', import.meta.url).pathname;

export interface WebhookProcess extends ProgramProcess {
  port: number;
  url: string;
}

export interface StartOptions {
  name: string;
  /** Extra CLI flags, e.g. ['--cert-mode', 'auto', ...]. Without --cert-mode, a URL webhook is registered. */
  args?: string[];
  /** Register a URL-based MutatingWebhookConfiguration named `name` pointing at this process. */
  register?: boolean;
  failurePolicy?: 'Ignore' | 'Fail';
  port?: number;
  waitReady?: boolean;
  /** Run the built bundle (dist/jobharvest.mjs, `npm run build`) on plain node, as the image does, instead of the source through tsx. */
  bundle?: boolean;
  /** Flags for node itself (with `bundle`), e.g. ['--cpu-prof']. */
  nodeArgs?: string[];
}

export async function startWebhook(info: ClusterInfo, o: StartOptions): Promise<WebhookProcess> {
  const port = o.port ?? (await freePort());
  const url = `https://127.0.0.1:${port}/mutate`;
  const args = [
    ...(o.bundle ? (o.nodeArgs ?? []) : []),
    join(ROOT, o.bundle ? 'dist/jobharvest.mjs' : 'src/cli/main.ts'),
    'webhook',
    '--kubeconfig',
    info.kubeconfigPath,
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
    ...(o.register === false ? [] : ['--webhook-url', url, '--webhook-config-name', o.name, '--failure-policy', o.failurePolicy ?? 'Ignore']),
    ...(o.args ?? []),
  ];
  const program = startProgram(o.bundle ? process.execPath : join(ROOT, 'node_modules/.bin/tsx'), args, {
    cwd: ROOT,
    logPath: join(info.logsDir, `webhook-${o.name}-${port}.log`),
    env: { LOG_LEVEL: 'info' },
  });
  const { logPath, exited } = program;
  const proc: WebhookProcess = { ...program, port, url };
  if (o.waitReady !== false) {
    await waitFor(`webhook ${o.name} ready on ${port}`, async () => ((await get(port, '/readyz')).status === 200 ? true : undefined), {
      timeoutMs: 60_000,
      abortIf: () => (exited() ? `the webhook exited with ${program.child.exitCode ?? program.child.signalCode}; see ${logPath}` : undefined),
    });
  }
  return proc;
}

/** GET over TLS without verifying: for probes and for reading the served certificate. */
export function get(port: number, path: string): Promise<{ status: number; body: string; certFingerprint: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method: 'GET', rejectUnauthorized: false, agent: false }, (res) => {
      const cert = (res.socket as TLSSocket).getPeerCertificate();
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, certFingerprint: cert?.fingerprint256 ?? '' }));
    });
    req.on('error', reject);
    req.end();
  });
}
