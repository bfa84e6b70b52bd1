import { afterEach, describe, expect, it } from 'vitest';
import { resolve, type ClusterView, type LogsFlags } from '../../src/cli/logs.ts';
import { readChartConfig } from '../../src/cli/logs/cluster.ts';
import { chooseRelease, releasesOf, type ConfigMapLike, type WebhookConfigurationLike } from '../../src/cli/logs/release.ts';
import { parseConfig } from '../../src/core/config.ts';

const helm = (release: string, namespace: string) => ({ 'meta.helm.sh/release-name': release, 'meta.helm.sh/release-namespace': namespace });

function mwc(name: string, service: { name: string; namespace: string } | undefined, annotations: Record<string, string> = helm(name, service?.namespace ?? ''), labels: Record<string, string> = {}): WebhookConfigurationLike {
  return { metadata: { name, annotations, labels }, webhooks: [{ name: 'jobs.jobharvest.io', clientConfig: service ? { service } : {} }] };
}

function configMap(name: string, namespace: string, config: string, annotations: Record<string, string>, labels: Record<string, string> = { 'app.kubernetes.io/name': 'jobharvest' }): ConfigMapLike {
  return { metadata: { name, namespace, annotations, labels }, data: { 'config.yaml': config } };
}

const OPERATOR_CONFIG = 'sink:\n  type: loki\n  endpoint: http://loki.logging:3100/loki/api/v1/push\n';
const TENANT_CONFIG = 'sink:\n  type: loki\n  endpoint: http://evil.team-a:3100/loki/api/v1/push\nquery:\n  authSecret: team-a-sa-token\n';

/** A cluster in fakes: webhook configurations, and ConfigMaps by namespace/name; records every ConfigMap read. */
function cluster(configurations: WebhookConfigurationLike[], configMaps: ConfigMapLike[], listError?: { code: number }) {
  const reads: string[] = [];
  return {
    reads,
    list: async () => {
      if (listError) throw listError;
      return { items: configurations };
    },
    read: async (name: string, namespace: string) => {
      reads.push(`${namespace}/${name}`);
      const cm = configMaps.find((c) => c.metadata?.name === name && c.metadata.namespace === namespace);
      if (!cm) throw { code: 404 };
      return cm;
    },
  };
}

