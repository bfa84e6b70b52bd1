/**
 * The chart's Prometheus pieces as the tests use them: the PrometheusRule's
 * groups as a plain rule file (what the Prometheus Operator hands Prometheus),
 * the dashboard's queries, and the metric names an expression reads.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { stringify } from 'yaml';
import { one, render, type K8sObject } from '../chart/helm.ts';

export const DASHBOARD_FILE = fileURLToPath(new URL('../../../charts/jobharvest/dashboards/jobharvest.json', import.meta.url));

export interface RuleGroup {
  name: string;
  rules: Array<{ alert?: string; record?: string; expr: string; for?: string; labels?: Record<string, string>; annotations?: Record<string, string> }>;
}

/** The rendered PrometheusRule's groups (helm template with prometheusRule.enabled and `values`). */
export async function renderedRuleGroups(helm: string, values: { prometheusRule?: object } & Record<string, unknown> = {}): Promise<{ groups: RuleGroup[]; objects: K8sObject[] }> {
  const objects = await render(helm, { release: 'jh', namespace: 'jobharvest', values: { ...values, prometheusRule: { ...values.prometheusRule, enabled: true } } });
  const rule = one<{ spec: { groups: RuleGroup[] } }>(objects, 'PrometheusRule');
  return { groups: rule.spec.groups, objects };
}

export function writeRuleFile(path: string, groups: RuleGroup[]): void {
  writeFileSync(path, stringify({ groups }));
}

export interface DashboardQuery {
  panel: string;
  refId: string;
  expr: string;
  legendFormat?: string;
}

interface Panel {
  type: string;
  title: string;
  targets?: Array<{ refId: string; expr: string; legendFormat?: string }>;
  panels?: Panel[];
}

/** Every query of every panel, rows' nested panels included. */
export function dashboardQueries(file = DASHBOARD_FILE): DashboardQuery[] {
  const dash = JSON.parse(readFileSync(file, 'utf8')) as { panels: Panel[] };
  const out: DashboardQuery[] = [];
  const walk = (panels: Panel[]): void => {
    for (const p of panels) {
      for (const t of p.targets ?? []) out.push({ panel: p.title, refId: t.refId, expr: t.expr, ...(t.legendFormat ? { legendFormat: t.legendFormat } : {}) });
      walk(p.panels ?? []);
    }
  };
  walk(dash.panels);
  return out;
}

const KEYWORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'and', 'or', 'unless', 'bool', 'offset', 'inf', 'nan']);

/**
 * The metric names a PromQL expression reads. Strings, label matchers,
 * grouping clauses, durations and function names are taken out first; what is
 * left that looks like a name is a metric selector.
 */
export function metricNames(expr: string): string[] {
  let e = expr.replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""');
  e = e.replace(/\{[^}]*\}/g, ' ');
  e = e.replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  e = e.replace(/\[[^\]]*\]/g, ' ');
  const names = new Set<string>();
  for (const m of e.matchAll(/[A-Za-z_:][A-Za-z0-9_:]*/g)) {
    const name = m[0];
    const after = e.slice(m.index + name.length).trimStart();
    if (after.startsWith('(')) continue; // a function
    if (KEYWORDS.has(name.toLowerCase())) continue;
    const before = e.slice(0, m.index);
    if (/[0-9.]$/.test(before)) continue; // a duration or number's unit, e.g. 1e3
    names.add(name);
  }
  return [...names];
}
