/**
 * The chart's monitoring pieces against the programs: every metric a
 * dashboard panel or an alert reads is one a program serves (checked from
 * the programs' own registries), and the harvester's delivery metrics stay
 * bounded however many namespaces tenants create.
 */
import * as prom from 'prom-client';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { DeliveryTotals, OTHER, recordResult } from '../../harvester/delivery-totals.ts';
import { harvesterRegistry, WatchStats } from '../../harvester/metrics.ts';
import type { DeliveryRecord } from '../../src/contract/harvest.ts';
import { dashboardQueries, metricNames } from '../harness/prometheus/rules.ts';
import { programMetricNames } from '../support/metric-registries.ts';

const RULES_TEMPLATE = new URL('../../charts/jobharvest/templates/prometheusrule.yaml', import.meta.url);

/** The alerts' expressions as the template writes them, Helm actions (the thresholds) taken out. */
function ruleExpressions(): string[] {
  const lines = readFileSync(RULES_TEMPLATE, 'utf8').split('\n');
  const out: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    const m = /^(\s*)expr: ?(.*)$/.exec(lines[i]!);
    if (!m) continue;
    let expr = m[2]!;
    if (expr === '|') {
      const body: string[] = [];
      while (i + 1 < lines.length && (lines[i + 1]!.trim() === '' || lines[i + 1]!.search(/\S/) > m[1]!.length)) body.push(lines[++i]!.trim());
      expr = body.join(' ');
    }
    out.push(expr.replace(/\{\{[^}]*\}\}/g, '0'));
  }
  return out;
}

describe('metric names the dashboard and the alerts read', () => {
  it('metricNames finds selectors, not functions, labels, grouping or durations', () => {
    expect(metricNames('histogram_quantile(0.99, sum by (namespace, le) (rate(jobharvest_admission_duration_seconds_bucket{code="x"}[5m]))) > 2.5')).toEqual(['jobharvest_admission_duration_seconds_bucket']);
    expect(metricNames('sum(increase(a_total[15m])) > 0 or max without (pod) (b) == 0 and on (namespace) c offset 1h')).toEqual(['a_total', 'b', 'c']);
    expect(metricNames('topk(10, sum by (job_namespace) (x{outcome="lost"})) / 86400')).toEqual(['x']);
  });

  it('every dashboard query reads only metrics a program serves', async () => {
    const served = await programMetricNames();
    const all = new Set([...served.webhook, ...served.harvester, ...served.sidecar]);
    const queries = dashboardQueries();
    expect(queries.length).toBeGreaterThanOrEqual(20);
    const read = new Set<string>();
    for (const q of queries) {
      const names = metricNames(q.expr);
      expect(names.length, `${q.panel} ${q.refId}: ${q.expr}`).toBeGreaterThan(0);
      for (const n of names) {
        read.add(n);
        expect(all.has(n), `${q.panel}: ${n} is served by no program`).toBe(true);
      }
    }
    // Both programs are on the dashboard.
    expect([...read].some((n) => served.webhook.has(n))).toBe(true);
    expect([...read].some((n) => served.harvester.has(n))).toBe(true);
  });

  it('every alert reads only metrics a program serves', async () => {
    const served = await programMetricNames();
    const all = new Set([...served.webhook, ...served.harvester, ...served.sidecar]);
    const exprs = ruleExpressions();
    expect(exprs.length).toBe(readFileSync(RULES_TEMPLATE, 'utf8').match(/- alert: /g)!.length);
    for (const e of exprs) {
      const names = metricNames(e);
      expect(names.length, e).toBeGreaterThan(0);
      for (const n of names) expect(all.has(n), `${n} (in ${e}) is served by no program`).toBe(true);
    }
  });

  it('a name no program serves is caught', async () => {
    const served = await programMetricNames();
    expect(served.webhook.has('jobharvest_admission_duration_seconds_bucket')).toBe(true);
    expect(served.harvester.has('jobharvest_harvester_namespace_lines_total')).toBe(true);
    expect(served.sidecar.has('jobharvest_sidecar_lines_shipped_total')).toBe(true);
    for (const set of Object.values(served)) expect(set.has('jobharvest_harvester_lines_lost_total')).toBe(false);
  });
});

const delivery = (o: Partial<DeliveryRecord> = {}): DeliveryRecord => ({ sink: 'loki', pods: 1, shipped: 10, lost: 0, unaccounted: 0, ...o });

