/**
 * The chart's optional NetworkPolicy for the webhook (webhook.networkPolicy):
 * absent by default, rendered from the configured peers when enabled, refused
 * when it would cut the API server off, and accepted by the real API server.
 * This control plane has no network plugin, so enforcement itself is not
 * tested here: what is checked is that the policy says what docs/security.md
 * says it does.
 */
import type { V1Deployment, V1NetworkPolicy, V1NetworkPolicyPeer } from '@kubernetes/client-node';
import { request } from 'node:https';
import { afterAll, describe, expect, it } from 'vitest';
import { CHART_DIR, one, render, runHelm, template, type K8sObject } from '../harness/chart/helm.ts';
import { createTestNamespace, useCluster } from '../harness/cluster/client.ts';

const cluster = useCluster();
const helm = cluster.info.helmPath;
const base = { release: 'jh', namespace: 'jobharvest' };

const API_SERVER: V1NetworkPolicyPeer[] = [
  { ipBlock: { cidr: '10.20.0.0/24', except: ['10.20.0.128/25'] } },
  { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'kube-system' } }, podSelector: { matchLabels: { 'k8s-app': 'konnectivity-agent' } } },
];
const SCRAPERS: V1NetworkPolicyPeer[] = [
  {
    namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } },
    podSelector: { matchExpressions: [{ key: 'app.kubernetes.io/name', operator: 'In', values: ['prometheus', 'vmagent'] }] },
  },
];

const policies = (objects: K8sObject[]) => objects.filter((o) => o.kind === 'NetworkPolicy');

/**
 * Raw JSON to and from the API server. The typed client maps a NetworkPolicy's
 * `from` to its own `_from` field and silently drops a plain `from`, which
 * would turn the policy into one that admits everybody.
 */
