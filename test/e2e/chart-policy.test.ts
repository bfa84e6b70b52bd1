/**
 * Each of the chart's ServiceAccounts is refused, on the real API server, what
 * its docs say it never does: by RBAC where RBAC can name the object, by the
 * chart's ValidatingAdmissionPolicies where it cannot. The rendered RBAC and
 * policies are installed as they are; the API calls are made with a
 * TokenRequest token of each ServiceAccount. Each refusal is paired with the
 * same call done as the program does it, which is allowed: so every refusal is
 * the policy's doing, not a broken setup.
 */
import {
  AdmissionregistrationV1Api,
  BatchV1Api,
  CoreV1Api,
  KubeConfig,
  PatchStrategy,
  RbacAuthorizationV1Api,
  setHeaderOptions,
  type V1Job,
  type V1MutatingWebhookConfiguration,
  type V1RoleBinding,
} from '@kubernetes/client-node';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { render, type K8sObject } from '../harness/chart/helm.ts';
import { useCluster, waitFor } from '../harness/cluster/client.ts';

const cluster = useCluster();
const helm = cluster.info.helmPath;
const id = randomBytes(3).toString('hex');
const RELEASE = `pol${id}`;
const NS = `jh-pol-${id}`;
const FULL = `${RELEASE}-jobharvest`;
const READER = `${FULL}-log-reader`;
const OPTED = `pol-in-${id}`;
const PLAIN = `pol-out-${id}`;
const OTHER_MWC = `pol-other-${id}`;
const cleanup: Array<() => Promise<unknown>> = [];

function clientsAs(token: string) {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: cluster.info.server, caData: Buffer.from(cluster.info.caPem).toString('base64') }],
    users: [{ name: 'u', token }],
    contexts: [{ name: 'c', cluster: 'c', user: 'u' }],
    currentContext: 'c',
  });
  return { admission: kc.makeApiClient(AdmissionregistrationV1Api), rbac: kc.makeApiClient(RbacAuthorizationV1Api), batch: kc.makeApiClient(BatchV1Api), core: kc.makeApiClient(CoreV1Api) };
}
type Clients = ReturnType<typeof clientsAs>;
let webhook: Clients;
let harvester: Clients;

async function tokenFor(sa: string): Promise<string> {
  const t = await cluster.core.createNamespacedServiceAccountToken({ name: sa, namespace: NS, body: { spec: { audiences: [], expirationSeconds: 3600 } } });
  if (!t.status?.token) throw new Error(`no token issued for ${sa}`);
  return t.status.token;
}

/** The call's HTTP status and message: 2xx, or the refusal. */
async function outcome(call: () => Promise<unknown>): Promise<{ code: number; message: string }> {
  try {
    await call();
    return { code: 200, message: '' };
  } catch (err) {
    const e = err as { code?: number; body?: unknown; message?: string };
    return { code: e.code ?? 0, message: typeof e.body === 'string' ? e.body : JSON.stringify(e.body ?? e.message) };
  }
}

/** RBAC refuses with 403 Forbidden, an admission policy with 422 Invalid ("… is forbidden: ValidatingAdmissionPolicy … denied request"). */
const refused = (code: number) => code === 403 || code === 422;

const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);

function binding(name: string, namespace: string, subject: V1RoleBinding['subjects'], role = READER): V1RoleBinding {
  return { metadata: { name, namespace }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: role }, subjects: subject ?? [] };
}
const group = (ns: string) => [{ kind: 'Group', apiGroup: 'rbac.authorization.k8s.io', name: `system:serviceaccounts:${ns}` }];

function job(name: string, injected = true): V1Job {
  return {
    metadata: { name, labels: injected ? { 'jobharvest.io/injected': 'true' } : {}, annotations: { 'example.com/own': 'x' } },
    spec: {
      ttlSecondsAfterFinished: 600,
      template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: 'busybox:1.36', command: ['true'] }] } },
    },
  };
}

