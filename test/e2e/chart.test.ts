/**
 * The Helm chart: `helm lint`, the schema's refusals, the rendered objects'
 * properties, and the API server's acceptance of every rendered object (real
 * creates against the test cluster), including whether the API server really
 * calls the webhook for the namespaces the selector should let through.
 */
import { AppsV1Api, type V1ClusterRole, type V1Deployment, type V1MutatingWebhookConfiguration, type V1PolicyRule, type V1Role } from '@kubernetes/client-node';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';
import { afterAll, describe, expect, it } from 'vitest';
import { SINKS } from '../../src/contract/env.ts';
import { MIN_KUBERNETES } from '../../src/contract/kubernetes.ts';
import { defaultConfig, parseConfig, type Config } from '../../src/core/config.ts';
import { CHART_DIR, loopbackWebhooks, one, render, runHelm, template, type K8sObject } from '../harness/chart/helm.ts';
import { useCluster } from '../harness/cluster/client.ts';
import { freePort } from '../support/ports.ts';

const cluster = useCluster();
const helm = cluster.info.helmPath;
const CERT_MANAGER_GROUP = 'cert-manager.io/';

const suffix = (): string => randomBytes(3).toString('hex');

/** Cluster-scoped objects and namespaces this file created, removed at the end whatever happens. */
const cleanup: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const undo of cleanup.reverse()) await undo().catch(() => undefined);
});

async function createNamespace(name: string, labels: Record<string, string> = {}): Promise<void> {
  await cluster.core.createNamespace({ body: { metadata: { name, labels } } });
  cleanup.push(() => cluster.core.deleteNamespace({ name }));
}

/** Creates every rendered object for real; cert-manager kinds have no CRDs here and are returned unapplied. */
async function apply(objects: K8sObject[]): Promise<K8sObject[]> {
  const skipped: K8sObject[] = [];
  for (const obj of objects) {
    if (obj.apiVersion.startsWith(CERT_MANAGER_GROUP)) {
      skipped.push(obj);
      continue;
    }
    if (obj.metadata.namespace === undefined) cleanup.push(() => cluster.objects.delete(obj));
    try {
      await cluster.objects.create(obj);
    } catch (err) {
      throw new Error(`the API server refused ${obj.kind} ${obj.metadata.name}: ${(err as Error).message}`, { cause: err });
    }
  }
  return skipped;
}

function configOf(objects: K8sObject[]): { raw: Record<string, unknown>; config: Config } {
  // The webhook's ConfigMap; the harvester's holds its destinations.
  const cm = objects.find((o) => o.kind === 'ConfigMap' && (o as unknown as { data?: Record<string, string> }).data?.['config.yaml'] !== undefined) as unknown as { data: Record<string, string> } | undefined;
  if (!cm) throw new Error('no ConfigMap with config.yaml');
  const text = cm.data['config.yaml'];
  if (text === undefined) throw new Error('the ConfigMap has no config.yaml');
  const raw = parseYaml(text) as Record<string, unknown>;
  return { raw, config: parseConfig(raw) };
}

function webhookOf(objects: K8sObject[]) {
  const mwc = one<V1MutatingWebhookConfiguration>(objects, 'MutatingWebhookConfiguration');
  expect(mwc.webhooks).toHaveLength(1);
  return { mwc, hook: mwc.webhooks![0]! };
}

function excludedNames(hook: ReturnType<typeof webhookOf>['hook']): string[] {
  const expr = hook.namespaceSelector?.matchExpressions?.find((e) => e.key === 'kubernetes.io/metadata.name');
  expect(expr?.operator).toBe('NotIn');
  return expr?.values ?? [];
}

/** The webhook's Deployment; the harvester has its own. */
function webhookDeployment(objects: K8sObject[]): V1Deployment & K8sObject {
  const found = objects.filter((o) => o.kind === 'Deployment' && (o as V1Deployment).spec?.selector?.matchLabels?.['app.kubernetes.io/component'] === 'webhook');
  if (found.length !== 1) throw new Error(`expected one webhook Deployment, rendered ${found.length}`);
  return found[0] as V1Deployment & K8sObject;
}

function harvesterDeployment(objects: K8sObject[]): V1Deployment & K8sObject {
  const found = objects.filter((o) => o.kind === 'Deployment' && (o as V1Deployment).spec?.selector?.matchLabels?.['app.kubernetes.io/component'] === 'harvester');
  if (found.length !== 1) throw new Error(`expected one harvester Deployment, rendered ${found.length}`);
  return found[0] as V1Deployment & K8sObject;
}

function argsOf(objects: K8sObject[]): string[] {
  const dep = webhookDeployment(objects);
  return dep.spec!.template.spec!.containers[0]!.args ?? [];
}

function rulesOf(role: V1ClusterRole | V1Role): V1PolicyRule[] {
  return role.rules ?? [];
}

describe('helm lint', () => {
  it.each([
    ['defaults', []],
    ['cert-manager', ['--set', 'certificates.mode=cert-manager']],
    ['provided', ['--set', 'certificates.mode=provided', '--set', 'certificates.provided.secretName=tls', '--set', 'certificates.provided.caBundle=Y2E=']],
    ['label selection', ['--set', 'namespaceSelection=label']],
  ])('passes --strict with %s', async (_name, args) => {
    const run = await runHelm(helm, ['lint', '--strict', CHART_DIR, ...args]);
    expect(run.stderr + run.stdout).toContain('1 chart(s) linted, 0 chart(s) failed');
    expect(run.code).toBe(0);
  });
});

