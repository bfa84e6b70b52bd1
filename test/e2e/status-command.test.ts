/**
 * `kubectl jobharvest status` on the real control plane, with the test
 * kubelet, the webhook, the harvester and VictoriaLogs: a Job whose lines
 * all reached the log server, and one whose log server refused every line
 * (a real HTTP server answering 400, which the sidecar dead-letters: lines
 * lost for good, as the harvester's record then says). The built CLI
 * (`dist/`) is run as kubectl runs a plugin, and checks the records with the
 * signing key it reads from the release's Secret, found through the
 * release's MutatingWebhookConfiguration, as on an installed chart.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { DELIVERY_ANNOTATION } from '../../src/contract/harvest.ts';
import { parseQuantity } from '../../src/contract/quantity.ts';
import { useCluster, waitFor } from '../harness/cluster/client.ts';
import { numberedLines, shellJob, Stack } from '../harness/kubelet/stack.ts';
import { ensureSidecarBundle } from '../support/sidecar.ts';

const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const cluster = useCluster();
const suffix = randomBytes(3).toString('hex');
const chartNs = `jh-status-chart-${suffix}`;
const release = 'jh';
const webhookConfiguration = `jh-status-${suffix}`;
let stack: Stack;
let pluginDir: string;
let kubectl: string | undefined;
let refusing: Server;
let refusedRequests = 0;

async function which(cmd: string): Promise<string | undefined> {
  return new Promise((resolve) => execFile('sh', ['-c', `command -v ${cmd}`], (err, out) => resolve(err ? undefined : out.trim() || undefined)));
}

beforeAll(async () => {
  ensureSidecarBundle();
  pluginDir = mkdtempSync(join(tmpdir(), 'jh-status-plugin-'));
  symlinkSync(join(repo, 'dist', 'kubectl-jobharvest'), join(pluginDir, 'kubectl-jobharvest'));
  const pinned = join(repo, 'test', 'harness', 'node', 'bin', 'kubectl');
  kubectl = process.env.JOBHARVEST_KUBECTL ?? (existsSync(pinned) ? pinned : await which('kubectl'));
  // A log server that refuses every request for good (400): the sidecar dead-letters the lines.
  refusing = createServer((req, res) => {
    refusedRequests++;
    req.resume();
    req.on('end', () => res.writeHead(400, { 'content-type': 'text/plain' }).end('refused'));
  });
  await new Promise<void>((r) => refusing.listen(0, '127.0.0.1', r));
  stack = await Stack.start({ info: cluster.info, name: 'sts', kubelet: { restartBackoffMs: 300 } });
  // The release as `helm install` leaves it: its webhook configuration names its
  // Service (the selector matches no namespace, so it calls nothing), and the
  // signing key Secret the webhook creates at its first start, here holding
  // the key this stack's webhook and harvester sign with.
  await cluster.core.createNamespace({ body: { metadata: { name: chartNs } } });
  const owner = { 'meta.helm.sh/release-name': release, 'meta.helm.sh/release-namespace': chartNs };
  await cluster.objects.create({
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'MutatingWebhookConfiguration',
    metadata: { name: webhookConfiguration, annotations: owner, labels: { 'app.kubernetes.io/instance': release } },
    webhooks: [
      {
        name: 'jobs.jobharvest.io',
        admissionReviewVersions: ['v1'],
        clientConfig: { service: { name: `${release}-jobharvest`, namespace: chartNs, path: '/mutate', port: 443 } },
        rules: [{ apiGroups: ['batch'], apiVersions: ['v1'], operations: ['CREATE'], resources: ['jobs'] }],
        namespaceSelector: { matchLabels: { [`jobharvest.io/e2e-never-${suffix}`]: 'x' } },
        failurePolicy: 'Ignore',
        sideEffects: 'None',
      },
    ],
  } as never);
  await cluster.core.createNamespacedSecret({
    namespace: chartNs,
    body: { metadata: { name: `${release}-jobharvest-signing` }, data: { key: Buffer.from(readFileSync(stack.harvesterFiles.signingKeyFile)).toString('base64') } },
  });
}, 240_000);

afterAll(async () => {
  await cluster.objects.delete({ apiVersion: 'admissionregistration.k8s.io/v1', kind: 'MutatingWebhookConfiguration', metadata: { name: webhookConfiguration } } as never).catch(() => undefined);
  await cluster.core.deleteNamespace({ name: chartNs }).catch(() => undefined);
  await stack?.stop();
  await new Promise((r) => refusing?.close(r));
  rmSync(pluginDir, { force: true, recursive: true });
}, 120_000);

function env(): NodeJS.ProcessEnv {
  return { ...process.env, KUBECONFIG: cluster.info.kubeconfigPath, PATH: `${pluginDir}:${dirname(process.execPath)}:${process.env.PATH}` };
}

/** `kubectl jobharvest status ARGS` (through kubectl when there is one), with its exit code. */
async function status(args: string[]): Promise<{ stdout: string; stderr: string; code: number; via: string }> {
  const [cmd, argv, via] = kubectl ? [kubectl, ['jobharvest', 'status', ...args], `${kubectl} jobharvest`] : ['kubectl-jobharvest', ['status', ...args], 'kubectl-jobharvest (no kubectl on PATH)'];
  return new Promise((resolve) =>
    execFile(cmd, argv, { env: env(), maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => resolve({ stdout, stderr, code: err ? ((err as { code?: number }).code ?? -1) : 0, via })),
  );
}

async function recorded(ns: string, name: string): Promise<Record<string, unknown>> {
  return waitFor(
    `the delivery record on ${ns}/${name}`,
    async () => {
      const raw = (await stack.batch.readNamespacedJob({ name, namespace: ns })).metadata?.annotations?.[DELIVERY_ANNOTATION];
      return raw ? (JSON.parse(raw) as Record<string, unknown>) : undefined;
    },
    { timeoutMs: 90_000 },
  );
}

/** The table's rows as cells, by the header's column names. */
function table(stdout: string): Array<Record<string, string>> {
  const [head, ...rows] = stdout.trimEnd().split('\n');
  const names = head!.split(/\s{2,}/);
  return rows.map((r) => Object.fromEntries(r.split(/\s{2,}/).map((c, i) => [names[i]!, c])));
}

describe('kubectl jobharvest status', () => {
  it('prints a harvested Job with its lines shipped and its record verified, -o json and -o yaml parse, and exits 1 for a Job whose record says lines were lost', async () => {
    const N = 300;
    const LOST = 120;
    const ok = await stack.namespace('st-ok', { ttlSeconds: 600 });
    const bad = await stack.namespace('st-lost', { ttlSeconds: 600, drainSeconds: 3 });
    const shipped = shellJob('shipped', { script: `sleep 1; ${numberedLines('shipped', N)}` });
    // Requests of its own, so the webhook sizes the sidecar too (a BestEffort pod keeps its class, and a sidecar without requests).
    shipped.spec!.template.spec!.containers[0]!.resources = { requests: { cpu: '250m', memory: '64Mi' } };
    const stored = await stack.batch.createNamespacedJob({ namespace: ok, body: shipped });
    const sidecar = stored.spec!.template.spec!.initContainers!.find((c) => c.name === 'jobharvest')!.resources!.requests!;
    const refused = shellJob('refused', { script: `sleep 1; ${numberedLines('refused', LOST)}` });
    refused.metadata!.annotations = { 'jobharvest.io/sink': 'http', 'jobharvest.io/endpoint': `http://127.0.0.1:${(refusing.address() as AddressInfo).port}/logs` };
    await stack.batch.createNamespacedJob({ namespace: bad, body: refused });
    const okRecord = await recorded(ok, 'shipped');
    const badRecord = await recorded(bad, 'refused');
    expect(okRecord).toMatchObject({ sink: 'loki', pods: 1, shipped: N, lost: 0, unaccounted: 0 });
    expect(badRecord).toMatchObject({ sink: 'http', pods: 1, shipped: 0, lost: LOST, unaccounted: 0 });
    expect(refusedRequests).toBeGreaterThan(0);

    const common = ['--chart-namespace', chartNs];
    const one = await status(['-n', ok, ...common]);
    console.log(`status -n ${ok} (via ${one.via}), exit ${one.code}:\n${one.stdout}${one.stderr}`);
    expect(one.stderr).toBe('');
    expect(one.code).toBe(0);
    expect(table(one.stdout)).toEqual([{ NAME: 'shipped', INJECTED: expect.stringMatching(/^\d+\.\d+\.\d+/), SINK: 'loki', SHIPPED: String(N), HARVESTED: '0', LOST: '0', RECORD: 'verified', TTL: '600s', LOGS: '-' }]);

    const json = await status(['-n', ok, '-o', 'json', ...common]);
    expect(json.code).toBe(0);
    const items = (JSON.parse(json.stdout) as { items: Array<Record<string, unknown>> }).items;
    expect(items).toHaveLength(1);
    expect(items[0]).toMatchObject({ namespace: ok, name: 'shipped', sink: 'loki', record: 'verified', shipped: N, harvested: 0, lost: 0, unaccounted: 0, ttl: { state: 'set', seconds: 600 } });
    // The pod's requests (its container's and the sidecar's, as the scheduler sums them) and its run time, from the record.
    const usage = items[0]!.usage as { pods: number; cpu_request_millicores: number; memory_request_bytes: number; run_seconds: number };
    console.log(`usage in the record: ${JSON.stringify(usage)}; the sidecar requests ${JSON.stringify(sidecar)}`);
    expect(usage).toMatchObject({
      pods: 1,
      cpu_request_millicores: 250 + Number(parseQuantity(sidecar.cpu)! / 1_000_000n),
      memory_request_bytes: 64 * 2 ** 20 + Number(parseQuantity(sidecar.memory)! / 1_000_000_000n),
    });
    // It sleeps a second first; the kubelet's times are whole seconds.
    expect(usage.run_seconds).toBeGreaterThanOrEqual(1);
    expect(parseYaml((await status(['job/shipped', '-n', ok, '-o', 'yaml', ...common])).stdout)).toEqual(JSON.parse(json.stdout));

    // Without the key (a Secret of that name does not exist): the record is shown, unverified, and why.
    const unverified = await status(['-n', ok, ...common, '--signing-secret', 'no-such-secret']);
    expect(table(unverified.stdout)[0]!.RECORD).toBe('unverified');
    expect(unverified.stderr).toBe(`records unverified: Secret ${chartNs}/no-such-secret: not found\n`);

    const lost = await status(['-n', bad, ...common]);
    expect(lost.code).toBe(1);
    expect(table(lost.stdout)).toEqual([{ NAME: 'refused', INJECTED: expect.any(String), SINK: 'http', SHIPPED: '0', HARVESTED: '0', LOST: String(LOST), RECORD: 'verified', TTL: '600s', LOGS: '-' }]);

    const all = await status(['-A', '-o', 'wide', ...common]);
    const plain = await status(['-A', ...common]);
    console.log(`status -A (via ${plain.via}), exit ${plain.code}:\n${plain.stdout}${plain.stderr}`);
    console.log(`status -A -o wide, exit ${all.code}:\n${all.stdout}`);
    expect(plain.code).toBe(1);
    const rows = table(plain.stdout);
    expect(rows).toContainEqual(expect.objectContaining({ NAMESPACE: ok, NAME: 'shipped', SHIPPED: String(N), RECORD: 'verified' }));
    expect(rows).toContainEqual(expect.objectContaining({ NAMESPACE: bad, NAME: 'refused', LOST: String(LOST), RECORD: 'verified' }));
  }, 240_000);
});