beforeAll(async () => {
  await cluster.core.createNamespace({ body: { metadata: { name: NS } } });
  cleanup.push(() => cluster.core.deleteNamespace({ name: NS }));
  await cluster.core.createNamespace({ body: { metadata: { name: OPTED, annotations: { 'jobharvest.io/inject': 'enabled' } } } });
  cleanup.push(() => cluster.core.deleteNamespace({ name: OPTED }));
  await cluster.core.createNamespace({ body: { metadata: { name: PLAIN } } });
  cleanup.push(() => cluster.core.deleteNamespace({ name: PLAIN }));

  const objects = await render(helm, { release: RELEASE, namespace: NS, values: {} });
  const kinds = ['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding', 'ValidatingAdmissionPolicy', 'ValidatingAdmissionPolicyBinding', 'MutatingWebhookConfiguration'];
  for (const o of objects.filter((x: K8sObject) => kinds.includes(x.kind))) {
    const obj = structuredClone(o) as K8sObject & { webhooks?: Array<Record<string, unknown>> };
    // Called for no namespace: the configuration is here only to be written to.
    if (obj.kind === 'MutatingWebhookConfiguration') for (const w of obj.webhooks ?? []) w.namespaceSelector = { matchLabels: { [`never-${id}`]: 'x' } };
    await cluster.objects.create(obj);
    if (obj.metadata.namespace === undefined) cleanup.push(() => cluster.objects.delete(obj));
  }
  const other: V1MutatingWebhookConfiguration = {
    metadata: { name: OTHER_MWC },
    webhooks: [
      {
        name: 'other.example.com',
        admissionReviewVersions: ['v1'],
        sideEffects: 'None',
        clientConfig: { url: 'https://127.0.0.1:9/x' },
        namespaceSelector: { matchLabels: { [`never-${id}`]: 'x' } },
        rules: [{ apiGroups: ['batch'], apiVersions: ['v1'], resources: ['jobs'], operations: ['CREATE'] }],
      },
    ],
  };
  await cluster.admission.createMutatingWebhookConfiguration({ body: other });
  cleanup.push(() => cluster.admission.deleteMutatingWebhookConfiguration({ name: OTHER_MWC }));

  webhook = clientsAs(await tokenFor(FULL));
  harvester = clientsAs(await tokenFor(`${FULL}-harvester`));
  for (const ns of [OPTED, PLAIN]) await cluster.batch.createNamespacedJob({ namespace: ns, body: job('injected') });
  await cluster.batch.createNamespacedJob({ namespace: OPTED, body: job('plain', false) });

  // Policies take effect once the API server's policy cache has them: wait until one refuses.
  await waitFor(
    'the admission policies to be in force',
    async () => (refused((await outcome(() => webhook.rbac.createNamespacedRoleBinding({ namespace: PLAIN, body: binding(READER, PLAIN, group(PLAIN)), dryRun: 'All' }))).code) ? true : undefined),
    { timeoutMs: 30_000, intervalMs: 250 },
  );
}, 120_000);

afterAll(async () => {
  for (const undo of cleanup.reverse()) await undo().catch(() => undefined);
});