describe('jobharvest logs: which release is the operator\'s', () => {
  it('reads the ConfigMap its webhook configuration names, never one a tenant labelled beside it', async () => {
    const c = cluster(
      [mwc('jobharvest', { name: 'jobharvest', namespace: 'jobharvest' })],
      [
        // Created by a tenant who may create ConfigMaps in the chart's namespace: labelled like the chart's, sorted first.
        configMap('aaa-jobharvest', 'jobharvest', TENANT_CONFIG, {}),
        configMap('jobharvest', 'jobharvest', OPERATOR_CONFIG, helm('jobharvest', 'jobharvest')),
      ],
    );
    const r = await readChartConfig(c.list, c.read, { chartNamespace: undefined, release: undefined });
    expect(c.reads).toEqual(['jobharvest/jobharvest']);
    expect(r.note).toBe('ConfigMap jobharvest/jobharvest');
    expect(r.config?.sink.endpoint).toBe('http://loki.logging:3100/loki/api/v1/push');
    expect(r.config?.query.authSecret).toBeUndefined();
  });

  it('ignores a ConfigMap of the right name that is not the release\'s (replaced after a deletion, say)', async () => {
    const c = cluster([mwc('jh', { name: 'jh-jobharvest', namespace: 'tools' }, helm('jh', 'tools'))], [configMap('jh-jobharvest', 'tools', TENANT_CONFIG, {})]);
    const r = await readChartConfig(c.list, c.read, { chartNamespace: undefined, release: undefined });
    expect(r.config).toBeUndefined();
    expect(r.note).toMatch(/^ConfigMap tools\/jh-jobharvest ignored: its meta.helm.sh\/release-name\/meta.helm.sh\/release-namespace annotations are not those of release tools\/jh/);
    // Another release's annotations are not enough either.
    const other = cluster([mwc('jh', { name: 'jh-jobharvest', namespace: 'tools' }, helm('jh', 'tools'))], [configMap('jh-jobharvest', 'tools', TENANT_CONFIG, helm('other', 'tools'))]);
    expect((await readChartConfig(other.list, other.read, { chartNamespace: undefined, release: undefined })).config).toBeUndefined();
  });

  it('a `helm template` render (GitOps) is owned through its instance label', async () => {
    const labels = { 'app.kubernetes.io/instance': 'jh' };
    const c = cluster([mwc('jh-jobharvest', { name: 'jh-jobharvest', namespace: 'tools' }, {}, labels)], [configMap('jh-jobharvest', 'tools', OPERATOR_CONFIG, {}, labels)]);
    expect((await readChartConfig(c.list, c.read, { chartNamespace: undefined, release: undefined })).config?.sink.type).toBe('loki');
    const unlabelled = cluster([mwc('jh-jobharvest', { name: 'jh-jobharvest', namespace: 'tools' }, {}, labels)], [configMap('jh-jobharvest', 'tools', OPERATOR_CONFIG, {}, {})]);
    const r = await readChartConfig(unlabelled.list, unlabelled.read, { chartNamespace: undefined, release: undefined });
    expect(r.config).toBeUndefined();
    expect(r.note).toMatch(/its app.kubernetes.io\/instance label is not jh/);
  });

  it('refuses to choose between releases, and takes the one --chart-namespace or --release names', async () => {
    const both = [mwc('a', { name: 'a-jobharvest', namespace: 'ns-a' }), mwc('b', { name: 'b-jobharvest', namespace: 'ns-b' })];
    const c = cluster(both, [configMap('b-jobharvest', 'ns-b', OPERATOR_CONFIG, helm('b', 'ns-b'))]);
    await expect(readChartConfig(c.list, c.read, { chartNamespace: undefined, release: undefined })).rejects.toThrow(/2 jobharvest releases are installed \(ns-a\/a-jobharvest \(release a\), ns-b\/b-jobharvest \(release b\)\): name one with --chart-namespace$/);
    expect(c.reads).toEqual([]);
    expect((await readChartConfig(c.list, c.read, { chartNamespace: 'ns-b', release: undefined })).config?.sink.type).toBe('loki');
    const sameNamespace = releasesOf([mwc('a', { name: 'a-jobharvest', namespace: 'tools' }, helm('a', 'tools')), mwc('b', { name: 'b-jobharvest', namespace: 'tools' }, helm('b', 'tools'))]);
    expect(() => chooseRelease(sameNamespace, { namespace: 'tools' })).toThrow(/--chart-namespace and --release$/);
    expect(chooseRelease(sameNamespace, { namespace: 'tools', release: 'b' })?.service).toBe('b-jobharvest');
    expect(chooseRelease(sameNamespace, { namespace: 'elsewhere' })).toBeUndefined();
  });

  it('skips webhook configurations that name no Service (a developer\'s URL webhook) or are not jobharvest\'s', () => {
    const foreign: WebhookConfigurationLike = { metadata: { name: 'x' }, webhooks: [{ name: 'pods.other.io', clientConfig: { service: { name: 'x', namespace: 'x' } } }] };
    expect(releasesOf([mwc('jobharvest', undefined), foreign])).toEqual([]);
  });

  it('without the right to list webhook configurations, or with none installed, uses no chart configuration and says why', async () => {
    const forbidden = cluster([], [configMap('jobharvest', 'jobharvest', TENANT_CONFIG, helm('jobharvest', 'jobharvest'))], { code: 403 });
    const r = await readChartConfig(forbidden.list, forbidden.read, { chartNamespace: 'jobharvest', release: undefined });
    expect(r).toEqual({ note: 'MutatingWebhookConfigurations: forbidden, so no release\'s configuration is used' });
    expect(forbidden.reads).toEqual([]);
    const none = cluster([], []);
    expect(await readChartConfig(none.list, none.read, { chartNamespace: 'jobharvest', release: undefined })).toEqual({ note: 'no jobharvest release installed in namespace jobharvest (no webhook configuration names its Service)' });
  });
});

