/**
 * The chart's least-privilege RBAC is enough: the built webhook runs with the
 * arguments and configuration file the chart renders, authenticated as the
 * chart's ServiceAccount (a TokenRequest token), against the real API server.
 * There is no kubelet to run its pod, so the process runs here, outside the
 * cluster, with only the listen address, port and file paths translated (and,
 * where the API server calls it, 127.0.0.1 added to its certificate's names).
 * With the chart's webhook configuration pointed at that process, the API
 * server's calls show that the configuration's matchConditions keep the Jobs
 * past their bounds from the webhook, and no other.
 */
import { RbacAuthorizationV1Api, type V1Container, type V1Deployment, type V1Job, type V1PodFailurePolicyRule, type V1PodSpec } from '@kubernetes/client-node';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { NAMES } from '../../src/contract/env.ts';
import { INJECTED_LABEL, STATUS_ANNOTATION } from '../../src/contract/harvest.ts';
import { keyFromText, keyId } from '../../src/contract/signature.ts';
import { generateBundle } from '../../src/tls/generate.ts';
import { REPO_ROOT } from '../harness/chart/dockerfile.ts';
import { loopbackWebhooks, one, render, type K8sObject } from '../harness/chart/helm.ts';
import { useCluster, waitFor } from '../harness/cluster/client.ts';
import { writeKubeconfig } from '../harness/cluster/kubeconfig.ts';
import { freePort } from '../support/ports.ts';

const cluster = useCluster();
const rbac = cluster.kc.makeApiClient(RbacAuthorizationV1Api);
const helm = cluster.info.helmPath;
const NODE = join(REPO_ROOT, 'node_modules/.bin/node');
const CLI = join(REPO_ROOT, 'dist/jobharvest.mjs');

const suffix = (): string => randomBytes(3).toString('hex');
const cleanup: Array<() => Promise<unknown>> = [];
const children: ChildProcess[] = [];
afterAll(async () => {
  for (const c of children) c.kill('SIGKILL');
  for (const undo of cleanup.reverse()) await undo().catch(() => undefined);
});

async function createNamespace(name: string, annotations: Record<string, string> = {}, labels: Record<string, string> = {}): Promise<void> {
  await cluster.core.createNamespace({ body: { metadata: { name, annotations, labels } } });
  cleanup.push(() => cluster.core.deleteNamespace({ name }));
}

async function apply(objects: K8sObject[]): Promise<void> {
  for (const obj of objects) {
    if (obj.metadata.namespace === undefined) cleanup.push(() => cluster.objects.delete(obj));
    await cluster.objects.create(obj);
  }
}

