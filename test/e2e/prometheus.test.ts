/**
 * The chart's monitoring against real parts: the webhook and the harvester run
 * as processes on the real control plane (with the test kubelet and
 * VictoriaLogs), and a real Prometheus, built from its Go module, scrapes them.
 * There is no Prometheus Operator here, so each rendered ServiceMonitor
 * endpoint becomes a static scrape config (its scheme, path, CA and server
 * name; its port name mapped to the process' port), after checking that the
 * endpoint reaches the port the chart's Deployment serves /metrics on. The
 * rendered PrometheusRule is loaded too. After a Job has run, every dashboard
 * query parses and returns series, the per-namespace delivery metrics count
 * the Job's lines, and scripts/render-dashboard.ts renders the dashboard.
 */
import { AdmissionregistrationV1Api } from '@kubernetes/client-node';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { renderDashboard } from '../../scripts/render-dashboard.ts';
import { DELIVERY_ANNOTATION } from '../../src/contract/harvest.ts';
import { one, render, type K8sObject } from '../harness/chart/helm.ts';
import { useCluster, waitFor } from '../harness/cluster/client.ts';
import { numberedLines, shellJob, Stack } from '../harness/kubelet/stack.ts';
import { dashboardQueries, writeRuleFile, type RuleGroup } from '../harness/prometheus/rules.ts';
import { Prometheus, type ScrapeConfig } from '../harness/servers/prometheus.ts';
import { freePort } from '../support/ports.ts';

const cluster = useCluster();
const NAME = 'prom';
const RELEASE = 'jh';
const RELEASE_NS = 'jobharvest';
const LINES = 300;
const dir = mkdtempSync(join(tmpdir(), 'jh-prom-'));

interface Endpoint {
  port: string;
  path: string;
  scheme: 'http' | 'https';
  interval: string;
  tlsConfig?: { ca?: { secret?: { name: string; key: string } }; serverName?: string };
}
interface ServiceMonitor extends K8sObject {
  spec: { selector: { matchLabels: Record<string, string> }; namespaceSelector: { matchNames: string[] }; endpoints: Endpoint[] };
}
interface Service extends K8sObject {
  spec: { selector: Record<string, string>; ports: Array<{ name: string; port: number; targetPort: string | number }> };
}
interface Deployment extends K8sObject {
  spec: { template: { metadata: { labels: Record<string, string> }; spec: { containers: Array<{ args?: string[]; ports?: Array<{ name: string; containerPort: number }> }> } } };
}

let objects: K8sObject[];
let stack: Stack;
let prometheus: Prometheus;
let harvesterMetricsPort: number;
let scrapeConfigs: ScrapeConfig[];

const contains = (labels: Record<string, string> | undefined, wanted: Record<string, string>) => Object.entries(wanted).every(([k, v]) => labels?.[k] === v);

/**
 * The Service a ServiceMonitor's endpoint selects and the container port its
 * port name leads to, in the rendered chart: the chain the operator follows.
 */
function resolveEndpoint(sm: ServiceMonitor, ep: Endpoint): { service: Service; containerPort: number; args: string[] } {
  const services = objects.filter((o): o is Service => o.kind === 'Service' && contains(o.metadata.labels, sm.spec.selector.matchLabels) && sm.spec.namespaceSelector.matchNames.includes(o.metadata.namespace ?? ''));
  expect(services.map((s) => s.metadata.name), `${sm.metadata.name} selects one Service`).toHaveLength(1);
  const service = services[0]!;
  const port = service.spec.ports.find((p) => p.name === ep.port);
  expect(port, `${service.metadata.name} has a port named ${ep.port}`).toBeDefined();
  const deployments = objects.filter((o): o is Deployment => o.kind === 'Deployment' && contains((o as Deployment).spec.template.metadata.labels, service.spec.selector));
  expect(deployments, `${service.metadata.name} selects one Deployment`).toHaveLength(1);
  const container = deployments[0]!.spec.template.spec.containers[0]!;
  const target = container.ports?.find((p) => p.name === port!.targetPort || p.containerPort === port!.targetPort);
  expect(target, `${service.metadata.name}'s targetPort ${port!.targetPort} is a container port`).toBeDefined();
  return { service, containerPort: target!.containerPort, args: container.args ?? [] };
}