describe('jobharvest logs: an annotation that makes the chart\'s ingest host queryable gets no credentials', () => {
  const flags = (f: Partial<LogsFlags> = {}): LogsFlags => ({ ...f });
  const view = (v: Partial<ClusterView>): ClusterView => ({ namespace: 'team-a', jobFound: 'exists', namespaceNote: '', configNote: 'ConfigMap jobharvest/jobharvest', secret: async () => undefined, ...v });
  const job = (annotations: Record<string, string>) => ({ annotations, template: {}, uid: 'u-1', containers: ['main'] });
  const env = process.env.JOBHARVEST_QUERY_TOKEN;
  afterEach(() => {
    if (env === undefined) delete process.env.JOBHARVEST_QUERY_TOKEN;
    else process.env.JOBHARVEST_QUERY_TOKEN = env;
  });
  // The operator ships to a SaaS intake, which has no query API the chart configured.
  const intake = parseConfig({ sink: { type: 'http', endpoint: 'https://intake.saas.example/loki/api/v1/push' }, query: { authSecret: 'query-reader' } });

  it('jobharvest.io/sink on a Job: the derived target is queried without the token', async () => {
    process.env.JOBHARVEST_QUERY_TOKEN = 'operator-query-token';
    const asked: string[] = [];
    const r = await resolve(flags(), 'nightly', view({ config: intake, job: job({ 'jobharvest.io/sink': 'loki' }), secret: async (n) => (asked.push(n), { token: 'chart-token' }) }));
    expect(r.target).toMatchObject({ type: 'loki', endpoint: 'https://intake.saas.example' });
    expect(r.credentials.creds).toBeUndefined();
    expect(asked).toEqual([]);
    expect(r.warnings.join('\n')).toMatch(/^Job annotation jobharvest.io\/sink decided that https:\/\/intake.saas.example is queried: no credentials are sent there \(JOBHARVEST_QUERY_TOKEN held back\); --trust-endpoint https:\/\/intake.saas.example sends them$/m);
  });

  it('jobharvest.io/query-type on a Job or its namespace: the same', async () => {
    process.env.JOBHARVEST_QUERY_TOKEN = 'operator-query-token';
    const a = await resolve(flags(), 'nightly', view({ config: intake, job: job({ 'jobharvest.io/query-type': 'victorialogs' }) }));
    expect(a.target).toMatchObject({ type: 'victorialogs', endpoint: 'https://intake.saas.example/loki/api/v1/push' });
    expect(a.credentials.creds).toBeUndefined();
    const b = await resolve(flags(), 'nightly', view({ config: intake, job: job({}), namespaceAnnotations: { 'jobharvest.io/query-type': 'victorialogs' } }));
    expect(b.credentials.creds).toBeUndefined();
    expect(b.warnings.join('\n')).toMatch(/namespace annotation jobharvest.io\/query-type decided that/);
  });

  it('the same target chosen by the operator (flags, or the chart) gets them', async () => {
    process.env.JOBHARVEST_QUERY_TOKEN = 'operator-query-token';
    const byFlag = await resolve(flags({ queryType: 'victorialogs' }), 'nightly', view({ config: intake, job: job({}) }));
    expect(byFlag.target).toMatchObject({ endpoint: 'https://intake.saas.example/loki/api/v1/push' });
    expect(byFlag.credentials).toEqual({ creds: { token: 'operator-query-token' }, from: 'JOBHARVEST_QUERY_TOKEN' });
    const chartLoki = parseConfig({ sink: { type: 'loki', endpoint: 'https://loki.example/loki/api/v1/push' } });
    const byChart = await resolve(flags(), 'nightly', view({ config: chartLoki, job: job({ 'jobharvest.io/sink': 'loki' }) }));
    // The annotation repeats the chart's sink: it won the resolution, so the token still stays back.
    expect(byChart.credentials.creds).toBeUndefined();
    const plain = await resolve(flags(), 'nightly', view({ config: chartLoki, job: job({}) }));
    expect(plain.credentials).toEqual({ creds: { token: 'operator-query-token' }, from: 'JOBHARVEST_QUERY_TOKEN' });
  });
});