/** GET over TLS to 127.0.0.1, verifying the certificate for the Service's name the API server uses. */
function getTls(port: number, path: string, servername: string, caPem: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, servername, ca: caPem, timeout: 5_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

interface Started {
  port: number;
  output: () => string;
}

/** Installs the rendered chart and starts the webhook as its ServiceAccount with its rendered arguments. */
async function installAndRun(release: string, namespace: string, values: object, tlsFiles?: { cert: string; key: string }, extraArgs: string[] = []): Promise<Started> {
  const objects = await render(helm, { release, namespace, values });
  const port = await freePort();
  // The webhook runs here on a loopback port, not behind the Service the chart names.
  await apply(objects.filter((o) => !o.apiVersion.startsWith('cert-manager.io/')).map((o) => loopbackWebhooks(o, `https://127.0.0.1:${port}`)));
  const dir = await mkdtemp(join(tmpdir(), 'jobharvest-chart-webhook-'));
  cleanup.push(() => rm(dir, { recursive: true, force: true }));

  const cm = one<{ data: Record<string, string> }>(objects, 'ConfigMap', `${release}-jobharvest`);
  // The chart renders no signing key: the webhook creates it, through its own RBAC.
  expect(objects.filter((o) => o.kind === 'Secret' && o.metadata.name === `${release}-jobharvest-signing`)).toEqual([]);
  const configPath = join(dir, 'config.yaml');
  await writeFile(configPath, cm.data['config.yaml']!);
  const pod = one<V1Deployment>(objects, 'Deployment', `${release}-jobharvest`).spec!.template.spec!;
  const sa = pod.serviceAccountName!;
  const token = await cluster.core.createNamespacedServiceAccountToken({ name: sa, namespace, body: { spec: { audiences: [], expirationSeconds: 3600 } } });
  const kubeconfig = join(dir, 'kubeconfig');
  if (!token.status?.token) throw new Error(`no token issued for ${sa}`);
  await writeKubeconfig(kubeconfig, { server: cluster.info.server, caPem: cluster.info.caPem, user: `system:serviceaccount:${namespace}:${sa}`, token: token.status.token });
  if (tlsFiles) {
    await writeFile(join(dir, 'tls.crt'), tlsFiles.cert);
    await writeFile(join(dir, 'tls.key'), tlsFiles.key);
  }

  const [script, ...args] = pod.containers[0]!.args!;
  expect(script).toBe('/app/jobharvest.mjs');
  const translated = args.map((a) =>
    a
      .replace('$(POD_NAMESPACE)', namespace)
      .replace(/^--config=.*$/, `--config=${configPath}`)
      .replace(/^--host=.*$/, '--host=127.0.0.1')
      .replace(/^--port=.*$/, `--port=${port}`)
      .replace('/etc/jobharvest/tls/', `${dir}/`),
  );
  const child = spawn(NODE, [CLI, ...translated, ...extraArgs, `--kubeconfig=${kubeconfig}`], {
    env: { PATH: process.env.PATH ?? '', POD_NAMESPACE: namespace, LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let output = '';
  child.stdout?.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output += d.toString()));
  cleanup.push(async () => child.kill('SIGTERM'));
  try {
    await waitFor('the webhook to listen', () => (/listening/.test(output) ? true : undefined), {
      timeoutMs: 30_000,
      abortIf: () => (child.exitCode === null ? undefined : `it exited ${child.exitCode}:\n${output}`),
    });
  } catch (err) {
    throw new Error(`${(err as Error).message}\nwebhook output:\n${output.slice(-4000)}`, { cause: err });
  }
  return { port, output: () => output };
}

interface Installed {
  namespace: string;
  fullname: string;
  started: Started;
}

let defaults: Promise<Installed> | undefined;
/** The chart with its default values (auto certificates), installed once for every test that needs it. */
function installDefaults(): Promise<Installed> {
  defaults ??= (async () => {
    const release = `jh-${suffix()}`;
    const namespace = `chart-${suffix()}`;
    await createNamespace(namespace);
    // The API server calls this process at 127.0.0.1, not at the Service's name: the
    // certificate the webhook creates must name that address too for the calls to verify.
    return { namespace, fullname: `${release}-jobharvest`, started: await installAndRun(release, namespace, {}, undefined, ['--extra-ips=127.0.0.1']) };
  })();
  return defaults;
}

const IMAGE = 'registry.invalid/main:1';
const containers = (prefix: string, n: number): V1Container[] => Array.from({ length: n }, (_, i) => ({ name: `${prefix}${i}`, image: IMAGE }));
const exitCodeRules = (rules: number, codes: number): V1PodFailurePolicyRule[] =>
  Array.from({ length: rules }, () => ({ action: 'FailJob', onExitCodes: { operator: 'In', values: Array.from({ length: codes }, (_, i) => i + 1) } }));

function jobOf(name: string, pod: Partial<V1PodSpec> = {}, podFailurePolicy?: V1PodFailurePolicyRule[]): V1Job {
  return {
    metadata: { name },
    spec: {
      // Only admission matters here: no pods, least of all one of 10,000 containers.
      suspend: true,
      ...(podFailurePolicy ? { podFailurePolicy: { rules: podFailurePolicy } } : {}),
      template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: IMAGE }], ...pod } },
    },
  };
}

