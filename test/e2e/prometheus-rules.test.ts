/**
 * The chart's alerts under the real promtool (built from the Prometheus Go
 * module by test/harness/servers): the PrometheusRule rendered by Helm is
 * written out as the rule file the Prometheus Operator would hand Prometheus,
 * `promtool check rules` accepts it, and `promtool test rules` runs
 * test/prometheus/rules.test.yaml, in which every alert is shown firing and not
 * firing. Every alert has its runbook section in docs/operations.md.
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { useCluster } from '../harness/cluster/client.ts';
import { one, render, template } from '../harness/chart/helm.ts';
import { renderedRuleGroups, writeRuleFile } from '../harness/prometheus/rules.ts';
import { ensureGoProgram, PROMTOOL } from '../harness/servers/go-build.ts';

const cluster = useCluster();
const TESTS = fileURLToPath(new URL('../prometheus/rules.test.yaml', import.meta.url));
const OPERATIONS = fileURLToPath(new URL('../../docs/operations.md', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'jh-rules-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('the PrometheusRule under promtool', () => {
  it('promtool check rules accepts the rendered rules, and promtool test rules passes every firing and not-firing case', async () => {
    const promtool = ensureGoProgram(PROMTOOL);
    const { groups } = await renderedRuleGroups(cluster.info.helmPath);
    const alerts = groups.flatMap((g) => g.rules.map((r) => r.alert)).filter((a): a is string => a !== undefined);
    expect(alerts.length).toBeGreaterThanOrEqual(9);
    writeRuleFile(join(dir, 'rules.yaml'), groups);
    copyFileSync(TESTS, join(dir, 'rules.test.yaml'));

    const check = spawnSync(promtool, ['check', 'rules', join(dir, 'rules.yaml')], { encoding: 'utf8' });
    expect(check.status, check.stdout + check.stderr).toBe(0);
    expect(check.stdout).toContain(`SUCCESS: ${alerts.length} rules found`);

    const test = spawnSync(promtool, ['test', 'rules', join(dir, 'rules.test.yaml')], { encoding: 'utf8', cwd: dir });
    console.log(`promtool test rules:\n${test.stdout}${test.stderr}`);
    expect(test.status, test.stdout + test.stderr).toBe(0);
    expect(test.stdout + test.stderr).toContain('SUCCESS');

    // Every alert is tested both ways: an eval with exp_alerts: [] and one with an alert.
    const cases = (parseYaml(readFileSync(TESTS, 'utf8')) as { tests: Array<{ alert_rule_test?: Array<{ alertname: string; exp_alerts?: unknown[] }> }> }).tests.flatMap((t) => t.alert_rule_test ?? []);
    for (const alert of alerts) {
      expect(cases.some((c) => c.alertname === alert && (c.exp_alerts ?? []).length > 0), `${alert} firing`).toBe(true);
      expect(cases.some((c) => c.alertname === alert && (c.exp_alerts ?? []).length === 0), `${alert} not firing`).toBe(true);
    }
  });

  it('a broken rule file is refused by promtool check rules (the check is not a formality)', () => {
    const promtool = ensureGoProgram(PROMTOOL);
    writeRuleFile(join(dir, 'broken.yaml'), [{ name: 'x', rules: [{ alert: 'Broken', expr: 'sum by (namespace (jobharvest_ready)' }] }]);
    const check = spawnSync(promtool, ['check', 'rules', join(dir, 'broken.yaml')], { encoding: 'utf8' });
    expect(check.status).not.toBe(0);
    expect(check.stdout + check.stderr).toMatch(/parse error|unexpected/);
  });

  it('every alert links a runbook section of docs/operations.md that exists', async () => {
    const { groups } = await renderedRuleGroups(cluster.info.helmPath);
    const doc = readFileSync(OPERATIONS, 'utf8');
    const anchors = new Set([...doc.matchAll(/^#{2,4} (.+)$/gm)].map((m) => m[1]!.trim().toLowerCase().replace(/[^a-z0-9 -]/g, '').replace(/ /g, '-')));
    for (const rule of groups.flatMap((g) => g.rules)) {
      if (!rule.alert) continue;
      const url = rule.annotations?.runbook_url ?? '';
      expect(url, rule.alert).toBe(`docs/operations.md#${rule.alert.toLowerCase()}`);
      expect(anchors.has(rule.alert.toLowerCase()), `docs/operations.md has a section ${rule.alert}`).toBe(true);
    }
  });

  it('the thresholds follow the values: half of webhook.timeoutSeconds, the queue depth, the expiry days', async () => {
    const alert = (groups: Awaited<ReturnType<typeof renderedRuleGroups>>['groups'], name: string) => groups.flatMap((g) => g.rules).find((r) => r.alert === name)!;
    const defaults = (await renderedRuleGroups(cluster.info.helmPath)).groups;
    expect(alert(defaults, 'JobharvestWebhookSlow').expr).toMatch(/> 2\.5$/);
    expect(alert(defaults, 'JobharvestHarvestsBackingUp').expr).toMatch(/> 100$/);
    expect(alert(defaults, 'JobharvestCertificateExpiring').expr).toMatch(/< 604800$/);
    const custom = (await renderedRuleGroups(cluster.info.helmPath, { webhook: { timeoutSeconds: 9 }, prometheusRule: { harvestQueueDepth: 20, certificateExpiryDays: 30, additionalLabels: { team: 'platform' } } })).groups;
    expect(alert(custom, 'JobharvestWebhookSlow').expr).toMatch(/> 4\.5$/);
    expect(alert(custom, 'JobharvestHarvestsBackingUp').expr).toMatch(/> 20$/);
    expect(alert(custom, 'JobharvestCertificateExpiring').expr).toMatch(/< 2592000$/);
    for (const r of custom.flatMap((g) => g.rules)) expect(r.labels?.team, r.alert).toBe('platform');
  });
});

describe("the chart's monitoring objects", () => {
  it('off by default: no ServiceMonitor, PrometheusRule or dashboard ConfigMap without the values', async () => {
    const objects = await render(cluster.info.helmPath, { release: 'jh', namespace: 'jobharvest' });
    expect(objects.filter((o) => ['ServiceMonitor', 'PrometheusRule'].includes(o.kind))).toEqual([]);
    expect(objects.filter((o) => o.metadata.name === 'jh-jobharvest-dashboard')).toEqual([]);
    // The harvester's metrics Service is there: the endpoint is on by default.
    expect(one(objects, 'Service', 'jh-jobharvest-harvester-metrics')).toBeDefined();
  });

  it('the dashboard ConfigMap carries the side-loader label (configurable) and the dashboard file as it is', async () => {
    const file = readFileSync(fileURLToPath(new URL('../../charts/jobharvest/dashboards/jobharvest.json', import.meta.url)), 'utf8');
    const defaults = one<{ data: Record<string, string> }>(await render(cluster.info.helmPath, { release: 'jh', namespace: 'jobharvest', values: { dashboard: { enabled: true } } }), 'ConfigMap', 'jh-jobharvest-dashboard');
    expect(defaults.metadata.labels?.grafana_dashboard).toBe('1');
    expect(defaults.metadata.namespace).toBe('jobharvest');
    expect(JSON.parse(defaults.data['jobharvest.json']!)).toEqual(JSON.parse(file));
    const custom = one(
      await render(cluster.info.helmPath, { release: 'jh', namespace: 'jobharvest', values: { dashboard: { enabled: true, label: 'example.com/dashboard', labelValue: 'jobs', namespace: 'monitoring', annotations: { grafana_folder: 'Platform' } } } }),
      'ConfigMap',
      'jh-jobharvest-dashboard',
    );
    expect(custom.metadata.labels?.['example.com/dashboard']).toBe('jobs');
    expect(custom.metadata.labels?.grafana_dashboard).toBeUndefined();
    expect(custom.metadata.namespace).toBe('monitoring');
    expect(custom.metadata.annotations).toEqual({ grafana_folder: 'Platform' });
  });

  it("the harvester's NetworkPolicy admits only the metrics peers, and only on the metrics port", async () => {
    const peer = { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } } };
    const base = { harvester: { networkPolicy: { enabled: true, apiServer: [{ ipBlock: { cidr: '10.0.0.10/32' } }] } } };
    const closed = one<{ spec: { policyTypes: string[]; ingress?: unknown[] } }>(await render(cluster.info.helmPath, { release: 'jh', namespace: 'jobharvest', values: base }), 'NetworkPolicy', 'jh-jobharvest-harvester');
    expect(closed.spec.policyTypes).toContain('Ingress');
    expect(closed.spec.ingress).toBeUndefined();
    const open = one<{ spec: { ingress?: unknown[] } }>(
      await render(cluster.info.helmPath, { release: 'jh', namespace: 'jobharvest', values: { harvester: { ...base.harvester, networkPolicy: { ...base.harvester.networkPolicy, metrics: [peer] } } } }),
      'NetworkPolicy',
      'jh-jobharvest-harvester',
    );
    expect(open.spec.ingress).toEqual([{ from: [peer], ports: [{ port: 9464, protocol: 'TCP' }] }]);
    // The metrics port off: no port to admit, no Service.
    const off = await render(cluster.info.helmPath, { release: 'jh', namespace: 'jobharvest', values: { harvester: { metrics: { port: 0 }, networkPolicy: { ...base.harvester.networkPolicy, metrics: [peer] } }, serviceMonitor: { enabled: true } } });
    expect(one<{ spec: { ingress?: unknown[] } }>(off, 'NetworkPolicy', 'jh-jobharvest-harvester').spec.ingress).toBeUndefined();
    expect(off.filter((o) => o.metadata.name === 'jh-jobharvest-harvester-metrics')).toEqual([]);
    expect(off.filter((o) => o.kind === 'ServiceMonitor').map((o) => o.metadata.name)).toEqual(['jh-jobharvest-webhook']);
    const args = one<{ spec: { template: { spec: { containers: Array<{ args: string[] }> } } } }>(off, 'Deployment', 'jh-jobharvest-harvester').spec.template.spec.containers[0]!.args;
    expect(args.some((a) => a.startsWith('--metrics-port'))).toBe(false);
  });

  it('the schema refuses bad monitoring values', async () => {
    for (const values of [{ serviceMonitor: { interval: 'soon' } }, { prometheusRule: { certificateExpiryDays: 0 } }, { dashboard: { labelValue: 'a b' } }, { harvester: { metrics: { maxNamespaces: -1 } } }, { serviceMonitor: { unknown: true } }]) {
      const run = await template(cluster.info.helmPath, { release: 'jh', namespace: 'jobharvest', values });
      expect(run.code, JSON.stringify(values)).not.toBe(0);
      expect(run.stderr, JSON.stringify(values)).toMatch(/values don't meet the specifications of the schema|schema/i);
    }
  });
});