beforeAll(async () => {
  objects = await render(cluster.info.helmPath, {
    release: RELEASE,
    namespace: RELEASE_NS,
    values: { serviceMonitor: { enabled: true }, prometheusRule: { enabled: true }, dashboard: { enabled: true } },
  });
  const monitors = objects.filter((o): o is ServiceMonitor => o.kind === 'ServiceMonitor');
  const webhookSm = monitors.find((m) => m.metadata.labels?.['app.kubernetes.io/component'] === 'webhook')!;
  const serverName = webhookSm.spec.endpoints[0]!.tlsConfig!.serverName!;
  harvesterMetricsPort = await freePort();
  // The webhook's certificate also names the Service the ServiceMonitor checks it against, as in a cluster.
  stack = await Stack.start({ info: cluster.info, name: NAME, webhookArgs: ['--extra-dns-names', serverName], harvesterArgs: ['--metrics-port', String(harvesterMetricsPort)] });

  // The CA the API server trusts the webhook with: in a cluster, ca.crt of the certificate Secret.
  const config = await cluster.kc.makeApiClient(AdmissionregistrationV1Api).readMutatingWebhookConfiguration({ name: `jobharvest-${NAME}` });
  const caFile = join(dir, 'ca.pem');
  writeFileSync(caFile, Buffer.from(config.webhooks![0]!.clientConfig.caBundle!, 'base64'));

  scrapeConfigs = monitors.flatMap((sm) =>
    sm.spec.endpoints.map((ep, i): ScrapeConfig => {
      const { service } = resolveEndpoint(sm, ep);
      const component = sm.metadata.labels?.['app.kubernetes.io/component'];
      const port = component === 'webhook' ? stack.webhook.port : harvesterMetricsPort;
      return {
        // The operator's names: the job pool after the ServiceMonitor, the job label after the Service.
        job_name: `serviceMonitor/${sm.metadata.namespace}/${sm.metadata.name}/${i}`,
        scheme: ep.scheme,
        metrics_path: ep.path,
        ...(ep.tlsConfig ? { tls_config: { ca_file: caFile, server_name: ep.tlsConfig.serverName! } } : {}),
        static_configs: [{ targets: [`127.0.0.1:${port}`], labels: { namespace: RELEASE_NS, service: service.metadata.name, job: service.metadata.name, endpoint: ep.port, pod: `${component}-0` } }],
      };
    }),
  );
  const rules = one<{ spec: { groups: RuleGroup[] } }>(objects, 'PrometheusRule');
  writeRuleFile(join(dir, 'rules.yaml'), rules.spec.groups);
  prometheus = await Prometheus.start({ scrapeConfigs, ruleFiles: [join(dir, 'rules.yaml')] });
}, 300_000);

afterAll(async () => {
  await prometheus?.dispose();
  await stack?.stop();
  rmSync(dir, { recursive: true, force: true });
}, 120_000);

