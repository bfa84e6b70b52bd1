/**
 * The webhook's Kubernetes edge against the real control plane: two replicas
 * sharing one certificate Secret, rotation under load, caBundle repair, late
 * namespace annotations and the api-mode RoleBinding.
 */
import { RbacAuthorizationV1Api, type V1Job } from '@kubernetes/client-node';
import { X509Certificate } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestNamespace, useCluster, waitFor } from '../harness/cluster/client.ts';
import { get, startWebhook, type WebhookProcess } from '../support/webhook-process.ts';

const cluster = useCluster();
const rbac = cluster.kc.makeApiClient(RbacAuthorizationV1Api);
const CONFIG = 'jobharvest-e2e-edge';
const SELECT = { 'jobharvest-e2e': 'edge' };
const OPT_IN = { 'jobharvest.io/inject': 'enabled' };
let home = '';
const namespaces: string[] = [];
let a: WebhookProcess;
let b: WebhookProcess;

const job = (name: string): V1Job => ({
  metadata: { name },
  spec: { backoffLimit: 0, template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: 'busybox:1.36' }] } } },
});

async function secretData() {
  const s = await cluster.core.readNamespacedSecret({ name: 'wh-tls', namespace: home });
  const d = (k: string) => Buffer.from(s.data![k]!, 'base64').toString('utf8');
  return { caBundle: d('ca.crt'), tlsCert: d('tls.crt'), secret: s };
}
const fingerprint = (pem: string) => new X509Certificate(pem).fingerprint256;
async function liveCaBundle() {
  const cfg = await cluster.admission.readMutatingWebhookConfiguration({ name: CONFIG });
  return Buffer.from(cfg.webhooks![0]!.clientConfig.caBundle ?? '', 'base64').toString('utf8');
}

beforeAll(async () => {
  home = await createTestNamespace(cluster.core, 'wh-home');
  namespaces.push(home);
  // Registered by hand, as the chart would: a URL to replica a, no caBundle yet.
  const port = (await import('../support/ports.ts')).freePort;
  const portA = await port();
  await cluster.admission.createMutatingWebhookConfiguration({
    body: {
      metadata: { name: CONFIG },
      webhooks: [
        {
          name: 'jobs.jobharvest.io',
          admissionReviewVersions: ['v1'],
          clientConfig: { url: `https://127.0.0.1:${portA}/mutate` },
          rules: [{ apiGroups: ['batch'], apiVersions: ['v1'], operations: ['CREATE'], resources: ['jobs'] }],
          failurePolicy: 'Fail',
          sideEffects: 'NoneOnDryRun',
          reinvocationPolicy: 'IfNeeded',
          matchPolicy: 'Equivalent',
          timeoutSeconds: 10,
          namespaceSelector: { matchLabels: SELECT },
        },
      ],
    },
  });
  const args = (ns: string) => [
    '--cert-mode', 'auto', '--namespace', ns, '--service-name', 'wh', '--cert-secret', 'wh-tls',
    '--webhook-config-name', CONFIG, '--extra-ips', '127.0.0.1', '--cert-interval-seconds', '1', '--cabundle-interval-seconds', '1',
  ];
  // Both replicas start at the same moment and race to create the Secret.
  [a, b] = await Promise.all([
    startWebhook(cluster.info, { name: 'edge-a', register: false, port: portA, args: args(home) }),
    startWebhook(cluster.info, { name: 'edge-b', register: false, args: args(home) }),
  ]);
}, 120_000);

afterAll(async () => {
  await Promise.all([a?.stop(), b?.stop()]);
  await cluster.admission.deleteMutatingWebhookConfiguration({ name: CONFIG }).catch(() => {});
  for (const name of namespaces) await cluster.core.deleteNamespace({ name }).catch(() => {});
});