describe('values.schema.json', () => {
  const base = { release: 'jh', namespace: 'jobharvest' };
  it.each<[string, object, RegExp]>([
    ['timeoutSeconds above 10', { webhook: { timeoutSeconds: 30 } }, /timeoutSeconds/],
    ['timeoutSeconds 0', { webhook: { timeoutSeconds: 0 } }, /timeoutSeconds/],
    ['an unknown failurePolicy', { webhook: { failurePolicy: 'Maybe' } }, /failurePolicy/],
    // Every Job of every namespace not excluded would depend on the webhook, opted in or not.
    ['failurePolicy Fail with annotation selection', { webhook: { failurePolicy: 'Fail' } }, /namespaceSelection/],
    ['an unknown sink type', { sink: { type: 'splunk' } }, /sink\/type|sink.type|type/],
    ['an unknown mode', { mode: 'hybrid' }, /mode/],
    ['credentials in the endpoint', { sink: { type: 'loki', endpoint: 'http://user:secret@loki:3100' } }, /endpoint/],
    ['an endpoint with another scheme', { sink: { type: 'loki', endpoint: 'ftp://loki:3100' } }, /endpoint/],
    ['drainSeconds 0', { drainSeconds: 0 }, /drainSeconds/],
    ['a raiseGracePeriod that is not a boolean', { raiseGracePeriod: 'always' }, /raiseGracePeriod/],
    ['a negative TTL', { ttlSecondsAfterFinished: -1 }, /ttlSecondsAfterFinished/],
    ['an unknown key', { sinks: { type: 'loki' } }, /sinks/],
    ['an unknown sink key', { sink: { password: 'x' } }, /password/],
    ['an unknown certificate mode', { certificates: { mode: 'manual' } }, /mode/],
    ['provided mode without a Secret', { certificates: { mode: 'provided', provided: { caBundle: 'Y2E=' } } }, /secretName|provided/],
    ['provided mode without a caBundle', { certificates: { mode: 'provided', provided: { secretName: 'tls' } } }, /caBundle|provided/],
    ['an invalid auth Secret name', { sink: { authSecret: 'Not_A_Name' } }, /authSecret/],
    ['an invalid previous signing key Secret name', { signing: { previousKeys: ['Old_Key'] } }, /previousKeys/],
    ['a previous signing key listed twice', { signing: { previousKeys: ['jh-old', 'jh-old'] } }, /previousKeys/],
    ['zero replicas', { webhook: { replicas: 0 } }, /replicas/],
    ['an image digest that is not sha256:<64 hex>', { image: { digest: 'latest' } }, /digest/],
    ['a sidecar quantity with spaces', { sidecar: { resources: { limits: { memory: '128 Mi' } } } }, /memory/],
    // An empty selector would select every namespace.
    ['a tenant mapping that selects no namespace', { tenants: [{ name: 'team-a', namespaceSelector: { matchLabels: {} } }] }, /tenants\/0/],
    ['a tenant mapping with an invalid Secret', { tenants: [{ name: 'team-a', namespaces: ['team-a'], queryAuthSecret: 'Not_A_Name' }] }, /queryAuthSecret/],
    ['a tenant mapping with an AccountID beyond uint32', { tenants: [{ name: 'team-a', namespaces: ['team-a'], accountID: 4294967296 }] }, /accountID/],
    ['a tenant mapping with an unknown key', { tenants: [{ name: 'team-a', namespaces: ['team-a'], endpoint: 'http://x' }] }, /endpoint/],
  ])('rejects %s at install', async (_name, values, where) => {
    const run = await template(helm, { ...base, values });
    expect(run.code).not.toBe(0);
    expect(run.stderr).toMatch(/schema/i);
    expect(run.stderr).toMatch(where);
  });

  it('accepts the defaults and a full set of valid values (the control for the refusals above)', async () => {
    expect((await template(helm, base)).code).toBe(0);
    expect((await template(helm, { ...base, values: { webhook: { failurePolicy: 'Fail' }, namespaceSelection: 'label' } })).code).toBe(0);
    expect((await template(helm, { ...base, values: fullValues })).code).toBe(0);
  });

  it('lists exactly the sink types the sidecar implements', () => {
    const schema = JSON.parse(readFileSync(`${CHART_DIR}/values.schema.json`, 'utf8')) as {
      properties: { sink: { properties: { type: { enum: string[] } } } };
    };
    expect([...schema.properties.sink.properties.type.enum].sort()).toEqual([...SINKS].sort());
  });

  it('refuses two tenant mappings of one name, and a namespace two mappings list by name', async () => {
    const twice = await template(helm, { ...base, values: { tenants: [{ name: 'team-a', namespaces: ['a'] }, { name: 'team-a', namespaces: ['b'] }] } });
    expect(twice.code).not.toBe(0);
    expect(twice.stderr).toContain('tenants: the name team-a is used twice');
    const listed = await template(helm, { ...base, values: { tenants: [{ name: 'team-a', namespaces: ['shared'] }, { name: 'team-b', namespaces: ['b', 'shared'] }] } });
    expect(listed.code).not.toBe(0);
    expect(listed.stderr).toContain('tenants: namespace shared is listed by both team-a and team-b');
  });

  it('refuses a Kubernetes release older than the oldest supported one, saying which it requires, and installs on that one', async () => {
    const oldest = `${MIN_KUBERNETES.major}.${MIN_KUBERNETES.minor}`;
    const below = `${MIN_KUBERNETES.major}.${MIN_KUBERNETES.minor - 1}.9`;
    for (const version of [below, '1.28.9']) {
      const run = await template(helm, { ...base, extraArgs: ['--kube-version', version] });
      expect(run.code).not.toBe(0);
      expect(run.stderr).toContain(`chart requires kubeVersion: >=${oldest}.0-0 which is incompatible with Kubernetes v${version}`);
    }
    expect((await template(helm, { ...base, extraArgs: ['--kube-version', `${oldest}.0`] })).code).toBe(0);
  });
});

// Every configuration key set to a value other than its default.
const fullValues = {
  image: { repository: 'registry.example/jobharvest', tag: '1.2.3', pullPolicy: 'Always' },
  mode: 'api',
  sink: {
    type: 'elasticsearch',
    endpoint: 'https://es.logging:9200',
    authSecret: 'es-credentials',
    tlsSecret: 'es-tls',
    headers: 'X-Team=data,X-Env=prod',
    compression: 'none' as const,
    gzip: false,
    esIndex: 'logs-jobs',
    otlpEncoding: 'json',
    lokiTenant: 'team-a',
    forwardTag: 'jobs.${namespace}',
  },
  ttlSecondsAfterFinished: 600,
  maxTtlSecondsAfterFinished: 86400,
  drainSeconds: 60,
  raiseGracePeriod: true,
  namespaceSelection: 'label',
  excludedNamespaces: ['batch-legacy', 'ci'],
  query: { type: 'elasticsearch', endpoint: 'https://search.logging:9200', authSecret: 'search-reader' },
  tenants: [
    { name: 'team-a', namespaces: ['team-a', 'team-a-ci'], authSecret: 'a-writer', tlsSecret: 'a-tls', queryAuthSecret: 'a-reader', lokiTenant: 'team-a', esIndex: 'logs-a', accountID: 4294967295, projectID: 0 },
    { name: 'team-b', namespaceSelector: { matchLabels: { 'example.com/team': 'b' } }, authSecret: 'b-writer' },
  ],
  logsUrlTemplate: 'https://grafana.example/explore?ns={namespace}&job={job}&from={from}&to={to}',
  ownedJobs: { ttlOwners: [{ group: 'example.com', kind: 'Pipeline' }], injectOwners: [{ group: 'jobset.x-k8s.io', kind: 'JobSet' }] },
  sidecar: {
    image: { repository: 'registry.example/jobharvest-sidecar', tag: '1.2.4' },
    imagePullPolicy: 'IfNotPresent',
    runAsUser: 10001,
    resources: { requests: { cpu: '20m', memory: '48Mi' }, limits: { cpu: '500m', memory: '256Mi' } },
    boundedResources: { cpu: '250m', memory: '128Mi' },
    stateSizeLimit: '128Mi',
    podLogsHostPath: '/var/lib/kubelet/pod-logs',
    multiline: { rules: ['python', 'java'], start: '^\\d{4}-', maxLines: 200, maxBytes: 65536, flushMs: 2000 },
    parse: { format: 'json', maxFields: 32, maxDepth: 3, original: 'always' },
    mask: { builtin: ['bearer', 'password'], patterns: ['sk_live_[0-9a-zA-Z]{24}'], replacement: '[REDACTED]' },
    carry: { labels: ['team', 'app.kubernetes.io/name'], annotations: ['example.com/owner'] },
    loki: { streamLabels: ['team'], maxMetadata: 0 },
  },
};

