/**
 * `jobharvest logs` as a hostile tenant would try it, on the real control
 * plane: a Job whose annotations point the query endpoint at the tenant's own
 * listener and name a Secret of a service-account token. The operator runs
 * the command with a query token in $JOBHARVEST_QUERY_TOKEN and an admin
 * kubeconfig. The listener must receive no credentials, the Secret must not
 * be sent, and --explain must say where each setting came from and warn.
 */
import { execFile } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useCluster } from '../harness/cluster/client.ts';
import { shellJob, Stack } from '../harness/kubelet/stack.ts';
import { ensureSidecarBundle } from '../support/sidecar.ts';

const run = promisify(execFile);
const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = join(repo, 'dist', 'jobharvest.mjs');
const cluster = useCluster();
let stack: Stack;
let listener: Server;
let tenantUrl: string;
const seen: Array<string | undefined> = [];

beforeAll(async () => {
  ensureSidecarBundle();
  stack = await Stack.start({ info: cluster.info, name: 'crd' });
  // The tenant's listener answers as an empty VictoriaLogs would, and keeps every Authorization header.
  listener = createServer((req, res) => {
    seen.push(req.headers.authorization);
    req.resume();
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    res.end('');
  });
  await new Promise<void>((r) => listener.listen(0, '127.0.0.1', r));
  tenantUrl = `http://127.0.0.1:${(listener.address() as AddressInfo).port}`;
}, 600_000);

afterAll(async () => {
  await stack?.stop();
  await new Promise((r) => listener?.close(r));
}, 120_000);

async function cli(args: string[]): Promise<{ stdout: string; stderr: string }> {
  return run(process.execPath, [CLI, 'logs', ...args], { env: { ...process.env, KUBECONFIG: cluster.info.kubeconfigPath, JOBHARVEST_QUERY_TOKEN: 'operator-query-token' } });
}

describe('jobharvest logs and a tenant\'s annotations', () => {
  it('sends no credentials to an endpoint a Job annotation chose, never reads the Secret a Job names, and says so', async () => {
    const ns = await stack.namespace('tenant');
    await stack.core.createNamespacedSecret({ namespace: ns, body: { metadata: { name: 'legacy-sa-token' }, stringData: { token: 'sa-token' } } });
    const job = shellJob('hostile', { script: 'echo hello' });
    job.metadata!.annotations = { 'jobharvest.io/query-endpoint': tenantUrl, 'jobharvest.io/query-type': 'victorialogs', 'jobharvest.io/auth-secret': 'legacy-sa-token' };
    await stack.batch.createNamespacedJob({ namespace: ns, body: job });

    const explain = await cli(['job/hostile', '-n', ns, '--explain']);
    expect(explain.stdout).toContain(`query endpoint: ${tenantUrl} (Job annotation jobharvest.io/query-endpoint)`);
    expect(explain.stdout).toContain("credentials: none (the query endpoint is not the operator's)");
    expect(explain.stdout).toContain(`warning: Job annotation jobharvest.io/query-endpoint chose the query endpoint ${tenantUrl}: no credentials are sent there (JOBHARVEST_QUERY_TOKEN held back); --trust-endpoint ${tenantUrl} sends them`);
    expect(explain.stdout).toContain('warning: Secret legacy-sa-token named by the Job annotation jobharvest.io/auth-secret is not read');
    expect(explain.stdout).not.toMatch(/operator-query-token|sa-token"/);

    const r = await cli(['job/hostile', '-n', ns]);
    expect(r.stderr).toMatch(/warning: Job annotation jobharvest.io\/query-endpoint chose the query endpoint/);
    expect(seen.length, 'the tenant listener was queried').toBeGreaterThan(0);
    expect(seen.filter((h) => h !== undefined), 'credentials the tenant listener received').toEqual([]);

    // Trusted by name on the command line, the user's own token goes there; the Secret the Job names still never does.
    seen.length = 0;
    await cli(['job/hostile', '-n', ns, '--trust-endpoint', tenantUrl]);
    expect(seen.length).toBeGreaterThan(0);
    expect(new Set(seen)).toEqual(new Set(['Bearer operator-query-token']));
  }, 120_000);
});