describe('certificates in auto mode', () => {
  it('ends a first-start race with one Secret, one caBundle, and both replicas serving the same certificate', async () => {
    const { caBundle, tlsCert } = await secretData();
    const secrets = (await cluster.core.listNamespacedSecret({ namespace: home })).items.filter((s) => s.metadata?.labels?.['app.kubernetes.io/managed-by'] === 'jobharvest');
    expect(secrets.map((s) => s.metadata?.name)).toEqual(['wh-tls']);
    expect(await liveCaBundle()).toBe(caBundle);
    const [ca, cb] = await Promise.all([get(a.port, '/healthz'), get(b.port, '/healthz')]);
    expect(ca.certFingerprint).toBe(fingerprint(tlsCert));
    expect(cb.certFingerprint).toBe(fingerprint(tlsCert));
    const leaf = new X509Certificate(tlsCert);
    expect(leaf.subjectAltName).toContain('DNS:wh.' + home + '.svc');
  });

  it('rotates the serving certificate during a steady stream of Job creations with zero failed admissions', async () => {
    const ns = await createTestNamespace(cluster.core, 'wh-load', OPT_IN, SELECT);
    namespaces.push(ns);
    const before = (await secretData()).tlsCert;
    let created = 0;
    let failed = 0;
    let injected = 0;
    const errors: string[] = [];
    let stop = false;
    let n = 0;
    const worker = async () => {
      while (!stop) {
        const name = `load-${n++}`;
        try {
          // Dry runs are admitted through the webhook like any create, but leave the
          // Job controller nothing to do: hundreds of real Jobs would keep it busy
          // for minutes and starve the test files that run after this one.
          const j = await cluster.batch.createNamespacedJob({ namespace: ns, body: job(name), dryRun: 'All' });
          created++;
          if (j.spec?.template.spec?.initContainers?.[0]?.name === 'jobharvest') injected++;
        } catch (e) {
          failed++;
          errors.push(String((e as { body?: string }).body ?? e).slice(0, 300));
        }
      }
    };
    const workers = [worker(), worker(), worker()];
    await new Promise((r) => setTimeout(r, 2000));
    const s = (await secretData()).secret;
    s.metadata!.annotations = { ...(s.metadata!.annotations ?? {}), 'jobharvest.io/rotate': 'leaf' };
    await cluster.core.replaceNamespacedSecret({ name: 'wh-tls', namespace: home, body: s });
    const after = await waitFor('the rotated leaf in the Secret', async () => {
      const t = (await secretData()).tlsCert;
      return t !== before ? t : undefined;
    }, { timeoutMs: 15_000 });
    await waitFor('both replicas to serve the new certificate', async () => {
      const [x, y] = await Promise.all([get(a.port, '/healthz'), get(b.port, '/healthz')]);
      return x.certFingerprint === fingerprint(after) && y.certFingerprint === fingerprint(after) ? true : undefined;
    }, { timeoutMs: 15_000 });
    await new Promise((r) => setTimeout(r, 2000));
    stop = true;
    await Promise.all(workers);
    console.log(`rotation under load: ${created} Jobs admitted, ${injected} injected, ${failed} failed`);
    expect(errors).toEqual([]);
    expect(failed).toBe(0);
    expect(created).toBeGreaterThan(20);
    expect(injected).toBe(created);
    expect((await secretData()).secret.metadata?.annotations?.['jobharvest.io/rotate']).toBeUndefined();
    expect(a.exited() || b.exited()).toBe(false);
  }, 60_000);

  it('repairs a caBundle reset to empty, without a restart', async () => {
    const cfg = await cluster.admission.readMutatingWebhookConfiguration({ name: CONFIG });
    cfg.webhooks![0]!.clientConfig.caBundle = undefined;
    await cluster.admission.replaceMutatingWebhookConfiguration({ name: CONFIG, body: cfg });
    expect(await liveCaBundle()).toBe('');
    const pids = [a.child.pid, b.child.pid];
    const { caBundle } = await secretData();
    await waitFor('the caBundle to be repaired', async () => ((await liveCaBundle()) === caBundle ? true : undefined), { timeoutMs: 15_000 });
    expect([a.child.pid, b.child.pid]).toEqual(pids);
    expect(a.exited() || b.exited()).toBe(false);
  });
});

describe('namespace configuration', () => {
  it('honours a namespace annotated after start-up within a second', async () => {
    const ns = await createTestNamespace(cluster.core, 'wh-late', {}, SELECT);
    namespaces.push(ns);
    const first = await cluster.batch.createNamespacedJob({ namespace: ns, body: job('before'), dryRun: 'All' });
    expect(first.spec?.template.spec?.initContainers).toBeUndefined();
    const current = await cluster.core.readNamespace({ name: ns });
    current.metadata!.annotations = { ...(current.metadata!.annotations ?? {}), ...OPT_IN };
    await cluster.core.replaceNamespace({ name: ns, body: current });
    const t0 = Date.now();
    await waitFor('a Job to be injected', async () => {
      const j = await cluster.batch.createNamespacedJob({ namespace: ns, body: job(`after-${Date.now()}`), dryRun: 'All' });
      return j.spec?.template.spec?.initContainers?.[0]?.name === 'jobharvest' ? true : undefined;
    }, { timeoutMs: 5000, intervalMs: 50 });
    const elapsed = Date.now() - t0;
    console.log(`late annotation honoured after ${elapsed} ms`);
    expect(elapsed).toBeLessThan(1000);
  });

  it('binds the log-reader ClusterRole on api-mode opt-in and removes the binding on opt-out', async () => {
    const ns = await createTestNamespace(cluster.core, 'wh-rbac', { ...OPT_IN, 'jobharvest.io/mode': 'api' }, SELECT);
    namespaces.push(ns);
    const rb = await waitFor('the RoleBinding', () => rbac.readNamespacedRoleBinding({ name: 'jobharvest-log-reader', namespace: ns }), { timeoutMs: 10_000 });
    expect(rb.roleRef).toMatchObject({ kind: 'ClusterRole', name: 'jobharvest-log-reader' });
    expect(rb.subjects).toEqual([expect.objectContaining({ kind: 'Group', name: `system:serviceaccounts:${ns}` })]);
    const current = await cluster.core.readNamespace({ name: ns });
    delete current.metadata!.annotations!['jobharvest.io/inject'];
    await cluster.core.replaceNamespace({ name: ns, body: current });
    await waitFor('the RoleBinding to be removed', async () => {
      try {
        await rbac.readNamespacedRoleBinding({ name: 'jobharvest-log-reader', namespace: ns });
        return undefined;
      } catch (e) {
        return (e as { code?: number }).code === 404 ? true : undefined;
      }
    }, { timeoutMs: 10_000 });
  });
});