describe('the delivery metrics', () => {
  it('a record is complete only with nothing lost, unaccounted or gapped', () => {
    expect(recordResult(delivery(), false)).toBe('complete');
    expect(recordResult(delivery({ lost: 1 }), false)).toBe('incomplete');
    expect(recordResult(delivery({ unaccounted: 1 }), false)).toBe('incomplete');
    expect(recordResult(delivery({ resume_gaps: 1 }), false)).toBe('incomplete');
    expect(recordResult(delivery({ injection: 'missed' }), false)).toBe('missed');
    expect(recordResult(delivery(), true)).toBe('unverified');
  });

  it('the first maxNamespaces namespaces get their own series, the rest are folded into one, and the totals count all', () => {
    const t = new DeliveryTotals(3);
    for (let i = 0; i < 1000; i++) t.add(`tenant-${i}`, delivery({ shipped: 5, lost: i % 2, harvested: 1 }), i % 2 ? 'incomplete' : 'complete');
    // A namespace with a series keeps it.
    t.add('tenant-1', delivery({ shipped: 7 }), 'complete');
    expect([...t.namespaces().keys()]).toEqual(['tenant-0', 'tenant-1', 'tenant-2', OTHER]);
    expect(t.namespaces().get('tenant-1')!.lines).toEqual({ shipped: 12, lost: 1, harvested: 1 });
    expect(t.namespaces().get(OTHER)!.records).toEqual({ complete: 498, incomplete: 499, unverified: 0, missed: 0 });
    expect(t.all.lines).toEqual({ shipped: 5007, lost: 500, harvested: 1000 });
    expect(t.all.records.complete + t.all.records.incomplete).toBe(1001);
  });

  it('maxNamespaces 0 keeps every namespace in the folded series', () => {
    const t = new DeliveryTotals(0);
    t.add('a', delivery(), 'complete');
    t.add('b', delivery({ unaccounted: 2 }), 'incomplete');
    expect([...t.namespaces().keys()]).toEqual([OTHER]);
    expect(t.all.unaccountedPods).toBe(2);
  });

  it('the harvester serves the totals from the start at 0, and the namespaces as they come (at 0 first), bounded', async () => {
    const t = new DeliveryTotals(2);
    const registry = harvesterRegistry(prom, new WatchStats(), { podWatches: () => 0, trackedJobs: () => 0, podReports: () => 0, queueDepth: () => 3, leader: () => 1, running: () => 2 }, t);
    const before = await registry.metrics();
    expect(before).toContain('jobharvest_harvester_lines_total{outcome="lost"} 0');
    expect(before).toContain('jobharvest_harvester_records_total{result="unverified"} 0');
    expect(before).toContain('jobharvest_harvester_unaccounted_pods_total 0');
    expect(before).toContain('jobharvest_harvester_queue_depth 3');
    expect(before).toContain('jobharvest_harvester_leader 1');
    expect(before).toContain('jobharvest_harvester_reconciles_running 2');
    expect(before).not.toMatch(/^jobharvest_harvester_namespace_lines_total\{/m);
    for (const ns of ['ci-1', 'ci-2', 'ci-3', 'ci-4']) t.add(ns, delivery({ shipped: 4, lost: 1 }), 'incomplete');
    // A new namespace's series is served at 0 first, so that increase() counts its first record.
    const first = await registry.metrics();
    expect(first).toContain('jobharvest_harvester_namespace_lines_total{job_namespace="ci-1",outcome="lost"} 0');
    expect(first).toContain('jobharvest_harvester_namespace_records_total{job_namespace="(other)",result="incomplete"} 0');
    expect(first).toContain('jobharvest_harvester_lines_total{outcome="lost"} 4');
    const after = await registry.metrics();
    expect(after).toContain('jobharvest_harvester_namespace_lines_total{job_namespace="ci-1",outcome="lost"} 1');
    expect(after).toContain('jobharvest_harvester_namespace_lines_total{job_namespace="(other)",outcome="shipped"} 8');
    expect(after).toContain('jobharvest_harvester_namespace_records_total{job_namespace="(other)",result="incomplete"} 2');
    expect(after).not.toContain('ci-3');
    expect(after).toContain('jobharvest_harvester_lines_total{outcome="lost"} 4');
  });
});