describe('the rendered configuration file', () => {
  it('is the webhook\'s own defaults when no value is set', async () => {
    const objects = await render(helm, { release: 'jh', namespace: 'jobharvest' });
    const { config } = configOf(objects);
    expect(config).toEqual({ ...defaultConfig(), webhookNamespace: 'jobharvest' });
  });

  it('carries every value onto its configuration key, and renders every key the code reads', async () => {
    const objects = await render(helm, { release: 'jh', namespace: 'batch-system', values: fullValues });
    const { raw, config } = configOf(objects);
    const expected: Config = {
      mode: 'api',
      sink: { ...fullValues.sink, type: 'elasticsearch', otlpEncoding: 'json' },
      ttlSecondsAfterFinished: 600,
      maxTtlSecondsAfterFinished: 86400,
      drainSeconds: 60,
      raiseGracePeriod: true,
      namespaceSelection: 'label',
      webhookNamespace: 'batch-system',
      excludedNamespaces: ['batch-legacy', 'ci'],
      query: fullValues.query as Config['query'],
      // Empty strings left out, 0 kept, the lists as given.
      tenants: [fullValues.tenants[0]!, { ...fullValues.tenants[1]!, namespaces: [] }] as Config['tenants'],
      logsUrlTemplate: fullValues.logsUrlTemplate,
      ownedJobs: fullValues.ownedJobs,
      sidecar: {
        image: 'registry.example/jobharvest-sidecar:1.2.4',
        imagePullPolicy: 'IfNotPresent',
        args: ['--max-semi-space-size=4', '--max-old-space-size=48', '--no-concurrent-recompilation', '/app/sidecar.mjs'],
        startedCommand: ['/nodejs/bin/node', '/app/sidecar.mjs', '--wait-started'],
        runAsUser: 10001,
        resources: fullValues.sidecar.resources,
        boundedResources: fullValues.sidecar.boundedResources,
        stateSizeLimit: '128Mi',
        podLogsHostPath: '/var/lib/kubelet/pod-logs',
        multiline: fullValues.sidecar.multiline as Config['sidecar']['multiline'],
        parse: fullValues.sidecar.parse as Config['sidecar']['parse'],
        mask: fullValues.sidecar.mask as Config['sidecar']['mask'],
        carry: fullValues.sidecar.carry,
        loki: fullValues.sidecar.loki,
      },
    };
    expect(config).toEqual(expected);
    // A key the code gains must be rendered by the chart too.
    const keys = (o: object): string[] => Object.keys(o).sort();
    expect(keys(raw)).toEqual(keys(defaultConfig()));
    expect(keys(raw.sink as object)).toEqual(keys(expected.sink));
    expect(keys(raw.query as object)).toEqual(keys(expected.query));
    expect(keys(raw.sidecar as object)).toEqual(keys(defaultConfig().sidecar));
    for (const group of ['multiline', 'parse', 'mask', 'carry', 'loki'] as const) {
      expect(keys((raw.sidecar as Record<string, object>)[group]!)).toEqual(keys(expected.sidecar[group]));
    }
  });

  it('gives the sidecar the webhook\'s image and pull policy unless set apart', async () => {
    const objects = await render(helm, {
      release: 'jh',
      namespace: 'jobharvest',
      values: { image: { repository: 'registry.example/jh', tag: '9.9.9', pullPolicy: 'Always' } },
    });
    const { config } = configOf(objects);
    expect(config.sidecar.image).toBe('registry.example/jh:9.9.9');
    expect(config.sidecar.imagePullPolicy).toBe('Always');
    expect(webhookDeployment(objects).spec!.template.spec!.containers[0]!.image).toBe('registry.example/jh:9.9.9');
  });
});

describe('docs/configuration.md, section Chart values', () => {
  // Maps whose entries are the user's own (labels, selectors, resources) count as one value.
  const WHOLE = new Set(['resources', 'nodeSelector', 'affinity', 'podAnnotations', 'podLabels', 'annotations', 'issuerRef']);
  const leaves = (o: Record<string, unknown>, prefix = ''): string[] =>
    Object.entries(o).flatMap(([k, v]) =>
      v !== null && typeof v === 'object' && !Array.isArray(v) && !WHOLE.has(k) ? leaves(v as Record<string, unknown>, `${prefix}${k}.`) : [`${prefix}${k}`],
    );
  const values = parseYaml(readFileSync(`${CHART_DIR}/values.yaml`, 'utf8')) as Record<string, unknown>;
  const doc = readFileSync(new URL('../../docs/configuration.md', import.meta.url), 'utf8');
  const section = doc.slice(doc.indexOf('## Chart values'), doc.indexOf('## Command line'));
  it.each(leaves(values))('documents the value %s', (key) => {
    expect(section).toContain(`\`${key}\``);
  });
});

describe('the sink examples of docs/sinks.md', () => {
  const examples = new URL('../../docs/examples/', import.meta.url);
  it.each([...SINKS])('has a values file for %s that installs and configures that sink', async (sink) => {
    const file = fileURLToPath(new URL(`${sink}.values.yaml`, examples));
    const values = parseYaml(readFileSync(file, 'utf8')) as object;
    const objects = await render(helm, { release: 'jh', namespace: 'jobharvest', values });
    expect(configOf(objects).config.sink.type).toBe(sink);
    expect(readFileSync(new URL('../../docs/sinks.md', import.meta.url), 'utf8')).toContain(`](examples/${sink}.values.yaml)`);
  });
});