describe('Prometheus scraping the webhook and the harvester', () => {
  it('P1. each ServiceMonitor endpoint leads to the port the program serves /metrics on, and Prometheus scrapes it there (the webhook over verified TLS)', async () => {
    const monitors = objects.filter((o): o is ServiceMonitor => o.kind === 'ServiceMonitor');
    expect(monitors.map((m) => m.metadata.name).sort()).toEqual([`${RELEASE}-jobharvest-harvester`, `${RELEASE}-jobharvest-webhook`]);
    for (const sm of monitors) {
      for (const ep of sm.spec.endpoints) {
        const { containerPort, args } = resolveEndpoint(sm, ep);
        // The program is told to serve on that very port.
        const flag = sm.metadata.name.endsWith('-webhook') ? '--port' : '--metrics-port';
        expect(args, `${sm.metadata.name}: ${flag}=${containerPort}`).toContain(`${flag}=${containerPort}`);
        expect(ep.path).toBe('/metrics');
        if (sm.metadata.name.endsWith('-webhook')) {
          expect(ep.scheme).toBe('https');
          expect(ep.tlsConfig).toEqual({ ca: { secret: { name: `${RELEASE}-jobharvest-tls`, key: 'ca.crt' } }, serverName: `${RELEASE}-jobharvest.${RELEASE_NS}.svc` });
        } else {
          expect(ep.scheme).toBe('http');
        }
      }
    }
    const targets = await waitFor(
      'both targets up',
      async () => {
        const t = await prometheus.targets();
        return t.length === scrapeConfigs.length && t.every((x) => x.health === 'up') ? t : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 500 },
    );
    expect(targets.map((t) => t.scrapeUrl).sort()).toEqual([`http://127.0.0.1:${harvesterMetricsPort}/metrics`, `https://127.0.0.1:${stack.webhook.port}/metrics`]);
    expect((await prometheus.query('jobharvest_signing_key_loaded'))[0]?.value[1]).toBe('1');
    expect((await prometheus.query('sum(jobharvest_harvester_leader)'))[0]?.value[1]).toBe('1');
  });

  it('P2. after a Job has run, every dashboard query parses and returns series, the delivery metrics count its lines, and the rules evaluate', async () => {
    const ns = await stack.namespace('p2');
    await stack.batch.createNamespacedJob({ namespace: ns, body: shellJob('p2', { script: numberedLines('p2', LINES) }) });
    // A Job in a namespace that did not opt in: the webhook skips it (the Decisions panel's skip reasons).
    const plain = `${NAME}-plain-${Date.now().toString(36)}`;
    await stack.core.createNamespace({ body: { metadata: { name: plain } } });
    try {
      await stack.batch.createNamespacedJob({ namespace: plain, body: shellJob('plain', { script: 'true' }) });
      await waitFor('the delivery record', async () => {
        const job = await stack.batch.readNamespacedJob({ name: 'p2', namespace: ns });
        return job.metadata?.annotations?.[DELIVERY_ANNOTATION];
      }, { timeoutMs: 90_000, intervalMs: 250 });

      // The harvester's per-namespace series for this namespace: every line shipped, none lost.
      const shipped = await waitFor('the namespace series at the Job\'s count', async () => {
        const r = await prometheus.query(`jobharvest_harvester_namespace_lines_total{job_namespace="${ns}",outcome="shipped"}`);
        return r.length === 1 && r[0]!.value[1] === String(LINES) ? r : undefined;
      }, { timeoutMs: 30_000, intervalMs: 500 });
      expect(shipped[0]!.metric).toMatchObject({ job_namespace: ns, outcome: 'shipped', namespace: RELEASE_NS });
      // The series was first served at 0, so increase() sees the Job's lines (not a series born at 300).
      const increase = Number((await prometheus.query(`sum(increase(jobharvest_harvester_namespace_lines_total{job_namespace="${ns}",outcome="shipped"}[5m]))`))[0]!.value[1]);
      expect(increase).toBeGreaterThanOrEqual(LINES);
      expect((await prometheus.query(`jobharvest_harvester_namespace_lines_total{job_namespace="${ns}",outcome="lost"}`))[0]?.value[1]).toBe('0');
      expect((await prometheus.query(`jobharvest_harvester_namespace_records_total{job_namespace="${ns}",result="complete"}`))[0]?.value[1]).toBe('1');

      // Every dashboard query, as Grafana would send it: parsed, and with series.
      const queries = dashboardQueries();
      const empty = await waitFor(
        'every dashboard query returning series',
        async () => {
          const missing: string[] = [];
          for (const q of queries) if ((await prometheus.query(q.expr)).length === 0) missing.push(`${q.panel} ${q.refId}: ${q.expr}`);
          return missing.length === 0 ? missing : undefined;
        },
        { timeoutMs: 60_000, intervalMs: 2000 },
      ).catch(async () => {
        const still: string[] = [];
        for (const q of queries) if ((await prometheus.query(q.expr)).length === 0) still.push(`${q.panel} ${q.refId}: ${q.expr}`);
        return still;
      });
      expect(empty, 'dashboard queries without series').toEqual([]);

      // The rules load and evaluate without error; after one Job done right none fires.
      const rules = await waitFor('the rules evaluated', async () => {
        const r = await prometheus.rules();
        return r.length > 0 && r.every((x) => x.health !== 'unknown') ? r : undefined;
      }, { timeoutMs: 30_000, intervalMs: 500 });
      expect(rules.filter((r) => r.health !== 'ok').map((r) => `${r.name}: ${r.lastError}`)).toEqual([]);
      expect(rules.filter((r) => r.state !== 'inactive').map((r) => r.name)).toEqual([]);

      const { text, queries: rendered } = await renderDashboard(prometheus.url, { seconds: 30, points: 31 });
      writeFileSync(join(cluster.info.logsDir, 'dashboard.txt'), `${text}\n`);
      console.log(text);
      expect(rendered.length).toBe(queries.length);
      expect(rendered.filter((q) => q.series === 0).map((q) => `${q.panel} ${q.refId}`)).toEqual([]);
      expect(text).toContain(`[Lines shipped by namespace]`);
      expect(text).toMatch(new RegExp(`${ns}\\n`));
    } finally {
      await stack.core.deleteNamespace({ name: plain }).catch(() => undefined);
    }
  });

  it('P3. a query the dashboard could not have (a parse error) is refused by this Prometheus, so P2 proves the queries parse', async () => {
    await expect(prometheus.query('sum by (le (rate(jobharvest_admission_duration_seconds_bucket[5m]))')).rejects.toThrow(/bad_data|parse error/);
  });
});