function api(method: 'GET' | 'POST', path: string, body?: unknown): Promise<{ status: number; json: any }> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${cluster.info.server}${path}`,
      { method, ca: cluster.info.caPem, headers: { Authorization: `Bearer ${cluster.info.token}`, 'Content-Type': 'application/json' } },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(text) }));
      },
    );
    req.on('error', reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}
const policyPath = (ns: string, name = '') => `/apis/networking.k8s.io/v1/namespaces/${ns}/networkpolicies${name ? `/${name}` : ''}`;

const namespaces: string[] = [];
afterAll(async () => {
  for (const name of namespaces) await cluster.core.deleteNamespace({ name }).catch(() => undefined);
});

describe('webhook.networkPolicy', () => {
  it('renders no NetworkPolicy by default', async () => {
    const objects = await render(helm, base);
    expect(objects.length).toBeGreaterThan(0);
    expect(policies(objects)).toEqual([]);
  });

  it('renders no NetworkPolicy when disabled, whatever peers are listed', async () => {
    const objects = await render(helm, { ...base, values: { webhook: { networkPolicy: { enabled: false, apiServer: API_SERVER, metrics: SCRAPERS } } } });
    expect(policies(objects)).toEqual([]);
  });

  it('admits the API server peers and the metrics scrapers to the one HTTPS port, and selects exactly the webhook pods', async () => {
    const objects = await render(helm, {
      ...base,
      values: { webhook: { port: 9443, podLabels: { team: 'platform' }, networkPolicy: { enabled: true, apiServer: API_SERVER, metrics: SCRAPERS } } },
    });
    const np = one<V1NetworkPolicy>(objects, 'NetworkPolicy');
    const dep = one<V1Deployment>(objects, 'Deployment', 'jh-jobharvest');
    expect(np.metadata.name).toBe(dep.metadata!.name);
    expect(np.metadata.namespace).toBe('jobharvest');
    // The Deployment's own selector, so the policy neither misses a replica nor catches other pods.
    expect(np.spec!.podSelector).toEqual({ matchLabels: dep.spec!.selector.matchLabels });
    expect(dep.spec!.template.metadata!.labels).toMatchObject(np.spec!.podSelector!.matchLabels!);
    expect(np.spec!.policyTypes).toEqual(['Ingress']);
    expect(np.spec!.egress).toBeUndefined();

    // /mutate and /metrics are one HTTPS port of one container: the policy can only admit to that port.
    const container = dep.spec!.template.spec!.containers[0]!;
    expect(container.ports).toEqual([{ name: 'https', containerPort: 9443, protocol: 'TCP' }]);
    expect(container.readinessProbe?.httpGet?.port).toBe('https');
    expect(np.spec!.ingress).toEqual([
      { from: API_SERVER, ports: [{ port: 9443, protocol: 'TCP' }] },
      { from: SCRAPERS, ports: [{ port: 9443, protocol: 'TCP' }] },
    ]);
  });

  it('has a single ingress rule when no metrics scraper is listed: nothing else may reach /metrics', async () => {
    const objects = await render(helm, { ...base, values: { webhook: { networkPolicy: { enabled: true, apiServer: [API_SERVER[0]] } } } });
    const np = one<V1NetworkPolicy>(objects, 'NetworkPolicy');
    expect(np.spec!.ingress).toEqual([{ from: [API_SERVER[0]], ports: [{ port: 8443, protocol: 'TCP' }] }]);
  });

  it('refuses to render a policy that names no API server source', async () => {
    for (const networkPolicy of [{ enabled: true }, { enabled: true, apiServer: [], metrics: SCRAPERS }]) {
      const run = await template(helm, { ...base, values: { webhook: { networkPolicy } } });
      expect(run.code, JSON.stringify(networkPolicy)).not.toBe(0);
      expect(run.stderr).toContain('webhook.networkPolicy.apiServer must list');
    }
  });

  it.each<[string, unknown, RegExp]>([
    ['an unknown key', { enabled: true, apiServer: API_SERVER, scrapers: [] }, /scrapers/],
    ['a peer with an unknown field', { enabled: true, apiServer: [{ ipBlok: { cidr: '10.0.0.0/8' } }] }, /ipBlok/],
    ['an empty peer', { enabled: true, apiServer: [{}] }, /apiServer/],
    ['an ipBlock without a cidr', { enabled: true, apiServer: [{ ipBlock: { except: ['10.0.0.0/9'] } }] }, /cidr/],
    ['a selector operator Kubernetes does not have', { enabled: true, apiServer: API_SERVER, metrics: [{ podSelector: { matchExpressions: [{ key: 'a', operator: 'Equals' }] } }] }, /operator/],
    ['enabled as a string', { enabled: 'sometimes', apiServer: API_SERVER }, /enabled/],
  ])('values.schema.json rejects %s', async (_name, networkPolicy, where) => {
    const run = await template(helm, { ...base, values: { webhook: { networkPolicy } } });
    expect(run.code).not.toBe(0);
    expect(run.stderr).toMatch(/schema/i);
    expect(run.stderr).toMatch(where);
  });

  it('passes helm lint --strict when enabled', async () => {
    const run = await runHelm(helm, [
      'lint',
      '--strict',
      CHART_DIR,
      '--set',
      'webhook.networkPolicy.enabled=true',
      '--set',
      'webhook.networkPolicy.apiServer[0].ipBlock.cidr=192.0.2.10/32',
    ]);
    expect(run.stderr + run.stdout).toContain('1 chart(s) linted, 0 chart(s) failed');
    expect(run.code).toBe(0);
  });

  it('is accepted by the API server as rendered, and reads back unchanged', async () => {
    const ns = await createTestNamespace(cluster.core, 'netpol');
    namespaces.push(ns);
    const objects = await render(helm, { release: 'jh', namespace: ns, values: { webhook: { networkPolicy: { enabled: true, apiServer: API_SERVER, metrics: SCRAPERS } } } });
    const np = one<V1NetworkPolicy>(objects, 'NetworkPolicy');
    const created = await api('POST', policyPath(ns), np);
    expect(created.status, JSON.stringify(created.json)).toBe(201);
    const stored = (await api('GET', policyPath(ns, np.metadata.name))).json as V1NetworkPolicy;
    expect(stored.spec?.podSelector).toEqual(np.spec!.podSelector);
    expect(stored.spec?.policyTypes).toEqual(['Ingress']);
    expect(stored.spec?.ingress).toEqual(np.spec!.ingress);
  });

  it('is refused by the API server with an invalid CIDR (the schema leaves address syntax to Kubernetes)', async () => {
    const ns = await createTestNamespace(cluster.core, 'netpol-bad');
    namespaces.push(ns);
    const objects = await render(helm, { release: 'jh', namespace: ns, values: { webhook: { networkPolicy: { enabled: true, apiServer: [{ ipBlock: { cidr: '10.0.0.300/24' } }] } } } });
    const refused = await api('POST', policyPath(ns), one(objects, 'NetworkPolicy'));
    expect(refused.status).toBe(422);
    expect(refused.json.message).toContain('10.0.0.300/24');
  });
});