describe('the rendered objects', () => {
  it('has the MutatingWebhookConfiguration the issue asks for', async () => {
    const objects = await render(helm, { release: 'jh', namespace: 'jobharvest', values: { excludedNamespaces: ['ci'] } });
    const { mwc, hook } = webhookOf(objects);
    expect(mwc.metadata?.name).toBe('jh-jobharvest');
    expect(hook.name).toBe('jobs.jobharvest.io');
    expect(hook.rules).toEqual([
      { apiGroups: ['batch'], apiVersions: ['v1'], resources: ['jobs'], operations: ['CREATE'], scope: 'Namespaced' },
    ]);
    expect(hook.failurePolicy).toBe('Ignore');
    expect(hook.timeoutSeconds).toBeLessThanOrEqual(10);
    expect(hook.reinvocationPolicy).toBe('IfNeeded');
    expect(hook.sideEffects).toBe('NoneOnDryRun');
    expect(hook.matchPolicy).toBe('Equivalent');
    expect(hook.admissionReviewVersions).toEqual(['v1']);
    expect(excludedNames(hook)).toEqual(['kube-system', 'kube-public', 'kube-node-lease', 'jobharvest', 'ci']);
    expect(hook.namespaceSelector?.matchExpressions).toContainEqual({ key: 'jobharvest.io/inject', operator: 'NotIn', values: ['disabled'] });
    expect(hook.namespaceSelector?.matchLabels).toBeUndefined();
    // auto mode: the webhook fills the caBundle; there is none to render on a first install.
    expect(hook.clientConfig.caBundle).toBeUndefined();
    // Objects the API server's validation refuses anyway are never sent.
    expect((hook as { matchConditions?: Array<{ name: string; expression: string }> }).matchConditions).toEqual([
      { name: 'pod-failure-policy-within-api-limits', expression: expect.stringMatching(/size\(object\.spec\.podFailurePolicy\.rules\) <= 20 .*size\(r\.onExitCodes\.values\) <= 255/) },
      { name: 'containers-within-bounds', expression: expect.stringMatching(/<= 10000$/) },
    ]);
    // The server's timeouts and connection cap follow the configuration's timeoutSeconds.
    expect(argsOf(objects)).toContain(`--timeout-seconds=${hook.timeoutSeconds}`);
    expect(webhookDeployment(objects).spec!.template.spec!.containers[0]!.env).toContainEqual({ name: 'NODE_OPTIONS', value: '--max-semi-space-size=4' });
    // The harvester's too, and its reconciles apart from its harvests, at the chart's defaults.
    const harvester = harvesterDeployment(objects).spec!.template.spec!.containers[0]!;
    expect(harvester.env).toContainEqual({ name: 'NODE_OPTIONS', value: '--max-semi-space-size=4' });
    expect(harvester.args).toEqual(expect.arrayContaining(['--concurrency=4', '--reconciles=16']));

    // The webhook's Service (the harvester's metrics Service is the other one).
    const svc = one<{ spec: { ports: Array<{ port: number; targetPort: string }>; selector: Record<string, string> } }>(objects, 'Service', 'jh-jobharvest');
    expect(hook.clientConfig.service).toEqual({ name: svc.metadata.name, namespace: 'jobharvest', path: '/mutate', port: svc.spec.ports[0]!.port });
    const dep = webhookDeployment(objects);
    expect(dep.spec!.template.metadata!.labels).toMatchObject(svc.spec.selector);
    expect(dep.spec!.template.spec!.containers[0]!.ports!.map((p) => p.name)).toContain(svc.spec.ports[0]!.targetPort);
  });

  it('switches to label-based opt-in and keeps the exclusions', async () => {
    const objects = await render(helm, { release: 'jh', namespace: 'jobharvest', values: { namespaceSelection: 'label' } });
    const { hook } = webhookOf(objects);
    expect(hook.namespaceSelector?.matchLabels).toEqual({ 'jobharvest.io/inject': 'enabled' });
    expect(excludedNames(hook)).toEqual(['kube-system', 'kube-public', 'kube-node-lease', 'jobharvest']);
    expect(configOf(objects).config.namespaceSelection).toBe('label');
  });

  it('runs the webhook as the issue asks: replicas, spread, probes, hardening, downward API', async () => {
    const objects = await render(helm, {
      release: 'jh',
      namespace: 'jobharvest',
      values: { webhook: { priorityClassName: 'system-cluster-critical', nodeSelector: { pool: 'infra' }, tolerations: [{ key: 'infra', operator: 'Exists' }] } },
    });
    const dep = webhookDeployment(objects);
    const pod = dep.spec!.template.spec!;
    const c = pod.containers[0]!;
    expect(dep.spec!.replicas).toBe(2);
    expect(pod.affinity?.podAntiAffinity?.preferredDuringSchedulingIgnoredDuringExecution?.[0]?.podAffinityTerm.topologyKey).toBe('kubernetes.io/hostname');
    expect(c.readinessProbe?.httpGet).toMatchObject({ path: '/readyz', scheme: 'HTTPS' });
    expect(c.livenessProbe?.httpGet).toMatchObject({ path: '/healthz', scheme: 'HTTPS' });
    expect(c.securityContext).toMatchObject({
      runAsNonRoot: true,
      runAsUser: 65532,
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
      capabilities: { drop: ['ALL'] },
      seccompProfile: { type: 'RuntimeDefault' },
    });
    expect(c.resources?.limits?.memory).toBeDefined();
    expect(c.env).toContainEqual({ name: 'POD_NAMESPACE', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } });
    expect(pod.priorityClassName).toBe('system-cluster-critical');
    // Without its token the webhook refuses to start rather than run standalone.
    expect(pod.automountServiceAccountToken).toBe(true);
    expect(harvesterDeployment(objects).spec!.template.spec!.automountServiceAccountToken).toBe(true);
    expect(pod.nodeSelector).toEqual({ pool: 'infra' });
    expect(pod.tolerations).toEqual([{ key: 'infra', operator: 'Exists' }]);
    expect(c.args?.slice(0, 2)).toEqual(['/app/jobharvest.mjs', 'webhook']);
    expect(c.args).toEqual(
      expect.arrayContaining([
        '--config=/etc/jobharvest/config.yaml',
        '--namespace=$(POD_NAMESPACE)',
        '--service-name=jh-jobharvest',
        '--cert-mode=auto',
        '--cert-secret=jh-jobharvest-tls',
        '--webhook-config-name=jh-jobharvest',
        '--log-reader-clusterrole=jh-jobharvest-log-reader',
      ]),
    );
    const pdb = one<{ spec: { minAvailable: number; selector: { matchLabels: Record<string, string> } } }>(objects, 'PodDisruptionBudget');
    expect(pdb.spec.minAvailable).toBe(1);
    expect(dep.spec!.template.metadata!.labels).toMatchObject(pdb.spec.selector.matchLabels);
  });

  it('keeps a replica serving through a rollout by default: surge first, minReadySeconds, a shutdown delay the grace period covers', async () => {
    const objects = await render(helm, { release: 'jh', namespace: 'jobharvest' });
    const dep = webhookDeployment(objects);
    expect(dep.spec!.replicas).toBe(2);
    expect(dep.spec!.strategy).toEqual({ type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } });
    expect(dep.spec!.minReadySeconds).toBe(5);
    expect(argsOf(objects)).toContain('--shutdown-delay-seconds=5');
    const hook = one<V1MutatingWebhookConfiguration>(objects, 'MutatingWebhookConfiguration').webhooks![0]!;
    expect(dep.spec!.template.spec!.terminationGracePeriodSeconds).toBeGreaterThanOrEqual(5 + hook.timeoutSeconds!);
    const short = await runHelm(helm, ['template', 'jh', CHART_DIR, '-n', 'jobharvest', '--set', 'webhook.terminationGracePeriodSeconds=8']);
    expect(short.code).not.toBe(0);
    expect(short.stderr).toMatch(/terminationGracePeriodSeconds must be at least webhook.shutdownDelaySeconds \+ webhook.timeoutSeconds/);
  });

  it('renders no signing key: two renders are identical, the webhook creates the key, and signing.existingSecret is mounted instead', async () => {
    const a = await render(helm, { release: 'jh', namespace: 'jobharvest' });
    const b = await render(helm, { release: 'jh', namespace: 'jobharvest' });
    expect(a.filter((o) => o.kind === 'Secret').map((o) => o.metadata.name)).toEqual([]);
    // A GitOps tool that renders on every sync sees no change to apply, and nothing rolls the pods.
    expect(JSON.stringify(b)).toBe(JSON.stringify(a));
    expect(argsOf(a)).toContain('--signing-secret=jh-jobharvest-signing');
    expect(argsOf(a).some((x) => x.startsWith('--signing-key-file'))).toBe(false);
    expect(harvesterDeployment(a).spec!.template.spec!.volumes).toContainEqual(expect.objectContaining({ name: 'signing', secret: expect.objectContaining({ secretName: 'jh-jobharvest-signing' }) }));

    const own = await render(helm, { release: 'jh', namespace: 'jobharvest', values: { signing: { existingSecret: 'vault-signing' } } });
    expect(argsOf(own)).toContain('--signing-key-file=/etc/jobharvest/signing/key');
    expect(argsOf(own).some((x) => x.startsWith('--signing-secret'))).toBe(false);
    expect(webhookDeployment(own).spec!.template.spec!.volumes).toContainEqual(expect.objectContaining({ name: 'signing', secret: expect.objectContaining({ secretName: 'vault-signing' }) }));
    expect(harvesterDeployment(own).spec!.template.spec!.volumes).toContainEqual(expect.objectContaining({ name: 'signing', secret: expect.objectContaining({ secretName: 'vault-signing' }) }));
    expect(own.filter((o) => o.metadata.name === 'jh-jobharvest-signing')).toEqual([]);
  });

  it('signing.previousKeys: mounted for the harvester alone, to verify with; the webhook never sees them; the list rolls the harvester', async () => {
    const base = await render(helm, { release: 'jh', namespace: 'jobharvest' });
    const rotated = await render(helm, { release: 'jh', namespace: 'jobharvest', values: { signing: { previousKeys: ['jh-signing-2026-06', 'jh-signing-2025-12'] } } });
    const h = harvesterDeployment(rotated).spec!.template;
    const args = h.spec!.containers[0]!.args ?? [];
    expect(args).toContain('--signing-key-file=/etc/jobharvest/signing/key');
    expect(args.filter((a) => a.startsWith('--previous-signing-key-file'))).toEqual([
      '--previous-signing-key-file=/etc/jobharvest/signing-previous/jh-signing-2026-06/key',
      '--previous-signing-key-file=/etc/jobharvest/signing-previous/jh-signing-2025-12/key',
    ]);
    expect(h.spec!.containers[0]!.volumeMounts).toContainEqual({ name: 'signing-previous', mountPath: '/etc/jobharvest/signing-previous', readOnly: true });
    expect(h.spec!.volumes!.find((v) => v.name === 'signing-previous')?.projected?.sources).toEqual([
      { secret: { name: 'jh-signing-2026-06', items: [{ key: 'key', path: 'jh-signing-2026-06/key' }] } },
      { secret: { name: 'jh-signing-2025-12', items: [{ key: 'key', path: 'jh-signing-2025-12/key' }] } },
    ]);
    // The current key still signs: the webhook's flags and volumes are those of a render without previous keys.
    expect(webhookDeployment(rotated).spec).toEqual(webhookDeployment(base).spec);
    // A key added or dropped rolls the harvester (it reads its keys at start); none listed, nothing mounted.
    const hb = harvesterDeployment(base).spec!.template;
    expect(h.metadata!.annotations!['checksum/signing-previous']).toMatch(/^[0-9a-f]{64}$/);
    expect(hb.metadata!.annotations!['checksum/signing-previous']).toBeUndefined();
    expect(hb.spec!.volumes!.map((v) => v.name)).not.toContain('signing-previous');
    expect((hb.spec!.containers[0]!.args ?? []).some((a) => a.startsWith('--previous-signing-key-file'))).toBe(false);
  });

  it('bounds with admission policies what RBAC cannot name, for these ServiceAccounts only', async () => {
    type Policy = { spec: { failurePolicy: string; matchConditions: Array<{ expression: string }>; matchConstraints: { resourceRules: Array<{ resources: string[]; operations: string[] }> }; validations: Array<{ message: string }> } };
    const objects = await render(helm, { release: 'jh', namespace: 'jobharvest' });
    const policies = objects.filter((o) => o.kind === 'ValidatingAdmissionPolicy').map((o) => o.metadata.name);
    expect(policies).toEqual(['jh-jobharvest-webhook-configuration', 'jh-jobharvest-log-reader-bindings', 'jh-jobharvest-harvester-writes']);
    const bindings = objects.filter((o) => o.kind === 'ValidatingAdmissionPolicyBinding') as Array<K8sObject & { spec: { policyName: string; validationActions: string[] } }>;
    expect(bindings.map((b) => [b.spec.policyName, b.spec.validationActions])).toEqual(policies.map((p) => [p, ['Deny']]));
    const who = (name: string) => one<Policy>(objects, 'ValidatingAdmissionPolicy', name).spec;
    expect(who('jh-jobharvest-webhook-configuration').matchConditions[0]!.expression).toBe("request.userInfo.username == 'system:serviceaccount:jobharvest:jh-jobharvest'");
    expect(who('jh-jobharvest-log-reader-bindings').matchConditions[0]!.expression).toBe("request.userInfo.username == 'system:serviceaccount:jobharvest:jh-jobharvest'");
    // The uninstall hook releases holds as the harvester does, within the same bounds.
    expect(who('jh-jobharvest-harvester-writes').matchConditions[0]!.expression).toBe("request.userInfo.username in ['system:serviceaccount:jobharvest:jh-jobharvest-harvester', 'system:serviceaccount:jobharvest:jh-jobharvest-uninstall']");
    for (const p of policies) expect(who(p).failurePolicy).toBe('Fail');
    expect(who('jh-jobharvest-webhook-configuration').validations.map((v) => v.message)).toEqual([
      'the webhook may update only its own MutatingWebhookConfiguration',
      'the webhook may change only the caBundle of its configuration',
    ]);
    expect(who('jh-jobharvest-log-reader-bindings').validations.map((v) => v.message)).toEqual([
      'the webhook never updates a RoleBinding',
      'the webhook binds only the log-reader ClusterRole, under its own names',
      'the log reader is bound to the namespace\'s own service accounts or to the harvester only',
      'the webhook binds only in namespaces opted in by their own annotation or label',
    ]);
    expect(who('jh-jobharvest-harvester-writes').validations.map((v) => v.message)).toEqual([
      'the harvester patches only Jobs the webhook injected, and Jobs it never saw in namespaces opted in by their own annotation or label',
      'the harvester changes only jobharvest.io/delivery, jobharvest.io/hold and jobharvest.io/logs-url among a Job\'s annotations',
      'the harvester changes no label of a Job',
      'the harvester never suspends a Job or changes its spec beyond ttlSecondsAfterFinished',
      'the harvester changes ttlSecondsAfterFinished only to raise it for a hold that records the original, and to put that original back',
      'the harvester reports only LogsShipped, LogsLost and InjectionMissed Events about Jobs',
      'the harvester writes only in namespaces opted in by their own annotation or label',
    ]);
    // Owner kinds put injected Jobs in namespaces not opted in themselves: the label rule bounds them there.
    const owners = await render(helm, { release: 'jh', namespace: 'jobharvest', values: { ownedJobs: { injectOwners: [{ group: 'jobset.x-k8s.io', kind: 'JobSet' }] } } });
    expect(one<Policy>(owners, 'ValidatingAdmissionPolicy', 'jh-jobharvest-harvester-writes').spec.validations.map((v) => v.message)).not.toContain('the harvester writes only in namespaces opted in by their own annotation or label');
    // Label selection: the opt-in the policy reads is the label.
    const byLabel = await render(helm, { release: 'jh', namespace: 'jobharvest', values: { namespaceSelection: 'label' } });
    expect(JSON.stringify(one<Policy>(byLabel, 'ValidatingAdmissionPolicy', 'jh-jobharvest-log-reader-bindings').spec.validations.at(-1))).toContain("labels[?'jobharvest.io/inject'].orValue('') == 'enabled'");
    // Only what exists is bounded; and the whole can be turned off for clusters before 1.30.
    const certManager = await render(helm, { release: 'jh', namespace: 'jobharvest', values: { certificates: { mode: 'cert-manager' }, harvester: { enabled: false }, webhook: { apiRbac: false } } });
    expect(certManager.filter((o) => o.kind.startsWith('ValidatingAdmissionPolicy'))).toEqual([]);
    const off = await render(helm, { release: 'jh', namespace: 'jobharvest', values: { admissionPolicy: { enabled: false } } });
    expect(off.filter((o) => o.kind.startsWith('ValidatingAdmissionPolicy'))).toEqual([]);
  });

  it('pins every image by digest when image.digest is set, the sidecar\'s too unless its image is set apart', async () => {
    const digest = `sha256:${'ab'.repeat(32)}`;
    const objects = await render(helm, { release: 'jh', namespace: 'jobharvest', values: { image: { repository: 'registry.example.com/jobharvest', tag: '0.1.0', digest } } });
    const pinned = `registry.example.com/jobharvest:0.1.0@${digest}`;
    expect(webhookDeployment(objects).spec!.template.spec!.containers[0]!.image).toBe(pinned);
    expect(harvesterDeployment(objects).spec!.template.spec!.containers[0]!.image).toBe(pinned);
    expect((configOf(objects).raw.sidecar as { image: string }).image).toBe(pinned);
    const apart = await render(helm, { release: 'jh', namespace: 'jobharvest', values: { image: { digest }, sidecar: { image: { tag: 'other' } } } });
    expect((configOf(apart).raw.sidecar as { image: string }).image).toBe('jobharvest:other');
    const own = `sha256:${'cd'.repeat(32)}`;
    const ownDigest = await render(helm, { release: 'jh', namespace: 'jobharvest', values: { sidecar: { image: { repository: 'sidecar', digest: own } } } });
    expect((configOf(ownDigest).raw.sidecar as { image: string }).image).toBe(`sidecar:0.2.0@${own}`);
    expect(webhookDeployment(ownDigest).spec!.template.spec!.containers[0]!.image).toBe('jobharvest:0.2.0');
  });

  it('has no PodDisruptionBudget for a single replica (it would block every drain)', async () => {
    const objects = await render(helm, { release: 'jh', namespace: 'jobharvest', values: { webhook: { replicas: 1 } } });
    expect(objects.filter((o) => o.kind === 'PodDisruptionBudget')).toEqual([]);
  });

  it('grants exactly the least-privilege RBAC of auto mode with api RBAC, and the harvester its own', async () => {
    const objects = await render(helm, { release: 'jh', namespace: 'jobharvest' });
    expect(rulesOf(one<V1ClusterRole>(objects, 'ClusterRole', 'jh-jobharvest'))).toEqual([
      { apiGroups: [''], resources: ['namespaces'], verbs: ['get', 'list', 'watch'] },
      { apiGroups: [''], resources: ['resourcequotas', 'limitranges'], verbs: ['list', 'watch'] },
      { apiGroups: ['admissionregistration.k8s.io'], resources: ['mutatingwebhookconfigurations'], resourceNames: ['jh-jobharvest'], verbs: ['get', 'update'] },
      // get and delete name the two bindings the reconciler keeps; create cannot be named, the admission policy bounds it.
      { apiGroups: ['rbac.authorization.k8s.io'], resources: ['rolebindings'], resourceNames: ['jh-jobharvest-log-reader', 'jh-jobharvest-log-reader-webhook'], verbs: ['get', 'delete'] },
      { apiGroups: ['rbac.authorization.k8s.io'], resources: ['rolebindings'], verbs: ['create'] },
      { apiGroups: ['rbac.authorization.k8s.io'], resources: ['clusterroles'], resourceNames: ['jh-jobharvest-log-reader'], verbs: ['bind'] },
    ]);
    // The harvester reads pods through the log reader, bound per opted-in namespace to its own account.
    expect(argsOf(objects)).toContain('--harvester-service-account=jh-jobharvest-harvester');
    // The webhook creates the signing key once (nothing is generated at render time) and reads back only that Secret.
    expect(argsOf(objects)).toContain('--signing-secret=jh-jobharvest-signing');
    expect(rulesOf(one<V1Role>(objects, 'Role', 'jh-jobharvest-signing'))).toEqual([
      { apiGroups: [''], resources: ['secrets'], verbs: ['create'] },
      { apiGroups: [''], resources: ['secrets'], resourceNames: ['jh-jobharvest-signing'], verbs: ['get'] },
    ]);
    expect(rulesOf(one<V1Role>(objects, 'Role', 'jh-jobharvest'))).toEqual([
      { apiGroups: [''], resources: ['secrets'], verbs: ['create'] },
      { apiGroups: [''], resources: ['secrets'], resourceNames: ['jh-jobharvest-tls'], verbs: ['get', 'update'] },
    ]);
    expect(rulesOf(one<V1ClusterRole>(objects, 'ClusterRole', 'jh-jobharvest-harvester'))).toEqual([
      { apiGroups: ['batch'], resources: ['jobs'], verbs: ['get', 'list', 'watch', 'patch'] },
      // Which namespaces opted in, to tell a Job that missed injection.
      { apiGroups: [''], resources: ['namespaces'], verbs: ['list', 'watch'] },
      { apiGroups: [''], resources: ['events'], verbs: ['create', 'list'] },
    ]);
    expect(rulesOf(one<V1Role>(objects, 'Role', 'jh-jobharvest-harvester'))).toEqual([
      { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['create'] },
      { apiGroups: ['coordination.k8s.io'], resources: ['leases'], resourceNames: ['jh-jobharvest-harvester'], verbs: ['get', 'update'] },
    ]);
    const h = harvesterDeployment(objects).spec!.template.spec!;
    expect(h.serviceAccountName).toBe('jh-jobharvest-harvester');
    expect(h.containers[0]!.args).toEqual(expect.arrayContaining(['/app/harvester.mjs', '--max-hold-seconds=86400', '--lease-seconds=15', '--concurrency=4', '--config=/etc/jobharvest/config.yaml']));
    // The webhook's own configuration, from the webhook's ConfigMap.
    expect(h.volumes).toContainEqual({ name: 'config', configMap: { name: 'jh-jobharvest' } });
    expect(h.containers[0]!.securityContext).toMatchObject({ readOnlyRootFilesystem: true, runAsNonRoot: true, allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } });
    expect(rulesOf(one<V1ClusterRole>(objects, 'ClusterRole', 'jh-jobharvest-log-reader'))).toEqual([
      { apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch'] },
      { apiGroups: [''], resources: ['pods/log'], verbs: ['get'] },
    ]);
  });

  it('gives the uninstall hook exactly the rights of its steps, as pre-delete hooks removed once it succeeded', async () => {
    const objects = await render(helm, { release: 'jh', namespace: 'jobharvest' });
    const hooks = objects.filter((o) => o.metadata.annotations?.['helm.sh/hook'] !== undefined);
    expect(hooks.map((o) => `${o.kind}/${o.metadata.name}`).sort()).toEqual(
      ['ClusterRole', 'ClusterRoleBinding', 'Job', 'Role', 'RoleBinding', 'ServiceAccount'].map((k) => `${k}/jh-jobharvest-uninstall`),
    );
    for (const o of hooks) {
      expect(o.metadata.annotations!['helm.sh/hook'], o.kind).toBe('pre-delete');
      expect(o.metadata.annotations!['helm.sh/hook-delete-policy'], o.kind).toBe('before-hook-creation,hook-succeeded');
      // The ServiceAccount and its RBAC exist before the Job starts.
      expect(Number(o.metadata.annotations!['helm.sh/hook-weight']), o.kind).toBe(o.kind === 'Job' ? 0 : -10);
    }
    expect(rulesOf(one<V1ClusterRole>(objects, 'ClusterRole', 'jh-jobharvest-uninstall'))).toEqual([
      { apiGroups: ['admissionregistration.k8s.io'], resources: ['mutatingwebhookconfigurations'], resourceNames: ['jh-jobharvest'], verbs: ['delete'] },
      { apiGroups: ['rbac.authorization.k8s.io'], resources: ['clusterrolebindings'], resourceNames: ['jh-jobharvest', 'jh-jobharvest-harvester'], verbs: ['delete'] },
      { apiGroups: ['batch'], resources: ['jobs'], verbs: ['list', 'get', 'patch'] },
      { apiGroups: [''], resources: ['namespaces'], verbs: ['list'] },
      { apiGroups: ['rbac.authorization.k8s.io'], resources: ['rolebindings'], resourceNames: ['jh-jobharvest-log-reader', 'jh-jobharvest-log-reader-webhook'], verbs: ['get', 'delete'] },
    ]);
    expect(rulesOf(one<V1Role>(objects, 'Role', 'jh-jobharvest-uninstall'))).toEqual([
      { apiGroups: ['rbac.authorization.k8s.io'], resources: ['rolebindings'], resourceNames: ['jh-jobharvest-harvester', 'jh-jobharvest', 'jh-jobharvest-signing'], verbs: ['delete'] },
      { apiGroups: [''], resources: ['secrets'], resourceNames: ['jh-jobharvest-tls', 'jh-jobharvest-signing'], verbs: ['get', 'delete'] },
      { apiGroups: ['coordination.k8s.io'], resources: ['leases'], resourceNames: ['jh-jobharvest-harvester'], verbs: ['delete'] },
    ]);
    const job = one<{ spec: { activeDeadlineSeconds: number; template: { spec: { serviceAccountName: string; containers: Array<{ args: string[]; securityContext: object }> } } } }>(objects, 'Job', 'jh-jobharvest-uninstall');
    expect(job.spec.activeDeadlineSeconds).toBe(180);
    expect(job.spec.template.spec.serviceAccountName).toBe('jh-jobharvest-uninstall');
    // The webhook configuration goes first; the signing key is mounted to verify the holds it releases.
    expect(job.spec.template.spec.containers[0]!.args.slice(0, 3)).toEqual(['/app/harvester.mjs', 'uninstall', '--webhook-configuration=jh-jobharvest']);
    expect(job.spec.template.spec.containers[0]!.args).toEqual(expect.arrayContaining(['--secret=jh-jobharvest-signing', '--lease=jh-jobharvest-harvester', '--log-reader-role=jh-jobharvest-log-reader', '--signing-key-file', '/etc/jobharvest/signing/key']));
    expect(job.spec.template.spec.containers[0]!.securityContext).toMatchObject({ readOnlyRootFilesystem: true, runAsNonRoot: true, allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } });

    // An operator's signing Secret, or one kept on purpose, is never deleted; provided certificates are the operator's too.
    const kept = await render(helm, { release: 'jh', namespace: 'jobharvest', values: { uninstall: { keepSigningSecret: true }, certificates: { mode: 'provided', provided: { secretName: 'mine', caBundle: 'Y2E=' } } } });
    const keptArgs = one<{ spec: { template: { spec: { containers: Array<{ args: string[] }> } } } }>(kept, 'Job', 'jh-jobharvest-uninstall').spec.template.spec.containers[0]!.args;
    expect(keptArgs.filter((a) => a.startsWith('--secret'))).toEqual([]);
    expect(rulesOf(one<V1Role>(kept, 'Role', 'jh-jobharvest-uninstall')).flatMap((r) => r.resources)).toEqual(['rolebindings', 'leases']);
    // And none at all when the hook is off.
    const off = await render(helm, { release: 'jh', namespace: 'jobharvest', values: { uninstall: { hook: false } } });
    expect(off.filter((o) => o.metadata.name === 'jh-jobharvest-uninstall')).toEqual([]);
  });

  it("approves the chart's own sink for the harvester, and the operator's destinations with their Secrets as files", async () => {
    const objects = await render(helm, {
      release: 'jh',
      namespace: 'jobharvest',
      values: {
        sink: { type: 'loki', endpoint: 'http://loki.logging:3100' },
        harvester: { sinkAuthSecret: 'loki-creds', destinations: [{ name: 'eu', sink: 'http', endpoint: 'https://logs.example.com/ingest', tlsSecret: 'eu-ca' }] },
      },
    });
    const cm = one<{ data: Record<string, string> }>(objects, 'ConfigMap', 'jh-jobharvest-harvester');
    expect(JSON.parse(cm.data['destinations.json']!)).toEqual([
      { name: 'sink', sink: 'loki', endpoint: 'http://loki.logging:3100', allow: ['cluster', 'private'], auth: { tokenFile: '/etc/jobharvest/destinations/sink/auth/token', usernameFile: '/etc/jobharvest/destinations/sink/auth/username', passwordFile: '/etc/jobharvest/destinations/sink/auth/password' } },
      { name: 'eu', sink: 'http', endpoint: 'https://logs.example.com/ingest', tls: { caFile: '/etc/jobharvest/destinations/eu/tls/ca.crt', certFile: '/etc/jobharvest/destinations/eu/tls/tls.crt', keyFile: '/etc/jobharvest/destinations/eu/tls/tls.key' } },
    ]);
    const vols = harvesterDeployment(objects).spec!.template.spec!.volumes!.map((v) => [v.name, v.secret?.secretName ?? v.configMap?.name]);
    expect(vols).toEqual(expect.arrayContaining([['dest-sink-auth', 'loki-creds'], ['dest-eu-tls', 'eu-ca'], ['destinations', 'jh-jobharvest-harvester']]));
  });

  it("gives the harvester the chart sink's codec, as the sidecars get it", async () => {
    const dests = async (sink: Record<string, unknown>) => {
      const objects = await render(helm, { release: 'jh', namespace: 'jobharvest', values: { sink: { type: 'otlp', endpoint: 'http://collector.logging:4318', ...sink } } });
      const cm = one<{ data: Record<string, string> }>(objects, 'ConfigMap', 'jh-jobharvest-harvester');
      return (JSON.parse(cm.data['destinations.json']!) as Array<{ compression?: string }>)[0]!.compression;
    };
    expect(await dests({})).toBeUndefined();
    expect(await dests({ compression: 'zstd' })).toBe('zstd');
    expect(await dests({ gzip: false })).toBe('none');
  });

  it('harvester egress: DNS, the API server and the destinations only, no ingress; refused without the API server', async () => {
    const apiServer = [{ ipBlock: { cidr: '10.0.0.10/32' } }];
    const destinations = [{ to: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'logging' } } }], ports: [{ port: 3100, protocol: 'TCP' }] }];
    const objects = await render(helm, { release: 'jh', namespace: 'jobharvest', values: { harvester: { networkPolicy: { enabled: true, apiServer, apiServerPort: 6443, destinations } } } });
    const np = one<{ spec: { podSelector: { matchLabels: Record<string, string> }; policyTypes: string[]; egress: object[]; ingress?: object[] } }>(objects, 'NetworkPolicy', 'jh-jobharvest-harvester');
    expect(np.spec.podSelector.matchLabels).toEqual(harvesterDeployment(objects).spec!.selector.matchLabels);
    expect(np.spec.policyTypes).toEqual(['Ingress', 'Egress']);
    expect(np.spec.ingress).toBeUndefined();
    // DNS to the cluster DNS pods only, not to every address on port 53.
    const clusterDns = [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'kube-system' } }, podSelector: { matchLabels: { 'k8s-app': 'kube-dns' } } }];
    expect(np.spec.egress).toEqual([
      { to: clusterDns, ports: [{ port: 53, protocol: 'UDP' }, { port: 53, protocol: 'TCP' }] },
      { to: apiServer, ports: [{ port: 6443, protocol: 'TCP' }] },
      ...destinations,
    ]);
    // Another resolver is named by the operator; an empty list is every address.
    const nodeLocal = [{ ipBlock: { cidr: '169.254.20.10/32' } }];
    const own = await render(helm, { release: 'jh', namespace: 'jobharvest', values: { harvester: { networkPolicy: { enabled: true, apiServer, dns: nodeLocal } } } });
    expect(one<{ spec: { egress: Array<{ to?: object[] }> } }>(own, 'NetworkPolicy', 'jh-jobharvest-harvester').spec.egress[0]!.to).toEqual(nodeLocal);
    const open = await render(helm, { release: 'jh', namespace: 'jobharvest', values: { harvester: { networkPolicy: { enabled: true, apiServer, dns: [] } } } });
    expect(one<{ spec: { egress: Array<{ to?: object[] }> } }>(open, 'NetworkPolicy', 'jh-jobharvest-harvester').spec.egress[0]!.to).toBeUndefined();
    await expect(render(helm, { release: 'jh', namespace: 'jobharvest', values: { harvester: { networkPolicy: { enabled: true } } } })).rejects.toThrow(/harvester.networkPolicy.apiServer/);
  });

  it('harvester.enabled=false: no harvester objects, and the webhook binds nothing for it', async () => {
    const objects = await render(helm, { release: 'jh', namespace: 'jobharvest', values: { harvester: { enabled: false } } });
    expect(objects.filter((o) => o.metadata.name.startsWith('jh-jobharvest-harvester'))).toEqual([]);
    expect(argsOf(objects).some((a) => a.startsWith('--harvester-service-account'))).toBe(false);
  });

  it('drops the certificate and RoleBinding rights when they are not used', async () => {
    const objects = await render(helm, {
      release: 'jh',
      namespace: 'jobharvest',
      values: { webhook: { apiRbac: false }, harvester: { enabled: false }, certificates: { mode: 'provided', provided: { secretName: 'my-tls', caBundle: 'Y2E=' } } },
    });
    expect(rulesOf(one<V1ClusterRole>(objects, 'ClusterRole', 'jh-jobharvest'))).toEqual([
      { apiGroups: [''], resources: ['namespaces'], verbs: ['get', 'list', 'watch'] },
      { apiGroups: [''], resources: ['resourcequotas', 'limitranges'], verbs: ['list', 'watch'] },
      // Read-only: readiness checks that the caBundle trusts the mounted certificate.
      { apiGroups: ['admissionregistration.k8s.io'], resources: ['mutatingwebhookconfigurations'], resourceNames: ['jh-jobharvest'], verbs: ['get'] },
    ]);
    // Only the signing key's: create once, read back that one Secret. (The uninstall hook's own Role is pinned by its own test.)
    expect(objects.filter((o) => (o.kind === 'Role' || o.kind === 'RoleBinding') && o.metadata.annotations?.['helm.sh/hook'] === undefined).map((o) => `${o.kind} ${o.metadata.name}`)).toEqual(['Role jh-jobharvest-signing', 'RoleBinding jh-jobharvest-signing']);
    expect(argsOf(objects)).toContain('--webhook-config-name=jh-jobharvest');
    expect(argsOf(objects)).toContain('--signing-secret=jh-jobharvest-signing');
    expect(argsOf(objects)).toContain('--no-api-rbac');
    expect(argsOf(objects).some((a) => a.startsWith('--log-reader-clusterrole'))).toBe(false);
  });

  it.each([
    ['rbac.yaml', 7],
    ['harvester.yaml', 4],
    ['uninstall-hook.yaml', 8],
  ])('comments every RBAC rule in %s with its reason', (file, least) => {
    const source = readFileSync(`${CHART_DIR}/templates/${file}`, 'utf8').split('\n');
    const ruleLines = source.map((line, i) => ({ line, i })).filter(({ line }) => /^\s*- apiGroups:/.test(line));
    expect(ruleLines.length).toBeGreaterThanOrEqual(least);
    for (const { i } of ruleLines) {
      let j = i - 1;
      while (j >= 0 && /^\s*\{\{-.*\}\}\s*$/.test(source[j]!)) j--;
      expect(source[j], `rule at ${file}:${i + 1}`).toMatch(/^\s*#/);
    }
  });

  it('wires cert-manager: Certificate for the Service names, CA injection, mounted files', async () => {
    const objects = await render(helm, { release: 'jh', namespace: 'jobharvest', values: { certificates: { mode: 'cert-manager' } } });
    const { mwc, hook } = webhookOf(objects);
    expect(mwc.metadata?.annotations?.['cert-manager.io/inject-ca-from']).toBe('jobharvest/jh-jobharvest');
    expect(hook.clientConfig.caBundle).toBeUndefined();
    const cert = one<{ spec: { secretName: string; dnsNames: string[]; issuerRef: { kind: string; name: string } } }>(objects, 'Certificate', 'jh-jobharvest');
    expect(cert.spec.dnsNames).toEqual([
      'jh-jobharvest',
      'jh-jobharvest.jobharvest',
      'jh-jobharvest.jobharvest.svc',
      'jh-jobharvest.jobharvest.svc.cluster.local',
    ]);
    const issuer = one(objects, 'Issuer');
    expect(cert.spec.issuerRef).toEqual({ kind: 'Issuer', name: issuer.metadata.name });
    const pod = webhookDeployment(objects).spec!.template.spec!;
    expect(pod.volumes?.find((v) => v.name === 'tls')?.secret?.secretName).toBe(cert.spec.secretName);
    expect(argsOf(objects)).toEqual(expect.arrayContaining(['--cert-mode=cert-manager', '--tls-cert=/etc/jobharvest/tls/tls.crt', '--tls-key=/etc/jobharvest/tls/tls.key']));
    // No Secret or webhook-configuration rights: cert-manager writes both, so the
    // webhook has no release-namespace Role; the harvester's holds only its Lease.
    expect(objects.filter((o) => o.kind === 'Role' && o.metadata.name === 'jh-jobharvest')).toEqual([]);
    expect(rulesOf(one<V1Role>(objects, 'Role', 'jh-jobharvest-harvester')).flatMap((r) => r.resources)).toEqual(['leases', 'leases']);
    const withIssuer = await render(helm, {
      release: 'jh',
      namespace: 'jobharvest',
      values: { certificates: { mode: 'cert-manager', certManager: { issuerRef: { kind: 'ClusterIssuer', name: 'corp-ca' } } } },
    });
    expect(withIssuer.filter((o) => o.kind === 'Issuer')).toEqual([]);
    expect(one<{ spec: { issuerRef: object } }>(withIssuer, 'Certificate').spec.issuerRef).toEqual({ kind: 'ClusterIssuer', name: 'corp-ca' });
  });
});

