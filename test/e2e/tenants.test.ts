/**
 * Per-namespace credentials and log-store tenants, end to end: two namespaces
 * that the chart's `tenants` value (rendered by the pinned Helm, given to the
 * real webhook as its --config) maps to their own Secrets and VictoriaLogs
 * tenants, with the test kubelet running the real sidecar, and a real
 * VictoriaLogs behind a real authenticating proxy: vmauth (VictoriaMetrics,
 * Apache-2.0) maps each credential to one tenant (AccountID/ProjectID) and
 * sets those headers over whatever the client sent. Each namespace ships
 * through VictoriaLogs' native ingestion (the http sink, /insert/jsonline)
 * and its Loki-compatible push API (the loki sink, /insert/loki/api/v1/push).
 *
 * Grafana Loki itself is not run: it is AGPL-3.0, which this project does not
 * use. The Loki wire protocol is VictoriaLogs' push endpoint here, and the
 * X-Scope-OrgID the sidecar sends is checked in the unit and golden tests.
 *
 * What must hold: A's lines land in tenant A only, B's in B only, none under
 * the shared credential; A's read credential reads none of B's lines and B's
 * none of A's, whatever tenant header they send; `jobharvest logs` reads a
 * namespace's Job with that namespace's credential and tenant, never the
 * chart's global one; and a Job of A that names B's Secret and B's Loki tenant
 * gets neither: its sidecar's secretKeyRef resolves in A, and nothing it
 * writes lands in B.
 */
import type { V1Job } from '@kubernetes/client-node';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/core/config.ts';
import { one, render } from '../harness/chart/helm.ts';
import { useCluster } from '../harness/cluster/client.ts';
import { numberedLines, shellJob, Stack, WEBHOOK_NAMESPACE } from '../harness/kubelet/stack.ts';
import { Vmauth, vlTenantRoute } from '../harness/servers/vmauth.ts';
import { freePort } from '../support/ports.ts';
import { waitFor } from '../support/wait.ts';

const run = promisify(execFile);
const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const cluster = useCluster();
const suffix = randomBytes(3).toString('hex');
const STACK = 'tn';
const N = 40;
const TEAM_LABEL = 'e2e.jobharvest.io/team';
const DOCUMENT_HEADERS = 'VL-Msg-Field=message,VL-Time-Field=@timestamp';

const nsA = Stack.namespaceName(STACK, 'a');
const nsB = Stack.namespaceName(STACK, 'b');
const chartNs = `jh-tenants-chart-${suffix}`;
const release = `jh-tenants-${suffix}`;
const token = (who: string) => `${who}-${randomBytes(8).toString('hex')}`;
const tokens = { aWrite: token('a-write'), aRead: token('a-read'), bWrite: token('b-write'), bRead: token('b-read'), sharedWrite: token('shared-write'), sharedRead: token('shared-read') };
/** VictoriaLogs tenants: A, B, and the one the shared (global) credential reaches. */
const TENANT = { a: 11, b: 22, shared: 0 } as const;

let stack: Stack | undefined;
let vmauth: Vmauth | undefined;
let vmauthPort = 0;
let configText = '';
const tmp = mkdtempSync(join(tmpdir(), 'jh-tenants-'));

/** The chart values under test: the global (shared) credential, and A by name, B by a namespace label. */
function values(): object {
  return {
    sink: { type: 'http', endpoint: `http://127.0.0.1:${vmauthPort}/insert/jsonline`, headers: DOCUMENT_HEADERS, authSecret: 'shared-writer' },
    query: { authSecret: 'shared-reader' },
    tenants: [
      { name: 'team-a', namespaces: [nsA], authSecret: 'team-a-writer', queryAuthSecret: 'team-a-reader', lokiTenant: 'team-a', accountID: TENANT.a, projectID: 0 },
      { name: 'team-b', namespaceSelector: { matchLabels: { [TEAM_LABEL]: `b-${suffix}` } }, authSecret: 'team-b-writer', queryAuthSecret: 'team-b-reader', lokiTenant: 'team-b', accountID: TENANT.b, projectID: 0 },
    ],
  };
}