const injected = (job: V1Job): boolean =>
  job.metadata?.labels?.[INJECTED_LABEL] === 'true' && job.spec?.template.spec?.initContainers?.[0]?.name === NAMES.container;

/** The API server's refusal of a create: its status code and body. */
async function refusal(call: () => Promise<unknown>): Promise<{ code: number; body: string }> {
  try {
    await call();
  } catch (err) {
    const e = err as { code?: number; body?: unknown };
    return { code: e.code ?? 0, body: typeof e.body === 'string' ? e.body : JSON.stringify(e.body) };
  }
  throw new Error('the API server created the Job');
}

/** Every AdmissionReview the webhook answered, read from its own /metrics. */
function reviewsAnswered(metrics: string): number {
  const samples = metrics.split('\n').filter((l) => /^jobharvest_admission_requests_total[{ ]/.test(l));
  return samples.reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}

/** The names of the Jobs of `namespace` the webhook logged a decision for (in an opted-in namespace, every review logs one). */
function reviewedNames(output: string, namespace: string): Set<string> {
  const names = new Set<string>();
  for (const line of output.split('\n')) {
    let entry: { msg?: string; namespace?: string; name?: string };
    try {
      entry = JSON.parse(line) as typeof entry;
    } catch {
      continue; // not a log line, or the last one still arriving
    }
    if (entry.namespace === namespace && entry.name !== undefined && /^job (injected|skipped)$|^internal error/.test(entry.msg ?? '')) names.add(entry.name);
  }
  return names;
}

// First in the file: the provided-certificates release below registers a second
// configuration of the same webhook, which would answer for these Jobs too.
describe("the chart's matchConditions, on the real API server", () => {
  it('sends the webhook no Job past their bounds (admitted without the sidecar, or refused by validation) and still every other Job of the namespace', async () => {
    const { namespace, fullname, started } = await installDefaults();
    const secret = await waitFor('the certificate Secret', async () => cluster.core.readNamespacedSecret({ name: `${fullname}-tls`, namespace }), { timeoutMs: 30_000 });
    const caPem = Buffer.from(secret.data!['ca.crt']!, 'base64').toString('utf8');
    const servername = `${fullname}.${namespace}.svc`;
    const metrics = async (): Promise<number> => {
      const res = await getTls(started.port, '/metrics', servername, caPem);
      expect(res.status).toBe(200);
      return reviewsAnswered(res.body);
    };
    const ns = `guard-${suffix()}`;
    await createNamespace(ns, { 'jobharvest.io/inject': 'enabled' });
    // The API server calls the webhook once it trusts the caBundle the webhook wrote;
    // until then failurePolicy Ignore admits Jobs unpatched.
    await waitFor(
      'the API server to call the webhook',
      async () => (injected(await cluster.batch.createNamespacedJob({ namespace: ns, dryRun: 'All', body: jobOf('probe') })) ? true : undefined),
      { timeoutMs: 60_000, intervalMs: 250 },
    );

    const before = await metrics();
    // containers-within-bounds. No stored Job reaches 10,000 containers: 8,000 of the
    // smallest (a name and an image) no longer fit in etcd's default 1.5 MiB request,
    // 7,000 still do. So these are server-side dry runs, which run every admission
    // step and validation and return the Job without storing it; the webhook is
    // called for them (sideEffects NoneOnDryRun).
    const create = (body: V1Job, dryRun = false) => cluster.batch.createNamespacedJob({ namespace: ns, body, ...(dryRun ? { dryRun: 'All' } : {}) });
    const pastContainers = await create(jobOf('past-containers', { containers: containers('c', 10_001) }), true);
    const pastWithInit = await create(jobOf('past-with-init', { initContainers: containers('i', 5_001), containers: containers('c', 5_000) }), true);
    for (const admitted of [pastContainers, pastWithInit]) {
      expect(injected(admitted), admitted.metadata!.name).toBe(false);
      expect(admitted.metadata?.annotations?.[STATUS_ANNOTATION], admitted.metadata!.name).toBeUndefined();
      expect(JSON.stringify(admitted.spec!.template.spec).includes(`"name":"${NAMES.container}"`), admitted.metadata!.name).toBe(false);
    }
    expect(pastContainers.spec!.template.spec!.containers).toHaveLength(10_001);
    expect(pastWithInit.spec!.template.spec!.initContainers).toHaveLength(5_001);
    // pod-failure-policy-within-api-limits: the bounds of the API server's own
    // validation, so a Job past them is refused, by validation (after mutating
    // admission) and not by the webhook, which never saw it.
    const pastRules = await refusal(() => create(jobOf('past-rules', {}, exitCodeRules(21, 1))));
    const pastCodes = await refusal(() => create(jobOf('past-codes', {}, exitCodeRules(1, 256))));
    expect(pastRules.code).toBe(422);
    expect(pastRules.body).toMatch(/spec\.podFailurePolicy\.rules: Too many: 21: must have at most 20 items/);
    expect(pastCodes.code).toBe(422);
    expect(pastCodes.body).toMatch(/spec\.podFailurePolicy\.rules\[0\]\.onExitCodes\.values: Too many: 256: must have at most 255 items/);
    for (const r of [pastRules, pastCodes]) expect(r.body).not.toContain('jobs.jobharvest.io');
    // Each create returns after its admission: a call to the webhook would be counted by now.
    expect(await metrics()).toBe(before);

    // At the bounds, and below them, the namespace's Jobs are all sent and injected.
    const atContainers = await create(jobOf('at-containers', { initContainers: containers('i', 5_000), containers: containers('c', 5_000) }), true);
    const atRules = await create(jobOf('at-rules', {}, exitCodeRules(20, 255)));
    const plain = await create(jobOf('plain'));
    for (const admitted of [atContainers, atRules, plain]) expect(injected(admitted), admitted.metadata!.name).toBe(true);
    expect(atContainers.spec!.template.spec!.initContainers).toHaveLength(5_001);
    expect(await metrics()).toBe(before + 3);

    // The webhook's log names each Job it answered for. One stream, in order: once
    // it has the last Job created, it has every review before it.
    await waitFor('the log line of the last review', () => (reviewedNames(started.output(), ns).has('plain') ? true : undefined), { timeoutMs: 10_000 });
    const reviewed = reviewedNames(started.output(), ns);
    for (const name of ['at-containers', 'at-rules', 'plain']) expect(reviewed.has(name), name).toBe(true);
    for (const name of ['past-containers', 'past-with-init', 'past-rules', 'past-codes']) expect(reviewed.has(name), name).toBe(false);
    expect(started.output()).not.toMatch(/past-(containers|with-init|rules|codes)/);
  });
});

describe('the webhook runs on the chart\'s RBAC alone', () => {
  it('auto certificates: creates its Secret, writes its caBundle, becomes ready, binds the log reader in api-mode namespaces', async () => {
    const { namespace, fullname, started } = await installDefaults();

    const secret = await waitFor('the certificate Secret', async () => cluster.core.readNamespacedSecret({ name: `${fullname}-tls`, namespace }), { timeoutMs: 30_000 });
    expect(Object.keys(secret.data ?? {})).toEqual(expect.arrayContaining(['ca.crt', 'ca.key', 'tls.crt', 'tls.key']));
    // The signing key too, once, by the webhook: the chart rendered none.
    const signing = await cluster.core.readNamespacedSecret({ name: `${fullname}-signing`, namespace });
    const key = keyFromText(Buffer.from(signing.data!.key!, 'base64'));
    expect(key.length).toBeGreaterThanOrEqual(32);
    expect(started.output()).toContain(keyId(key));
    const caPem = Buffer.from(secret.data!['ca.crt']!, 'base64').toString('utf8');
    const servername = `${fullname}.${namespace}.svc`;
    await waitFor('/readyz to answer 200', async () => ((await getTls(started.port, '/readyz', servername, caPem)).status === 200 ? true : undefined), { timeoutMs: 60_000 });
    const mwc = await cluster.admission.readMutatingWebhookConfiguration({ name: fullname });
    expect(mwc.webhooks![0]!.clientConfig.caBundle).toBeTruthy();
    expect(Buffer.from(mwc.webhooks![0]!.clientConfig.caBundle!, 'base64').toString('utf8')).toContain(caPem.trim());

    // A restricted namespace that opts in runs its Jobs in api mode: the webhook binds the log reader there.
    const apiNs = `api-${suffix()}`;
    await createNamespace(apiNs, { 'jobharvest.io/inject': 'enabled' }, { 'pod-security.kubernetes.io/enforce': 'restricted' });
    const binding = await waitFor(
      'the log-reader RoleBinding',
      async () => (await rbac.listNamespacedRoleBinding({ namespace: apiNs })).items[0],
      { timeoutMs: 30_000 },
    );
    expect(binding.roleRef).toMatchObject({ kind: 'ClusterRole', name: `${fullname}-log-reader` });
    // Opting out removes it again.
    const current = await cluster.core.readNamespace({ name: apiNs });
    delete current.metadata!.annotations!['jobharvest.io/inject'];
    await cluster.core.replaceNamespace({ name: apiNs, body: current });
    await waitFor(
      'the log-reader RoleBinding to go',
      async () => ((await rbac.listNamespacedRoleBinding({ namespace: apiNs })).items.length === 0 ? true : undefined),
      { timeoutMs: 30_000 },
    );
    expect(started.output()).not.toMatch(/forbidden/i);
  });

  it('provided certificates: reads its caBundle with get alone and becomes ready once it trusts the mounted certificate', async () => {
    const release = `jh-${suffix()}`;
    const namespace = `chart-${suffix()}`;
    const fullname = `${release}-jobharvest`;
    await createNamespace(namespace);
    const names = [fullname, `${fullname}.${namespace}`, `${fullname}.${namespace}.svc`, `${fullname}.${namespace}.svc.cluster.local`];
    const bundle = await generateBundle({ dnsNames: names });
    const started = await installAndRun(
      release,
      namespace,
      {
        webhook: { apiRbac: false },
        certificates: { mode: 'provided', provided: { secretName: 'webhook-tls', caBundle: Buffer.from(bundle.ca.cert).toString('base64') } },
      },
      bundle.serving,
    );
    await waitFor('/readyz to answer 200', async () => ((await getTls(started.port, '/readyz', `${fullname}.${namespace}.svc`, bundle.ca.cert)).status === 200 ? true : undefined), {
      timeoutMs: 60_000,
    });
    expect(started.output()).not.toMatch(/forbidden/i);
  });

  it('passes only flags the built CLI knows, in every certificate mode', async () => {
    const help = await new Promise<string>((resolve) => {
      const c = spawn(NODE, [CLI, 'webhook', '--help'], { stdio: ['ignore', 'pipe', 'inherit'] });
      let out = '';
      c.stdout.on('data', (d: Buffer) => (out += d.toString()));
      c.on('close', () => resolve(out));
    });
    const modes: object[] = [
      {},
      { webhook: { apiRbac: false } },
      { certificates: { mode: 'cert-manager' } },
      { certificates: { mode: 'provided', provided: { secretName: 't', caBundle: 'Y2E=' } } },
    ];
    for (const values of modes) {
      const objects = await render(helm, { release: 'jh', namespace: 'jobharvest', values });
      const args = one<V1Deployment>(objects, 'Deployment', 'jh-jobharvest').spec!.template.spec!.containers[0]!.args!.slice(2);
      for (const a of args) {
        const flag = a.split('=')[0]!;
        expect(flag.startsWith('--'), a).toBe(true);
        expect(help, `${flag} in jobharvest webhook --help`).toMatch(new RegExp(`(^|\\s)${flag}(\\s|$)`, 'm'));
      }
    }
    // The same check would pass on an empty help text if the pattern were wrong.
    expect(help).toMatch(/(^|\s)--config(\s|$)/m);
  });
});
