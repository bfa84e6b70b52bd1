/**
 * `jobharvest logs` as a hostile tenant would try it, on the real control
 * plane: a Job whose annotations point the query endpoint at the tenant's own
 * listener and name a Secret of a service-account token. The operator runs
 * the command with a query token in $JOBHARVEST_QUERY_TOKEN and an admin
 * kubeconfig. The listener must receive no credentials, the Secret must not
 * be sent, and --explain must say where each setting came from and warn.
 * And a tenant who may create ConfigMaps in the chart's namespace: their
 * ConfigMap, labelled as the chart's, must not be taken for the operator's,
 * and two releases must be refused rather than guessed between.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
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
let stack: Stack | undefined;

/** A listener that answers as an empty VictoriaLogs would, and keeps every Authorization header. */
async function listen(): Promise<{ url: string; seen: Array<string | undefined>; server: Server }> {
  const seen: Array<string | undefined> = [];
  const server = createServer((req, res) => {
    seen.push(req.headers.authorization);
    req.resume();
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    res.end('');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, server };
}

let tenant: Awaited<ReturnType<typeof listen>>;
let operator: Awaited<ReturnType<typeof listen>>;
let tenantUrl: string;
let seen: Array<string | undefined>;

beforeAll(async () => {
  ensureSidecarBundle();
  tenant = await listen();
  operator = await listen();
  tenantUrl = tenant.url;
  seen = tenant.seen;
}, 60_000);

afterAll(async () => {
  await stack?.stop();
  await new Promise((r) => tenant?.server.close(r));
  await new Promise((r) => operator?.server.close(r));
}, 120_000);

async function cli(args: string[]): Promise<{ stdout: string; stderr: string }> {
  return run(process.execPath, [CLI, 'logs', ...args], { env: { ...process.env, KUBECONFIG: cluster.info.kubeconfigPath, JOBHARVEST_QUERY_TOKEN: 'operator-query-token' } });
}

describe('jobharvest logs and a tenant\'s annotations', () => {
  beforeAll(async () => {
    stack = await Stack.start({ info: cluster.info, name: 'crd' });
  }, 600_000);

  it('sends no credentials to an endpoint a Job annotation chose, never reads the Secret a Job names, and says so', async () => {
    if (!stack) throw new Error('no stack');
    const ns = await stack.namespace('tenant');
    await stack.core.createNamespacedSecret({ namespace: ns, body: { metadata: { name: 'legacy-sa-token' }, stringData: { token: 'sa-token' } } });
    const job = shellJob('hostile', { script: 'echo hello' });
    job.metadata!.annotations = { 'jobharvest.io/query-endpoint': tenantUrl, 'jobharvest.io/query-type': 'victorialogs', 'jobharvest.io/auth-secret': 'legacy-sa-token' };
    await stack.batch.createNamespacedJob({ namespace: ns, body: job });

    seen.length = 0;
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

describe("jobharvest logs and a tenant's ConfigMap in the chart's namespace", () => {
  const suffix = randomBytes(3).toString('hex');
  const chartNs = `jh-chart-${suffix}`;
  const otherNs = `jh-other-${suffix}`;
  const tenantNs = `jh-tenant-${suffix}`;
  const webhookConfigurations: string[] = [];

  /** A release's webhook configuration, as `helm install` leaves it; its selector matches no namespace, so it calls nothing. */
  async function installRelease(release: string, namespace: string, config: string): Promise<void> {
    const name = `${release}-${suffix}`;
    const owner = { 'meta.helm.sh/release-name': release, 'meta.helm.sh/release-namespace': namespace };
    await cluster.objects.create({
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: 'MutatingWebhookConfiguration',
      metadata: { name, annotations: owner, labels: { 'app.kubernetes.io/name': 'jobharvest', 'app.kubernetes.io/instance': release } },
      webhooks: [
        {
          name: 'jobs.jobharvest.io',
          admissionReviewVersions: ['v1'],
          clientConfig: { service: { name: `${release}-jobharvest`, namespace, path: '/mutate', port: 443 } },
          rules: [{ apiGroups: ['batch'], apiVersions: ['v1'], operations: ['CREATE'], resources: ['jobs'] }],
          namespaceSelector: { matchLabels: { [`jobharvest.io/e2e-never-${suffix}`]: 'x' } },
          failurePolicy: 'Ignore',
          sideEffects: 'None',
        },
      ],
    } as never);
    webhookConfigurations.push(name);
    await cluster.core.createNamespacedConfigMap({
      namespace,
      body: { metadata: { name: `${release}-jobharvest`, annotations: owner, labels: { 'app.kubernetes.io/name': 'jobharvest', 'app.kubernetes.io/instance': release } }, data: { 'config.yaml': config } },
    });
  }

  beforeAll(async () => {
    for (const name of [chartNs, otherNs, tenantNs]) await cluster.core.createNamespace({ body: { metadata: { name } } });
    await installRelease('jh', chartNs, `sink:\n  type: loki\n  endpoint: ${operator.url}/insert/loki/api/v1/push\n`);
    // The tenant's: labelled like the chart's, sorted before it, pointing the query and a Secret of theirs at their listener.
    await cluster.core.createNamespacedConfigMap({
      namespace: chartNs,
      body: {
        metadata: { name: 'aaa-jobharvest', labels: { 'app.kubernetes.io/name': 'jobharvest' } },
        data: { 'config.yaml': `sink:\n  type: loki\n  endpoint: ${tenant.url}/insert/loki/api/v1/push\nquery:\n  authSecret: legacy-sa-token\n` },
      },
    });
    await cluster.core.createNamespacedSecret({ namespace: tenantNs, body: { metadata: { name: 'legacy-sa-token' }, stringData: { token: 'sa-token' } } });
  }, 60_000);

  afterAll(async () => {
    for (const name of webhookConfigurations) await cluster.objects.delete({ apiVersion: 'admissionregistration.k8s.io/v1', kind: 'MutatingWebhookConfiguration', metadata: { name } } as never).catch(() => undefined);
    for (const name of [chartNs, otherNs, tenantNs]) await cluster.core.deleteNamespace({ name }).catch(() => undefined);
  }, 60_000);

  it("reads the release's own ConfigMap, found through its webhook configuration, and sends the token only to the operator's endpoint", async () => {
    const explain = await cli(['job/gone', '-n', tenantNs, '--explain']);
    expect(explain.stdout).toContain(`chart configuration: ConfigMap ${chartNs}/jh-jobharvest`);
    expect(explain.stdout).toContain(`query: victorialogs at ${operator.url}`);
    expect(explain.stdout).toContain('credentials: JOBHARVEST_QUERY_TOKEN');
    expect(explain.stdout).not.toContain(tenant.url);

    tenant.seen.length = operator.seen.length = 0;
    await cli(['job/gone', '-n', tenantNs]);
    expect(tenant.seen, 'requests the tenant listener received').toEqual([]);
    expect(operator.seen.length).toBeGreaterThan(0);
    expect(new Set(operator.seen)).toEqual(new Set(['Bearer operator-query-token']));
  });

  it('refuses to choose between two releases, and reads the one --chart-namespace names', async () => {
    await installRelease('jh2', otherNs, `sink:\n  type: loki\n  endpoint: http://127.0.0.1:9/insert/loki/api/v1/push\n`);
    const refused = await cli(['job/gone', '-n', tenantNs, '--explain']).then(
      () => undefined,
      (e: { code?: number; stderr?: string }) => e,
    );
    expect(refused?.code).toBe(2);
    expect(refused?.stderr).toMatch(/JH_BAD_INPUT: 2 jobharvest releases are installed \(.*jh-jobharvest \(release jh\).*jh2-jobharvest \(release jh2\)\): name one with --chart-namespace/);
    const chosen = await cli(['job/gone', '-n', tenantNs, '--chart-namespace', chartNs, '--explain']);
    expect(chosen.stdout).toContain(`chart configuration: ConfigMap ${chartNs}/jh-jobharvest`);
  });
});
