/**
 * The webhook against a real kube-apiserver: the API server calls it over TLS,
 * applies its JSONPatch, validates the result with its own rules and stores it;
 * the real Job, TTL and garbage-collection controllers take it from there.
 */
import { RbacAuthorizationV1Api, type V1Job, type V1Pod } from '@kubernetes/client-node';
import { readFileSync } from 'node:fs';
import { request } from 'node:https';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestNamespace, useCluster, waitFor } from '../harness/cluster/client.ts';
import { goldenCases } from '../golden/cases.ts';
import { parseManifests } from '../../src/cli/manifests.ts';
import { containedIn } from './support/objects.ts';
import { startWebhook, type WebhookProcess } from '../support/webhook-process.ts';

const cluster = useCluster();
const CONFIG_NAME = 'jobharvest-e2e-webhook';
const OPT_IN = { 'jobharvest.io/inject': 'enabled' };
let webhook: WebhookProcess;
let optedIn = '';
let plain = '';
const cleanup: string[] = [];

function job(name: string, over: Partial<V1Job['metadata']> = {}, ttl?: number): V1Job {
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: { name, ...over },
    spec: {
      backoffLimit: 0,
      ...(ttl !== undefined ? { ttlSecondsAfterFinished: ttl } : {}),
      template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: 'busybox:1.36', command: ['sh', '-c', 'echo hi'] }] } },
    },
  };
}

const hasSidecar = (j: V1Job) => j.spec?.template.spec?.initContainers?.[0]?.name === 'jobharvest';