describe('the API server accepts the rendered chart', () => {
  const caBundle = Buffer.from(cluster.info.caPem).toString('base64');
  it.each<[string, object]>([
    ['auto certificates (defaults)', {}],
    ['cert-manager certificates', { certificates: { mode: 'cert-manager' } }],
    ['provided certificates', { certificates: { mode: 'provided', provided: { secretName: 'webhook-tls', caBundle } } }],
    ['label-based opt-in without api RBAC', { namespaceSelection: 'label', webhook: { apiRbac: false, replicas: 3 } }],
    ['every configuration value set', fullValues],
  ])('creates every object of %s', async (name, values) => {
    const release = `jh-${suffix()}`;
    const namespace = `chart-${suffix()}`;
    await createNamespace(namespace);
    const objects = await render(helm, { release, namespace, values });
    const skipped = await apply(objects);
    if (name.startsWith('cert-manager')) {
      // No cert-manager CRDs in the test cluster: its Issuer and Certificate are checked as rendered above.
      expect(skipped.map((o) => o.kind).sort()).toEqual(['Certificate', 'Issuer']);
    } else {
      expect(skipped).toEqual([]);
    }
    // What the API server stored, defaults included, still has the properties that matter.
    const stored = await cluster.admission.readMutatingWebhookConfiguration({ name: `${release}-jobharvest` });
    const hook = stored.webhooks![0]!;
    expect(hook).toMatchObject({
      name: 'jobs.jobharvest.io',
      sideEffects: 'NoneOnDryRun',
      reinvocationPolicy: 'IfNeeded',
      matchPolicy: 'Equivalent',
      failurePolicy: 'Ignore',
      admissionReviewVersions: ['v1'],
    });
    expect(hook.timeoutSeconds).toBeLessThanOrEqual(10);
    expect(excludedNames(hook)).toContain(namespace);
    const dep = await cluster.kc.makeApiClient(AppsV1Api).readNamespacedDeployment({ name: `${release}-jobharvest`, namespace });
    expect(dep.spec?.template.spec?.serviceAccountName).toBe(`${release}-jobharvest`);
    // Stored as rendered, so it names a Service this control plane cannot reach:
    // gone before any later test creates a Job it would be called for.
    await cluster.admission.deleteMutatingWebhookConfiguration({ name: `${release}-jobharvest` });
  });
});

