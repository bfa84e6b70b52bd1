/**
 * The chart's least-privilege RBAC is enough: the built webhook runs with the
 * arguments and configuration file the chart renders, authenticated as the
 * chart's ServiceAccount (a TokenRequest token), against the real API server.
 * There is no kubelet to run its pod, so the process runs here, outside the
 * cluster, with only the listen address, port and file paths translated.
 */
import { RbacAuthorizationV1Api, type V1Deployment } from '@kubernetes/client-node';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
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
function getTls(port: number, path: string, servername: string, caPem: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, servername, ca: caPem, timeout: 5_000 }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
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
async function installAndRun(release: string, namespace: string, values: object, tlsFiles?: { cert: string; key: string }): Promise<Started> {
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
  const child = spawn(NODE, [CLI, ...translated, `--kubeconfig=${kubeconfig}`], {
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

describe('the webhook runs on the chart\'s RBAC alone', () => {
  it('auto certificates: creates its Secret, writes its caBundle, becomes ready, binds the log reader in api-mode namespaces', async () => {
    const release = `jh-${suffix()}`;
    const namespace = `chart-${suffix()}`;
    const fullname = `${release}-jobharvest`;
    await createNamespace(namespace);
    const started = await installAndRun(release, namespace, {});

    const secret = await waitFor('the certificate Secret', async () => cluster.core.readNamespacedSecret({ name: `${fullname}-tls`, namespace }), { timeoutMs: 30_000 });
    expect(Object.keys(secret.data ?? {})).toEqual(expect.arrayContaining(['ca.crt', 'ca.key', 'tls.crt', 'tls.key']));
    // The signing key too, once, by the webhook: the chart rendered none.
    const signing = await cluster.core.readNamespacedSecret({ name: `${fullname}-signing`, namespace });
    const key = keyFromText(Buffer.from(signing.data!.key!, 'base64'));
    expect(key.length).toBeGreaterThanOrEqual(32);
    expect(started.output()).toContain(keyId(key));
    const caPem = Buffer.from(secret.data!['ca.crt']!, 'base64').toString('utf8');
    const servername = `${fullname}.${namespace}.svc`;
    await waitFor('/readyz to answer 200', async () => ((await getTls(started.port, '/readyz', servername, caPem)) === 200 ? true : undefined), { timeoutMs: 60_000 });
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
    await waitFor('/readyz to answer 200', async () => ((await getTls(started.port, '/readyz', `${fullname}.${namespace}.svc`, bundle.ca.cert)) === 200 ? true : undefined), {
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
