/**
 * Every Job shape the API server accepts before injection must have pods it
 * accepts after, with the same QoS class: a Job is only half the story, since
 * the Job controller creates its pods later and a refused pod shows only as a
 * FailedCreate Event. Each shape goes through the real webhook (called by the
 * real API server over TLS, dryRun=All), and then a Pod made from the stored
 * template, before and after, is created with dryRun=All too, which runs the
 * API server's defaulting, validation (pod-level resources included), the
 * LimitRanger and the ResourceQuota admission plugins, and reports the QoS
 * class it computed.
 */
import type { V1Job, V1PodTemplateSpec } from '@kubernetes/client-node';
import { request } from 'node:https';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestNamespace, useCluster, waitFor } from '../harness/cluster/client.ts';
import { startWebhook, type WebhookProcess } from '../support/webhook-process.ts';

const cluster = useCluster();
const CONFIG_NAME = 'jobharvest-e2e-pod-admission';
const OPT_IN = { 'jobharvest.io/inject': 'enabled' };
let webhook: WebhookProcess;
const namespaces: Record<'plain' | 'quota' | 'limits' | 'strict', string> = { plain: '', quota: '', limits: '', strict: '' };

type Res = { requests?: Record<string, string>; limits?: Record<string, string> };
const c = (name: string, resources: Res = {}) => ({ name, image: 'busybox:1.36', command: ['sh', '-c', 'echo hi'], resources });

/** Shapes of pod a user writes, each with the QoS class the API server gives it without jobharvest. */
const SHAPES: Record<string, { spec: Record<string, unknown>; qos: string }> = {
  guaranteed: { spec: { containers: [c('main', { requests: { cpu: '500m', memory: '256Mi' }, limits: { cpu: '500m', memory: '256Mi' } }), c('side', { limits: { cpu: '100m', memory: '64Mi' } })] }, qos: 'Guaranteed' },
  burstable: { spec: { containers: [c('main', { requests: { cpu: '100m', memory: '64Mi' }, limits: { cpu: '1', memory: '256Mi' } })] }, qos: 'Burstable' },
  'best-effort': { spec: { containers: [c('main')] }, qos: 'BestEffort' },
  'pod-level-room': {
    spec: { resources: { requests: { cpu: '1', memory: '1Gi' }, limits: { cpu: '1', memory: '1Gi' } }, containers: [c('main', { requests: { cpu: '500m', memory: '512Mi' } })] },
    qos: 'Guaranteed',
  },
  'pod-level-full': {
    spec: { resources: { requests: { cpu: '1', memory: '1Gi' }, limits: { cpu: '1', memory: '1Gi' } }, containers: [c('main', { requests: { cpu: '1', memory: '1Gi' } })] },
    qos: 'Guaranteed',
  },
  'pod-level-limits-only': { spec: { resources: { limits: { cpu: '1', memory: '1Gi' } }, containers: [c('main')] }, qos: 'Guaranteed' },
};

function job(name: string, spec: Record<string, unknown>): V1Job {
  return { apiVersion: 'batch/v1', kind: 'Job', metadata: { name }, spec: { backoffLimit: 0, template: { spec: { restartPolicy: 'Never', ...spec } as never } } };
}

interface Answer {
  status: number;
  body: Record<string, any>;
  warnings: string[];
}