describe('the API server calls the webhook only where the selector allows', () => {
  /** A dry-run Job create; with failurePolicy Fail and no webhook pod, a call shows up as a refusal. */
  async function jobCreate(namespace: string): Promise<'admitted' | string> {
    try {
      await cluster.batch.createNamespacedJob({
        namespace,
        dryRun: 'All',
        body: {
          metadata: { name: 'probe' },
          spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: 'registry.invalid/main:1' }] } } },
        },
      });
      return 'admitted';
    } catch (err) {
      return String((err as { body?: string }).body ?? (err as Error).message);
    }
  }

  it.each<[string, 'annotation' | 'label']>([
    ['annotation selection', 'annotation'],
    ['label selection', 'label'],
  ])('with %s', async (_name, selection) => {
    const release = `jh-${suffix()}`;
    const namespace = `chart-${suffix()}`;
    const plain = `plain-${suffix()}`;
    const labelled = `enabled-${suffix()}`;
    const disabled = `disabled-${suffix()}`;
    const excluded = `excluded-${suffix()}`;
    await createNamespace(namespace);
    await createNamespace(plain);
    await createNamespace(labelled, { 'jobharvest.io/inject': 'enabled' });
    await createNamespace(disabled, { 'jobharvest.io/inject': 'disabled' });
    await createNamespace(excluded);
    const objects = await render(helm, {
      release,
      namespace,
      values: { namespaceSelection: selection, excludedNamespaces: [excluded], webhook: { timeoutSeconds: 2 } },
    });
    // Only the webhook configuration is needed: without a running pod every call fails.
    // A closed loopback port: every call fails at once, and nothing leaves the machine.
    // Fail, set here rather than through the values (which refuse it with annotation
    // selection), makes each call visible as a refused Job.
    const mwc = loopbackWebhooks(one(objects, 'MutatingWebhookConfiguration'), `https://127.0.0.1:${await freePort()}`) as K8sObject & { webhooks: Array<{ failurePolicy: string }> };
    for (const w of mwc.webhooks) w.failurePolicy = 'Fail';
    await apply([mwc]);
    const mwcName = `${release}-jobharvest`;
    try {
      const called = (result: string): boolean => result !== 'admitted' && result.includes('jobs.jobharvest.io');
      // The configuration takes effect once the API server's informer has it.
      const deadline = Date.now() + 30_000;
      while (!called(await jobCreate(labelled))) {
        if (Date.now() > deadline) throw new Error('the API server never called the webhook for a labelled namespace');
        await new Promise((r) => setTimeout(r, 250));
      }
      expect(called(await jobCreate(plain))).toBe(selection === 'annotation');
      expect(await jobCreate(disabled)).toBe('admitted');
      expect(await jobCreate(excluded)).toBe('admitted');
      expect(await jobCreate(namespace)).toBe('admitted');
    } finally {
      await cluster.admission.deleteMutatingWebhookConfiguration({ name: mwcName });
    }
  });
});