describe("the webhook's ServiceAccount", () => {
  it("changes its own configuration's caBundle, and nothing else in it", async () => {
    const own = await cluster.admission.readMutatingWebhookConfiguration({ name: FULL });
    const withCa = structuredClone(own);
    withCa.webhooks![0]!.clientConfig.caBundle = Buffer.from('-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n').toString('base64');
    expect((await outcome(() => webhook.admission.replaceMutatingWebhookConfiguration({ name: FULL, body: withCa, dryRun: 'All' }))).code).toBe(200);

    const wider = structuredClone(own);
    wider.webhooks![0]!.rules = [{ apiGroups: ['*'], apiVersions: ['*'], resources: ['*'], operations: ['*'] }];
    const refusedRules = await outcome(() => webhook.admission.replaceMutatingWebhookConfiguration({ name: FULL, body: wider, dryRun: 'All' }));
    expect(refused(refusedRules.code)).toBe(true);
    expect(refusedRules.message).toMatch(/only the caBundle/);

    const failing = structuredClone(own);
    failing.webhooks![0]!.failurePolicy = own.webhooks![0]!.failurePolicy === 'Fail' ? 'Ignore' : 'Fail';
    expect(refused((await outcome(() => webhook.admission.replaceMutatingWebhookConfiguration({ name: FULL, body: failing, dryRun: 'All' }))).code)).toBe(true);
  });

  it('updates no other webhook configuration', async () => {
    const other = await cluster.admission.readMutatingWebhookConfiguration({ name: OTHER_MWC });
    other.webhooks![0]!.clientConfig.caBundle = Buffer.from('x').toString('base64');
    expect(refused((await outcome(() => webhook.admission.replaceMutatingWebhookConfiguration({ name: OTHER_MWC, body: other, dryRun: 'All' }))).code)).toBe(true);
    expect(refused((await outcome(() => webhook.admission.deleteMutatingWebhookConfiguration({ name: FULL, dryRun: 'All' }))).code)).toBe(true);
  });

  it('binds the log reader in an opted-in namespace, and in no namespace that is not opted in', async () => {
    expect((await outcome(() => webhook.rbac.createNamespacedRoleBinding({ namespace: OPTED, body: binding(READER, OPTED, group(OPTED)), dryRun: 'All' }))).code).toBe(200);
    const harvesterSubject = [{ kind: 'ServiceAccount', name: `${FULL}-harvester`, namespace: NS }];
    expect((await outcome(() => webhook.rbac.createNamespacedRoleBinding({ namespace: OPTED, body: binding(`${READER}-webhook`, OPTED, harvesterSubject), dryRun: 'All' }))).code).toBe(200);
    const denied = await outcome(() => webhook.rbac.createNamespacedRoleBinding({ namespace: PLAIN, body: binding(READER, PLAIN, group(PLAIN)), dryRun: 'All' }));
    expect(refused(denied.code)).toBe(true);
    expect(denied.message).toMatch(/opted in/);
  });

  it('binds nothing but the log reader, under its own names, to the namespace or the harvester', async () => {
    const cases: Array<[string, V1RoleBinding]> = [
      ['another name', binding('wide-open', OPTED, group(OPTED))],
      ['another namespace\'s accounts', binding(READER, OPTED, group('kube-system'))],
      ['everyone authenticated', binding(READER, OPTED, [{ kind: 'Group', apiGroup: 'rbac.authorization.k8s.io', name: 'system:authenticated' }])],
      ['a chosen service account', binding(`${READER}-webhook`, OPTED, [{ kind: 'ServiceAccount', name: 'default', namespace: OPTED }])],
    ];
    for (const [what, body] of cases) {
      expect(refused((await outcome(() => webhook.rbac.createNamespacedRoleBinding({ namespace: OPTED, body, dryRun: 'All' }))).code), what).toBe(true);
    }
    // get and delete name the two bindings it keeps.
    expect(refused((await outcome(() => webhook.rbac.readNamespacedRoleBinding({ name: 'someone-elses', namespace: OPTED }))).code)).toBe(true);
    expect(refused((await outcome(() => webhook.rbac.deleteNamespacedRoleBinding({ name: 'someone-elses', namespace: OPTED }))).code)).toBe(true);
  });
});