/** What `helm install` leaves for `jobharvest logs` to find: the release's webhook configuration (matching no namespace, so never called) and its ConfigMap. */
async function installRelease(): Promise<void> {
  const owner = { 'meta.helm.sh/release-name': 'jh', 'meta.helm.sh/release-namespace': chartNs };
  await cluster.core.createNamespace({ body: { metadata: { name: chartNs } } });
  await cluster.objects.create({
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'MutatingWebhookConfiguration',
    metadata: { name: release, annotations: owner, labels: { 'app.kubernetes.io/name': 'jobharvest', 'app.kubernetes.io/instance': 'jh' } },
    webhooks: [
      {
        name: 'jobs.jobharvest.io',
        admissionReviewVersions: ['v1'],
        clientConfig: { service: { name: 'jh-jobharvest', namespace: chartNs, path: '/mutate', port: 443 } },
        rules: [{ apiGroups: ['batch'], apiVersions: ['v1'], operations: ['CREATE'], resources: ['jobs'] }],
        namespaceSelector: { matchLabels: { [`jobharvest.io/e2e-never-${suffix}`]: 'x' } },
        failurePolicy: 'Ignore',
        sideEffects: 'None',
      },
    ],
  } as never);
  await cluster.core.createNamespacedConfigMap({
    namespace: chartNs,
    body: { metadata: { name: 'jh-jobharvest', annotations: owner, labels: { 'app.kubernetes.io/name': 'jobharvest', 'app.kubernetes.io/instance': 'jh' } }, data: { 'config.yaml': configText } },
  });
}

beforeAll(async () => {
  vmauthPort = await freePort();
  // The chart renders the configuration; the webhook runs with exactly that file.
  const objects = await render(cluster.info.helmPath, { release: 'jh', namespace: WEBHOOK_NAMESPACE, values: values() });
  configText = (one(objects, 'ConfigMap', 'jh-jobharvest') as unknown as { data: Record<string, string> }).data['config.yaml']!;
  expect(parseConfig((await import('yaml')).parse(configText)).tenants.map((t) => t.name)).toEqual(['team-a', 'team-b']);
  const configFile = join(tmp, 'config.yaml');
  writeFileSync(configFile, configText);
  stack = await Stack.start({ info: cluster.info, name: STACK, webhookArgs: ['--config', configFile], harvesterArgs: false });
  const vl = stack.vl.url;
  vmauth = await Vmauth.start(
    [
      { name: 'team-a-writer', bearerToken: tokens.aWrite, routes: [vlTenantRoute(vl, 'insert', TENANT.a, 0)] },
      { name: 'team-a-reader', bearerToken: tokens.aRead, routes: [vlTenantRoute(vl, 'select', TENANT.a, 0)] },
      { name: 'team-b-writer', bearerToken: tokens.bWrite, routes: [vlTenantRoute(vl, 'insert', TENANT.b, 0)] },
      { name: 'team-b-reader', bearerToken: tokens.bRead, routes: [vlTenantRoute(vl, 'select', TENANT.b, 0)] },
      { name: 'shared-writer', bearerToken: tokens.sharedWrite, routes: [vlTenantRoute(vl, 'insert', TENANT.shared, 0)] },
      { name: 'shared-reader', bearerToken: tokens.sharedRead, routes: [vlTenantRoute(vl, 'select', TENANT.shared, 0)] },
    ],
    { port: vmauthPort },
  );
  await installRelease();
}, 600_000);

afterAll(async () => {
  await stack?.stop();
  await vmauth?.dispose();
  await cluster.objects.delete({ apiVersion: 'admissionregistration.k8s.io/v1', kind: 'MutatingWebhookConfiguration', metadata: { name: release } } as never).catch(() => undefined);
  await cluster.core.deleteNamespace({ name: chartNs }).catch(() => undefined);
  rmSync(tmp, { recursive: true, force: true });
}, 120_000);

async function secrets(namespace: string, own: Record<string, string>): Promise<void> {
  // Every namespace also holds the shared credential the global values name, as before per-namespace mappings.
  const all = { ...own, 'shared-writer': tokens.sharedWrite, 'shared-reader': tokens.sharedRead };
  for (const [name, value] of Object.entries(all)) await stack!.core.createNamespacedSecret({ namespace, body: { metadata: { name }, stringData: { token: value } } });
}