/** POST over TLS without verifying, as a pod that reaches the Service would. */
function postJson(port: number, path: string, body: unknown): Promise<{ status: number; body: string }> {
  const payload = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port, path, method: 'POST', rejectUnauthorized: false, agent: false, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } },
      (res) => {
        let text = '';
        res.on('data', (c) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

async function deleteQuietly(fn: () => Promise<unknown>) {
  try {
    await fn();
  } catch {
    // already gone
  }
}

beforeAll(async () => {
  // A durable sink, so that the webhook sets the TTL these tests follow; with the
  // default stdout sink it injects without one.
  optedIn = await createTestNamespace(cluster.core, 'wh-in', {
    ...OPT_IN,
    'jobharvest.io/sink': 'http',
    'jobharvest.io/endpoint': 'http://127.0.0.1:9/ingest',
  });
  plain = await createTestNamespace(cluster.core, 'wh-plain');
  cleanup.push(optedIn, plain);
  // The golden files name their namespace; the api-mode ones get a namespace whose
  // Pod Security level makes mode auto choose api, as --mode api did for the golden.
  await cluster.core.createNamespace({ body: { metadata: { name: 'team-a', annotations: OPT_IN } } });
  cleanup.push('team-a');
  await cluster.core.createNamespace({
    body: { metadata: { name: 'team-a-api', annotations: OPT_IN, labels: { 'pod-security.kubernetes.io/enforce': 'restricted' } } },
  });
  cleanup.push('team-a-api');
  webhook = await startWebhook(cluster.info, { name: CONFIG_NAME });
}, 120_000);

afterAll(async () => {
  await webhook?.stop();
  await deleteQuietly(() => cluster.admission.deleteMutatingWebhookConfiguration({ name: CONFIG_NAME }));
  for (const name of cleanup) await deleteQuietly(() => cluster.core.deleteNamespace({ name }));
});

describe('injection through the API server', () => {
  it('stores a Job of an opted-in namespace with the sidecar and the TTL, as validated by the API server', async () => {
    const created = await cluster.batch.createNamespacedJob({ namespace: optedIn, body: job('basic') });
    const stored = await cluster.batch.readNamespacedJob({ name: 'basic', namespace: optedIn });
    for (const j of [created, stored]) {
      expect(hasSidecar(j)).toBe(true);
      expect(j.spec?.template.spec?.initContainers?.[0]?.restartPolicy).toBe('Always');
      expect(j.spec?.ttlSecondsAfterFinished).toBe(3600);
      expect(j.metadata?.annotations?.['jobharvest.io/status']).toMatch(/"version":"0\.2\.0"/);
    }
    expect(stored.spec?.template.spec?.containers).toHaveLength(1);
    expect(stored.spec?.template.metadata?.annotations?.['kubectl.kubernetes.io/default-container']).toBe('main');
  });

  const { cases } = goldenCases();
  for (const c of cases) {
    const inputs = parseManifests(readFileSync(c.input, 'utf8'), c.input);
    const outputs = parseManifests(readFileSync(c.output, 'utf8'), c.output);
    const pairs: Array<{ input: V1Job; expected: V1Job }> = [];
    inputs.forEach((doc, i) => {
      const d = doc as { kind?: string; items?: unknown[] };
      if (d.kind === 'Job') pairs.push({ input: doc as V1Job, expected: outputs[i] as V1Job });
      if (d.kind === 'List') d.items!.forEach((item, k) => (item as V1Job).kind === 'Job' && pairs.push({ input: item as V1Job, expected: (outputs[i] as { items: V1Job[] }).items[k]! }));
    });
    // The webhook here runs the default configuration; a case with a --config
    // of its own is replayed through /mutate with that file in unit/golden.test.ts.
    if (pairs.length === 0 || c.flags.config !== undefined) continue;
    it(`stores golden case ${c.name} exactly as its golden output says`, async () => {
      const api = c.flags.mode === 'api';
      for (const { input, expected } of pairs) {
        const namespace = api ? 'team-a-api' : (input.metadata?.namespace ?? 'team-a');
        const body = structuredClone(input);
        body.metadata = { ...body.metadata, namespace };
        const stored = await cluster.batch.createNamespacedJob({ namespace, body });
        const want = structuredClone(expected);
        // Server-set metadata: the namespace we chose, managedFields, name from generateName.
        delete want.metadata!.namespace;
        delete want.metadata!.managedFields;
        const diffs = containedIn(want, JSON.parse(JSON.stringify(stored)));
        expect(diffs, `${c.name}/${input.metadata?.name ?? input.metadata?.generateName}`).toEqual([]);
        if (namespace === 'kube-system') await cluster.batch.deleteNamespacedJob({ name: stored.metadata!.name!, namespace, propagationPolicy: 'Background' });
      }
    });
  }

  it('leaves Jobs alone where no injection is due', async () => {
    const a = await cluster.batch.createNamespacedJob({ namespace: plain, body: job('not-opted-in') });
    const b = await cluster.batch.createNamespacedJob({ namespace: optedIn, body: job('opted-out', { annotations: { 'jobharvest.io/inject': 'false' } }) });
    const tpl = job('opted-out-template');
    tpl.spec!.template.metadata = { annotations: { 'jobharvest.io/inject': 'disabled' } };
    const c = await cluster.batch.createNamespacedJob({ namespace: optedIn, body: tpl });
    const results = [a, b, c];
    for (const ns of ['kube-system', 'kube-public', 'kube-node-lease']) {
      const j = await cluster.batch.createNamespacedJob({ namespace: ns, body: job('system-job') });
      results.push(j);
      await cluster.batch.deleteNamespacedJob({ name: 'system-job', namespace: ns, propagationPolicy: 'Background' });
    }
    for (const j of results) {
      expect(hasSidecar(j), `${j.metadata?.namespace}/${j.metadata?.name}`).toBe(false);
      expect(j.spec?.ttlSecondsAfterFinished).toBeUndefined();
      expect(j.metadata?.annotations?.['jobharvest.io/status']).toBeUndefined();
    }
  });

  it('answers a server-side dry run with the mutated Job, persists nothing and has no side effects', async () => {
    const body = job('dry', { annotations: { 'jobharvest.io/mode': 'api' } });
    const dry = await cluster.batch.createNamespacedJob({ namespace: optedIn, body, dryRun: 'All' });
    expect(hasSidecar(dry)).toBe(true);
    await expect(cluster.batch.readNamespacedJob({ name: 'dry', namespace: optedIn })).rejects.toMatchObject({ code: 404 });
  });

  it('binds nothing for an admission: a Job-level mode api in a node-mode namespace stays node, and a forged review causes no RoleBinding', async () => {
    const rbac = cluster.kc.makeApiClient(RbacAuthorizationV1Api);
    // The reconciler's own binding, from the namespace's Pod Security level:
    // proves this webhook binds at all, so the absences below could fail.
    const own = await waitFor('the log-reader RoleBinding of the api-mode namespace', () => rbac.readNamespacedRoleBinding({ name: 'jobharvest-log-reader', namespace: 'team-a-api' }), { timeoutMs: 10_000 });
    expect(own.subjects?.[0]?.name).toBe('system:serviceaccounts:team-a-api');

    const body = job('asks-api', { annotations: { 'jobharvest.io/mode': 'api' } });
    const created = await cluster.batch.createNamespacedJob({ namespace: optedIn, body });
    const sidecar = created.spec?.template.spec?.initContainers?.[0];
    expect(sidecar?.env?.find((e) => e.name === 'JOBHARVEST_MODE')?.value).toBe('node');

    // Straight to /mutate, as any pod that reaches the Service could: an api-mode
    // Job in the node-mode namespace, and in a namespace the API server would
    // never send (not opted in).
    for (const namespace of [optedIn, plain]) {
      const forged = {
        apiVersion: 'admission.k8s.io/v1',
        kind: 'AdmissionReview',
        request: {
          uid: '00000000-0000-4000-8000-00000000f0f0',
          kind: { group: 'batch', version: 'v1', kind: 'Job' },
          resource: { group: 'batch', version: 'v1', resource: 'jobs' },
          operation: 'CREATE',
          namespace,
          object: { ...job('forged', { namespace, annotations: { 'jobharvest.io/mode': 'api', 'jobharvest.io/inject': 'enabled' } }) },
        },
      };
      const answer = await postJson(webhook.port, '/mutate', forged);
      expect(answer.status).toBe(200);
      expect(JSON.parse(answer.body).response.allowed).toBe(true);
    }
    await new Promise((r) => setTimeout(r, 2000));
    for (const namespace of [optedIn, plain]) {
      const bindings = (await rbac.listNamespacedRoleBinding({ namespace })).items.map((b) => b.metadata?.name);
      expect(bindings, namespace).toEqual([]);
    }
  });

  it('injects the Jobs a CronJob creates', async () => {
    await cluster.batch.createNamespacedCronJob({
      namespace: optedIn,
      body: {
        metadata: { name: 'every-minute' },
        spec: { schedule: '* * * * *', jobTemplate: { spec: job('x').spec! } },
      },
    });
    const created = await waitFor(
      'the CronJob controller to create a Job',
      async () => (await cluster.batch.listNamespacedJob({ namespace: optedIn })).items.find((j) => j.metadata?.ownerReferences?.[0]?.kind === 'CronJob'),
      { timeoutMs: 100_000, intervalMs: 1000 },
    );
    expect(hasSidecar(created)).toBe(true);
    expect(created.spec?.ttlSecondsAfterFinished).toBe(3600);
    await cluster.batch.deleteNamespacedCronJob({ name: 'every-minute', namespace: optedIn });
  }, 120_000);

  it('lets the TTL controller delete the Job and its pod only after ttlSecondsAfterFinished', async () => {
    const TTL = 3;
    const name = 'ttl';
    await cluster.batch.createNamespacedJob({ namespace: optedIn, body: job(name, { annotations: { 'jobharvest.io/ttl-seconds-after-finished': String(TTL) } }) });
    const pod: V1Pod = await waitFor('the Job controller to create a pod', async () => (await cluster.core.listNamespacedPod({ namespace: optedIn, labelSelector: `batch.kubernetes.io/job-name=${name}` })).items[0]);
    expect(pod.spec?.initContainers?.[0]?.name).toBe('jobharvest');
    const podName = pod.metadata!.name!;
    await cluster.core.createNamespacedPodBinding({ name: podName, namespace: optedIn, body: { metadata: { name: podName }, target: { apiVersion: 'v1', kind: 'Node', name: 'e2e-node' } } });
    const bound = await cluster.core.readNamespacedPod({ name: podName, namespace: optedIn });
    const now = new Date();
    bound.status = { ...bound.status, phase: 'Succeeded', startTime: now, conditions: [{ type: 'Ready', status: 'False', reason: 'PodCompleted', lastTransitionTime: now }] };
    await cluster.core.replaceNamespacedPodStatus({ name: podName, namespace: optedIn, body: bound });

    const complete = await waitFor('the Job to complete', async () => {
      const j = await cluster.batch.readNamespacedJob({ name, namespace: optedIn });
      return j.status?.conditions?.find((c) => c.type === 'Complete' && c.status === 'True');
    });
    const finishedAt = new Date(complete.lastTransitionTime!).getTime();
    // Polling brackets each deletion: last seen present (probe start) < deleted ≤ first seen gone (probe end).
    let jobGoneAt = 0;
    let podGoneAt = 0;
    let jobLastSeen = 0;
    let podLastSeen = 0;
    const probe = async (read: () => Promise<unknown>): Promise<[seen: number, gone: number]> => {
      const start = Date.now();
      try {
        await read();
        return [start, 0];
      } catch (e) {
        if ((e as { code?: number }).code === 404) return [0, Date.now()];
        throw e;
      }
    };
    await waitFor(
      'the TTL controller and the garbage collector to delete Job and pod',
      async () => {
        if (!jobGoneAt) [jobLastSeen, jobGoneAt] = await probe(() => cluster.batch.readNamespacedJob({ name, namespace: optedIn })).then(([s, g]) => [s || jobLastSeen, g]);
        if (!podGoneAt) [podLastSeen, podGoneAt] = await probe(() => cluster.core.readNamespacedPod({ name: podName, namespace: optedIn })).then(([s, g]) => [s || podLastSeen, g]);
        return jobGoneAt && podGoneAt ? true : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 100 },
    );
    // The TTL clock starts at lastTransitionTime (second precision, truncated), so nothing may be gone
    // before finishedAt + TTL, and both must have been seen alive during the last second before it.
    expect(jobGoneAt - finishedAt).toBeGreaterThanOrEqual(TTL * 1000);
    expect(podGoneAt - finishedAt).toBeGreaterThanOrEqual(TTL * 1000);
    expect(jobLastSeen - finishedAt).toBeGreaterThanOrEqual((TTL - 1) * 1000);
    expect(podLastSeen - finishedAt).toBeGreaterThanOrEqual((TTL - 1) * 1000);
  });
});

describe('when the webhook is down', () => {
  it('creates Jobs unmutated with failurePolicy Ignore, and rejects them clearly with Fail', async () => {
    await webhook.stop();
    const j = await cluster.batch.createNamespacedJob({ namespace: optedIn, body: job('while-down') });
    expect(hasSidecar(j)).toBe(false);
    const cfg = await cluster.admission.readMutatingWebhookConfiguration({ name: CONFIG_NAME });
    cfg.webhooks![0]!.failurePolicy = 'Fail';
    await cluster.admission.replaceMutatingWebhookConfiguration({ name: CONFIG_NAME, body: cfg });
    // The API server picks up webhook configuration changes asynchronously.
    const err = await waitFor('creation to be rejected', async () => {
      try {
        await cluster.batch.createNamespacedJob({ namespace: optedIn, body: job(`rejected-${Date.now()}`) });
        return undefined;
      } catch (e) {
        return e as { code: number; body: string };
      }
    }, { timeoutMs: 20_000 });
    expect(err.code).toBe(500);
    const status = JSON.parse(String(err.body)) as { message: string; reason: string };
    expect(status.reason).toBe('InternalError');
    expect(status.message).toMatch(/failed calling webhook "jobs\.jobharvest\.io": failed to call webhook: .*connection refused/);
    await cluster.admission.deleteMutatingWebhookConfiguration({ name: CONFIG_NAME });
  });
});