describe("the harvester's ServiceAccount", () => {
  const patch = (c: Clients, namespace: string, name: string, body: object) => outcome(() => c.batch.patchNamespacedJob({ name, namespace, body, dryRun: 'All' }, mergePatch));

  it("writes jobharvest's annotations on an injected Job of an opted-in namespace, and no other annotation or label", async () => {
    expect((await patch(harvester, OPTED, 'injected', { metadata: { annotations: { 'jobharvest.io/delivery': '{"x":1}' } } })).code).toBe(200);
    expect(refused((await patch(harvester, OPTED, 'injected', { metadata: { annotations: { 'example.com/own': 'changed' } } })).code)).toBe(true);
    expect(refused((await patch(harvester, OPTED, 'injected', { metadata: { annotations: { 'example.com/own': null } } })).code)).toBe(true);
    expect(refused((await patch(harvester, OPTED, 'injected', { metadata: { labels: { 'jobharvest.io/injected': null } } })).code)).toBe(true);
  });

  it('patches no Job outside an opted-in namespace, and of those the webhook did not label only one it never saw (a missed injection)', async () => {
    const record = { metadata: { annotations: { 'jobharvest.io/delivery': '{"x":1}' } } };
    const outside = await patch(harvester, PLAIN, 'injected', record);
    expect(refused(outside.code)).toBe(true);
    expect(outside.message).toMatch(/opted in/);
    // No label and no status, in a namespace opted in itself: the webhook never saw it, and its record may be written.
    expect((await patch(harvester, OPTED, 'plain', record)).code).toBe(200);
    // A status says the webhook saw it (or a tenant wrote one): without the label it is not the harvester's to write.
    const seen = job('seen', false);
    await cluster.batch.createNamespacedJob({ namespace: OPTED, body: { ...seen, metadata: { ...seen.metadata, annotations: { ...seen.metadata!.annotations, 'jobharvest.io/status': '{}' } } } });
    expect(refused((await patch(harvester, OPTED, 'seen', record)).code)).toBe(true);
    // Neither label nor status, in a namespace not opted in: refused.
    await cluster.batch.createNamespacedJob({ namespace: PLAIN, body: job('plain', false) });
    expect(refused((await patch(harvester, PLAIN, 'plain', record)).code)).toBe(true);
  });

  it("never lowers, removes or sets a Job's TTL beyond a hold, and never suspends it", async () => {
    expect(refused((await patch(harvester, OPTED, 'injected', { spec: { ttlSecondsAfterFinished: 0 } })).code)).toBe(true);
    expect(refused((await patch(harvester, OPTED, 'injected', { spec: { ttlSecondsAfterFinished: null } })).code)).toBe(true);
    expect(refused((await patch(harvester, OPTED, 'injected', { spec: { ttlSecondsAfterFinished: 9000 } })).code)).toBe(true);
    expect(refused((await patch(harvester, OPTED, 'injected', { spec: { suspend: true } })).code)).toBe(true);
    expect(refused((await patch(harvester, OPTED, 'injected', { spec: { activeDeadlineSeconds: 1 } })).code)).toBe(true);
    // A hold that records the original TTL may raise it; one that lies about it may not.
    const hold = (original: number) => `{"originalTtl":${original},"since":"2026-01-01T00:00:00.000Z","maxHoldSeconds":3600,"sig":"x"}`;
    expect((await patch(harvester, OPTED, 'injected', { metadata: { annotations: { 'jobharvest.io/hold': hold(600) } }, spec: { ttlSecondsAfterFinished: 9000 } })).code).toBe(200);
    expect(refused((await patch(harvester, OPTED, 'injected', { metadata: { annotations: { 'jobharvest.io/hold': hold(0) } }, spec: { ttlSecondsAfterFinished: 9000 } })).code)).toBe(true);
  });

  it('puts back the original TTL a hold recorded, and no other', async () => {
    const hold = '{"originalTtl":600,"since":"2026-01-01T00:00:00.000Z","maxHoldSeconds":3600,"sig":"x"}';
    await cluster.batch.createNamespacedJob({ namespace: OPTED, body: { ...job('held'), metadata: { ...job('held').metadata, annotations: { 'jobharvest.io/hold': hold } }, spec: { ...job('held').spec!, ttlSecondsAfterFinished: 9000 } } });
    const release = (ttl: number) => patch(harvester, OPTED, 'held', { metadata: { annotations: { 'jobharvest.io/hold': null, 'jobharvest.io/delivery': '{"x":1}' } }, spec: { ttlSecondsAfterFinished: ttl } });
    expect((await release(600)).code).toBe(200);
    expect(refused((await release(0)).code)).toBe(true);
  });

  it('creates only its own Events about Jobs, in opted-in namespaces', async () => {
    const event = (namespace: string, reason: string, kind = 'Job') => ({
      metadata: { generateName: 'jobharvest-', namespace },
      involvedObject: { apiVersion: kind === 'Job' ? 'batch/v1' : 'v1', kind, name: 'injected', namespace },
      reason,
      message: 'm',
      type: 'Normal',
    });
    expect((await outcome(() => harvester.core.createNamespacedEvent({ namespace: OPTED, body: event(OPTED, 'LogsShipped'), dryRun: 'All' }))).code).toBe(200);
    expect((await outcome(() => harvester.core.createNamespacedEvent({ namespace: OPTED, body: event(OPTED, 'InjectionMissed'), dryRun: 'All' }))).code).toBe(200);
    expect(refused((await outcome(() => harvester.core.createNamespacedEvent({ namespace: OPTED, body: event(OPTED, 'Killing', 'Pod'), dryRun: 'All' }))).code)).toBe(true);
    expect(refused((await outcome(() => harvester.core.createNamespacedEvent({ namespace: OPTED, body: event(OPTED, 'BackoffLimitExceeded'), dryRun: 'All' }))).code)).toBe(true);
    expect(refused((await outcome(() => harvester.core.createNamespacedEvent({ namespace: PLAIN, body: event(PLAIN, 'LogsShipped'), dryRun: 'All' }))).code)).toBe(true);
  });
});