/** A Job printing N lines tagged `tag`; `loki`: through the loki sink to VictoriaLogs' Loki-compatible push API behind vmauth. */
function job(name: string, tag: string, annotations: Record<string, string> = {}, loki = false): V1Job {
  const j = shellJob(name, { script: `sleep 1; ${numberedLines(tag, N)}` });
  j.metadata!.annotations = { ...(loki ? { 'jobharvest.io/sink': 'loki', 'jobharvest.io/endpoint': `${vmauth!.url}/insert/loki/api/v1/push` } : {}), ...annotations };
  return j;
}

const lines = (tag: string) => Array.from({ length: N }, (_, i) => `${tag} line ${i + 1}`);

type Env = Array<{ name: string; value?: string; valueFrom?: { secretKeyRef?: { name: string } } }>;
function sidecarEnv(stored: V1Job): Env {
  const c = stored.spec!.template.spec!.initContainers!.find((x) => x.name === 'jobharvest');
  expect(c, 'the webhook injected the sidecar').toBeDefined();
  return c!.env as Env;
}
const envValue = (env: Env, name: string) => env.find((e) => e.name === name)?.value;
const envSecret = (env: Env, name: string) => env.find((e) => e.name === name)?.valueFrom?.secretKeyRef?.name;

/** Waits for the Job's pod to finish and its sidecar to print its summary; returns the summary. */
async function finished(namespace: string, name: string): Promise<Record<string, unknown>> {
  return waitFor(
    `job ${namespace}/${name}: its sidecar's summary`,
    () => {
      const [w] = stack!.jobWorkers(namespace, name);
      return w ? stack!.sidecarSummary(w.uid) : undefined;
    },
    { timeoutMs: 90_000 },
  );
}

/** Messages VictoriaLogs holds in one tenant, read directly (no proxy). */
async function tenantMessages(accountID: number): Promise<string[]> {
  await stack!.vl.flush();
  const res = await fetch(`${stack!.vl.url}/select/logsql/query`, {
    method: 'POST',
    headers: { AccountID: String(accountID), ProjectID: '0' },
    body: new URLSearchParams({ query: '* | fields _msg', start: '0' }),
  });
  const text = await res.text();
  expect(res.status, text).toBe(200);
  return text
    .split('\n')
    .filter(Boolean)
    .map((l) => (JSON.parse(l) as { _msg: string })._msg)
    .sort();
}

/** The namespaces VictoriaLogs holds records of in one tenant, by either writer's field (document or Loki label). */
async function tenantNamespaces(accountID: number): Promise<string[]> {
  const res = await fetch(`${stack!.vl.url}/select/logsql/query`, {
    method: 'POST',
    headers: { AccountID: String(accountID), ProjectID: '0' },
    body: new URLSearchParams({ query: '* | stats by ("k8s.namespace.name", namespace) count() n', start: '0' }),
  });
  return (await res.text())
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Record<string, string>)
    .map((r) => r['k8s.namespace.name'] || r.namespace!)
    .sort();
}

/** The same read through vmauth with a credential, sending `claim` as the tenant headers it would like. */
async function readThroughProxy(bearer: string, claim: number): Promise<{ status: number; messages: string[] }> {
  const res = await fetch(`${vmauth!.url}/select/logsql/query`, {
    method: 'POST',
    headers: { authorization: `Bearer ${bearer}`, AccountID: String(claim), ProjectID: '0' },
    body: new URLSearchParams({ query: '* | fields _msg', start: '0' }),
  });
  const text = await res.text();
  return { status: res.status, messages: res.ok ? text.split('\n').filter(Boolean).map((l) => (JSON.parse(l) as { _msg: string })._msg).sort() : [] };
}

async function logs(args: string[]): Promise<{ stdout: string; stderr: string; code: number }> {
  try {
    const r = await run(join(repo, 'node_modules/.bin/tsx'), [join(repo, 'src/cli/main.ts'), 'logs', '--chart-namespace', chartNs, ...args], {
      cwd: repo,
      env: { ...process.env, KUBECONFIG: cluster.info.kubeconfigPath, JOBHARVEST_QUERY_TOKEN: '' },
    });
    return { ...r, code: 0 };
  } catch (e) {
    const f = e as { stdout?: string; stderr?: string; code?: number };
    return { stdout: f.stdout ?? '', stderr: f.stderr ?? '', code: f.code ?? 1 };
  }
}