/** A dry-run create, with the admission warnings the API server passes on (client-node drops them). */
function dryCreate(path: string, body: unknown): Promise<Answer> {
  const text = JSON.stringify(body);
  const url = new URL(`${cluster.info.server}${path}?dryRun=All`);
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: 'POST',
        ca: cluster.info.caPem,
        headers: { authorization: `Bearer ${cluster.info.token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), accept: 'application/json' },
        timeout: 15_000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (d: Buffer) => chunks.push(d));
        res.on('end', () => {
          const raw = res.headers.warning;
          const warnings = (Array.isArray(raw) ? raw : raw ? [raw] : []).map((w) => w.replace(/^299 - "?/, '').replace(/"$/, ''));
          resolve({ status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(chunks).toString('utf8')), warnings });
        });
      },
    );
    req.on('error', reject);
    req.end(text);
  });
}

async function createJob(ns: string, name: string, spec: Record<string, unknown>): Promise<Answer> {
  const a = await dryCreate(`/apis/batch/v1/namespaces/${ns}/jobs`, job(name, spec));
  expect(a.status, JSON.stringify(a.body)).toBe(201);
  return a;
}

/** The pod the Job controller would create from the template. */
async function createPod(ns: string, name: string, template: V1PodTemplateSpec): Promise<Answer> {
  return dryCreate(`/api/v1/namespaces/${ns}/pods`, { apiVersion: 'v1', kind: 'Pod', metadata: { name, labels: template.metadata?.labels ?? {} }, spec: template.spec });
}

beforeAll(async () => {
  namespaces.plain = await createTestNamespace(cluster.core, 'pa-plain', OPT_IN);
  namespaces.quota = await createTestNamespace(cluster.core, 'pa-quota', OPT_IN);
  namespaces.limits = await createTestNamespace(cluster.core, 'pa-limits', OPT_IN);
  namespaces.strict = await createTestNamespace(cluster.core, 'pa-strict', OPT_IN);
  const hard = { 'requests.cpu': '20', 'requests.memory': '20Gi', 'limits.cpu': '20', 'limits.memory': '20Gi' };
  await cluster.core.createNamespacedResourceQuota({ namespace: namespaces.quota, body: { metadata: { name: 'compute' }, spec: { hard } } });
  // The quota plugin enforces what the resourcequota controller has counted into the quota's status.
  await waitFor('the quota controller to count the quota', async () => {
    const q = await cluster.core.readNamespacedResourceQuota({ name: 'compute', namespace: namespaces.quota });
    return Object.keys(q.status?.hard ?? {}).length === 4 ? true : undefined;
  });
  await cluster.core.createNamespacedLimitRange({
    namespace: namespaces.limits,
    body: {
      metadata: { name: 'bounds' },
      spec: { limits: [{ type: 'Container', min: { cpu: '5m', memory: '16Mi' }, max: { cpu: '4', memory: '8Gi' }, maxLimitRequestRatio: { memory: '4' } }] },
    },
  });
  // A ratio the sidecar's standard sizes (96Mi / 24Mi = 4) do not meet.
  await cluster.core.createNamespacedLimitRange({
    namespace: namespaces.strict,
    body: { metadata: { name: 'tight-ratio' }, spec: { limits: [{ type: 'Container', maxLimitRequestRatio: { memory: '2' } }] } },
  });
  webhook = await startWebhook(cluster.info, { name: CONFIG_NAME });
}, 120_000);

afterAll(async () => {
  await webhook?.stop();
  try {
    await cluster.admission.deleteMutatingWebhookConfiguration({ name: CONFIG_NAME });
  } catch {
    // already gone
  }
  for (const name of Object.values(namespaces)) if (name) await cluster.core.deleteNamespace({ name }).catch(() => undefined);
});

describe('pods of injected Jobs are admitted as they were before, with the same QoS class', () => {
  for (const where of ['plain', 'quota', 'limits'] as const) {
    it(`every shape, in a namespace ${where === 'plain' ? 'without policy' : where === 'quota' ? 'with a ResourceQuota on requests.* and limits.*' : 'with a LimitRange of min, max and maxLimitRequestRatio'}`, async () => {
      const ns = namespaces[where];
      const rows: string[] = [];
      for (const [shape, { spec, qos }] of Object.entries(SHAPES)) {
        // Under a quota on limits.*, a pod is admitted only if every container sets them: the shapes that do not are refused before and after alike.
        const before = await createPod(ns, `${shape}-before`, { spec: { restartPolicy: 'Never', ...spec } as never });
        const injected = await createJob(ns, shape, spec);
        const template = injected.body.spec.template as V1PodTemplateSpec;
        expect(template.spec?.initContainers?.[0]?.name, `${shape} was not injected`).toBe('jobharvest');
        const after = await createPod(ns, `${shape}-after`, template);
        rows.push(`${where} ${shape}: before ${before.status} ${before.body.status?.qosClass ?? before.body.message} | after ${after.status} ${after.body.status?.qosClass ?? after.body.message}`);
        if (before.status === 201) {
          expect(after.status, `${shape}: ${after.body.message}`).toBe(201);
          expect(after.body.status.qosClass).toBe(before.body.status.qosClass);
          if (where === 'plain') expect(before.body.status.qosClass).toBe(qos);
        }
      }
      console.log(rows.join('\n'));
      // Not vacuous: under a quota the shapes that leave out requests or limits, and under a LimitRange's max (which is also its default limit) the pod-level shapes, are refused before injection too.
      expect(rows.filter((r) => r.includes('before 201')).length).toBeGreaterThanOrEqual(where === 'plain' ? rows.length : 3);
    });
  }

  it('under a quota on limits.cpu the sidecar sets a CPU limit; the Burstable pod is admitted, and it counts against the quota', async () => {
    const a = await createJob(namespaces.quota, 'cpu-limit', SHAPES.burstable!.spec);
    const sidecar = a.body.spec.template.spec.initContainers[0];
    expect(sidecar.resources).toEqual({ requests: { cpu: '10m', memory: '24Mi' }, limits: { cpu: '100m', memory: '96Mi' } });
    expect((await createPod(namespaces.quota, 'cpu-limit', a.body.spec.template)).status).toBe(201);
  });

  it('where a LimitRange would refuse the sidecar, the webhook says so at admission', async () => {
    const spec = { containers: [c('main', { requests: { cpu: '100m', memory: '64Mi' }, limits: { cpu: '200m', memory: '128Mi' } })] };
    const before = await createPod(namespaces.strict, 'ratio-before', { spec: { restartPolicy: 'Never', ...spec } as never });
    expect(before.status).toBe(201);
    const a = await createJob(namespaces.strict, 'ratio', spec);
    expect(a.warnings.join('\n')).toContain('LimitRange tight-ratio would refuse the pods');
    // The warning is true: the API server refuses the injected pod.
    const after = await createPod(namespaces.strict, 'ratio-after', a.body.spec.template);
    expect(after.status).toBe(403);
    expect(after.body.message).toContain('max limit to request ratio');
  });

  it('a pod-level budget with no room: the sidecar shares it, the pod is admitted, and a warning says why', async () => {
    const a = await createJob(namespaces.plain, 'full-budget', SHAPES['pod-level-full']!.spec);
    expect(a.body.spec.template.spec.initContainers[0].resources ?? {}).toEqual({});
    expect(a.warnings.join('\n')).toContain('the pod sets pod-level resources');
  });
});