const printed = (stdout: string) => stdout.split('\n').filter(Boolean).sort();

describe('per-namespace credentials and tenants mapped by the chart', () => {
  it('each namespace writes and reads only its own tenant; the shared credential is used by neither; a Job of A cannot use B\'s', async () => {
    if (!stack || !vmauth) throw new Error('no stack');
    // A is mapped by name; B by a label that only the operator sets.
    await stack.namespace('a', { name: nsA, configSink: true, ttlSeconds: 600 });
    await stack.namespace('b', { name: nsB, configSink: true, ttlSeconds: 600, labels: { [TEAM_LABEL]: `b-${suffix}` } });
    await secrets(nsA, { 'team-a-writer': tokens.aWrite, 'team-a-reader': tokens.aRead });
    await secrets(nsB, { 'team-b-writer': tokens.bWrite, 'team-b-reader': tokens.bRead });

    const create = (namespace: string, j: V1Job) => stack!.batch.createNamespacedJob({ namespace, body: j });
    const stored = {
      aNative: await create(nsA, job('a-native', 'team-a native')),
      aLoki: await create(nsA, job('a-loki', 'team-a loki', {}, true)),
      bNative: await create(nsB, job('b-native', 'team-b native')),
      bLoki: await create(nsB, job('b-loki', 'team-b loki', {}, true)),
      // A Job of A naming B's Secret and B's Loki tenant.
      aForged: await create(nsA, job('a-forged', 'team-a forged', { 'jobharvest.io/auth-secret': 'team-b-writer', 'jobharvest.io/loki-tenant': 'team-b' }, true)),
    };

    // What the webhook rendered: each namespace's own Secret and tenant, not the shared ones.
    const aEnv = sidecarEnv(stored.aNative);
    expect(envSecret(aEnv, 'JOBHARVEST_AUTH_TOKEN')).toBe('team-a-writer');
    expect(envValue(aEnv, 'JOBHARVEST_HEADERS')).toBe(`${DOCUMENT_HEADERS},AccountID=${TENANT.a},ProjectID=0`);
    expect(envValue(sidecarEnv(stored.aLoki), 'JOBHARVEST_LOKI_TENANT')).toBe('team-a');
    const bEnv = sidecarEnv(stored.bNative);
    expect(envSecret(bEnv, 'JOBHARVEST_AUTH_TOKEN')).toBe('team-b-writer');
    expect(envValue(bEnv, 'JOBHARVEST_HEADERS')).toBe(`${DOCUMENT_HEADERS},AccountID=${TENANT.b},ProjectID=0`);
    expect(envValue(sidecarEnv(stored.bLoki), 'JOBHARVEST_LOKI_TENANT')).toBe('team-b');
    // The forged Job: the Secret it names is looked up in A, where there is none of that name;
    // its Loki tenant was refused at admission.
    const fEnv = sidecarEnv(stored.aForged);
    expect(envSecret(fEnv, 'JOBHARVEST_AUTH_TOKEN')).toBe('team-b-writer');
    expect(envValue(fEnv, 'JOBHARVEST_LOKI_TENANT')).toBe('team-a');
    expect(envValue(fEnv, 'JOBHARVEST_HEADERS')).toBe(`${DOCUMENT_HEADERS},AccountID=${TENANT.a},ProjectID=0`);

    const summaries = {
      aNative: await finished(nsA, 'a-native'),
      aLoki: await finished(nsA, 'a-loki'),
      bNative: await finished(nsB, 'b-native'),
      bLoki: await finished(nsB, 'b-loki'),
      aForged: await finished(nsA, 'a-forged'),
    };
    for (const k of ['aNative', 'aLoki', 'bNative', 'bLoki'] as const) expect(summaries[k], k).toMatchObject({ outcome: 'complete' });
    // vmauth refused the forged Job's requests (no credential): nothing delivered.
    expect(summaries.aForged).toMatchObject({ outcome: 'incomplete' });
    expect(stack.kubelet.allWorkers().find((w) => w.namespace === nsA && w.labels['batch.kubernetes.io/job-name'] === 'a-forged')?.output('jobharvest').join('\n')).toMatch(/HTTP 401/);

    // Where the lines are, read straight from VictoriaLogs: A's in A's tenant only, B's in B's only.
    const aLines = [...lines('team-a native'), ...lines('team-a loki')].sort();
    const bLines = [...lines('team-b native'), ...lines('team-b loki')].sort();
    expect(await tenantMessages(TENANT.a)).toEqual(aLines);
    expect(await tenantMessages(TENANT.b)).toEqual(bLines);
    expect(await tenantMessages(TENANT.shared), 'lines written with the shared credential').toEqual([]);
    expect(await tenantNamespaces(TENANT.a)).toEqual([nsA, nsA]);
    expect(await tenantNamespaces(TENANT.b)).toEqual([nsB, nsB]);

    // Through the proxy, each read credential reads its own tenant and nothing else, whatever tenant it asks for.
    expect(await readThroughProxy(tokens.aRead, TENANT.b)).toEqual({ status: 200, messages: aLines });
    expect(await readThroughProxy(tokens.bRead, TENANT.a)).toEqual({ status: 200, messages: bLines });
    expect(await readThroughProxy(tokens.sharedRead, TENANT.a)).toEqual({ status: 200, messages: [] });
    // A write credential reads nothing; nor does a credential vmauth does not know.
    expect((await readThroughProxy(tokens.aWrite, TENANT.a)).status).toBe(400);
    expect((await readThroughProxy('not-a-credential', TENANT.a)).status).toBe(401);
  }, 300_000);

  it("jobharvest logs reads each namespace's Job with that namespace's credential and tenant, never the chart's global one", async () => {
    const aExplain = await logs(['job/a-native', '-n', nsA, '--explain']);
    expect(aExplain.stdout).toContain(`tenant mapping: team-a (chart configuration tenants: namespace ${nsA} is listed by name)`);
    expect(aExplain.stdout).toContain(`tenant: AccountID ${TENANT.a}, ProjectID 0 (tenant mapping team-a)`);
    expect(aExplain.stdout).toContain(`credentials: Secret ${nsA}/team-a-reader (tenant mapping team-a queryAuthSecret)`);
    expect(aExplain.stdout).not.toContain('shared-reader');
    const bExplain = await logs(['job/b-native', '-n', nsB, '--explain']);
    expect(bExplain.stdout).toContain(`tenant mapping: team-b (chart configuration tenants: namespace ${nsB} has the labels ${TEAM_LABEL}=b-${suffix})`);
    expect(bExplain.stdout).toContain(`credentials: Secret ${nsB}/team-b-reader (tenant mapping team-b queryAuthSecret)`);

    const a = await logs(['job/a-native', '-n', nsA]);
    expect(a.code, a.stderr).toBe(0);
    expect(printed(a.stdout)).toEqual(lines('team-a native').sort());
    const b = await logs(['job/b-native', '-n', nsB]);
    expect(b.code, b.stderr).toBe(0);
    expect(printed(b.stdout)).toEqual(lines('team-b native').sort());

    // The loki-sink Job's endpoint is an annotation's, so the mapped credential goes there only when trusted by name.
    const aLoki = await logs(['job/a-loki', '-n', nsA, '--trust-endpoint', vmauth!.url]);
    expect(aLoki.code, aLoki.stderr).toBe(0);
    expect(printed(aLoki.stdout)).toEqual(lines('team-a loki').sort());

    // Each namespace's read credential reads none of the other's lines.
    const aToken = join(tmp, 'a-read');
    const bToken = join(tmp, 'b-read');
    writeFileSync(aToken, tokens.aRead);
    writeFileSync(bToken, tokens.bRead);
    const crossAB = await logs(['job/b-native', '-n', nsB, '--token-file', aToken]);
    expect(crossAB.code, crossAB.stderr).toBe(0);
    expect(crossAB.stdout).toBe('');
    const crossBA = await logs(['job/a-native', '-n', nsA, '--token-file', bToken]);
    expect(crossBA.code, crossBA.stderr).toBe(0);
    expect(crossBA.stdout).toBe('');
  }, 120_000);
});
