// Renders the chart's Grafana dashboard (charts/jobharvest/dashboards/jobharvest.json)
// as text, from a running Prometheus: each panel's queries over the last
// minutes as a sparkline and the last value, with Grafana's legend format.
// Grafana itself is AGPL and is not built here, so this is how the dashboard is
// seen in the tests: test/e2e/prometheus.test.ts renders it after a Job ran.
//
//   npx tsx scripts/render-dashboard.ts --prometheus http://127.0.0.1:9090 [--seconds 300] [--out file]
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const DASHBOARD = fileURLToPath(new URL('../charts/jobharvest/dashboards/jobharvest.json', import.meta.url));
const BARS = '▁▂▃▄▅▆▇█';

interface Target {
  refId: string;
  expr: string;
  legendFormat?: string;
}
interface Panel {
  type: string;
  title: string;
  targets?: Target[];
  panels?: Panel[];
  fieldConfig?: { defaults?: { unit?: string } };
}
interface Series {
  metric: Record<string, string>;
  values: Array<[number, string]>;
}

async function queryRange(prometheus: string, expr: string, start: number, end: number, step: number): Promise<Series[]> {
  const res = await fetch(`${prometheus}/api/v1/query_range`, {
    method: 'POST',
    body: new URLSearchParams({ query: expr, start: String(start), end: String(end), step: String(step) }),
    signal: AbortSignal.timeout(10_000),
  });
  const body = (await res.json()) as { status: string; error?: string; data?: { result: Series[] } };
  if (body.status !== 'success') throw new Error(`${expr}: ${body.error}`);
  return body.data!.result;
}

/** Grafana's legend: `{{label}}` replaced by the series' label value. */
export function legend(format: string | undefined, metric: Record<string, string>): string {
  if (!format) return JSON.stringify(metric);
  return format.replace(/\{\{\s*(\w+)\s*\}\}/g, (_, k: string) => metric[k] ?? '');
}

export function formatValue(v: number, unit: string | undefined): string {
  if (Number.isNaN(v)) return 'NaN';
  const round = (x: number) => (Math.abs(x) >= 100 ? x.toFixed(0) : Math.abs(x) >= 1 ? x.toFixed(2) : x.toPrecision(3));
  switch (unit) {
    case 'bytes': {
      const units = ['B', 'KiB', 'MiB', 'GiB'];
      let i = 0;
      while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
      return `${round(v)} ${units[i]}`;
    }
    case 's':
      return v < 1 ? `${round(v * 1000)} ms` : `${round(v)} s`;
    case 'd':
      return `${round(v)} days`;
    case 'reqps':
      return `${round(v)} req/s`;
    case 'ops':
      return `${round(v)} ops/s`;
    default:
      return round(v);
  }
}

export function sparkline(values: number[]): string {
  const finite = values.filter((v) => Number.isFinite(v));
  if (finite.length === 0) return ''.padEnd(values.length, '·');
  const lo = Math.min(...finite);
  const hi = Math.max(...finite);
  return values.map((v) => (Number.isFinite(v) ? BARS[hi === lo ? 0 : Math.round(((v - lo) / (hi - lo)) * (BARS.length - 1))] : '·')).join('');
}

export interface RenderedQuery {
  panel: string;
  refId: string;
  expr: string;
  series: number;
}

/** The text rendering, and per query how many series it returned. */
export async function renderDashboard(prometheus: string, o: { seconds?: number; points?: number; file?: string; now?: number } = {}): Promise<{ text: string; queries: RenderedQuery[] }> {
  const dash = JSON.parse(readFileSync(o.file ?? DASHBOARD, 'utf8')) as { title: string; panels: Panel[] };
  const end = (o.now ?? Date.now()) / 1000;
  const seconds = o.seconds ?? 300;
  const points = o.points ?? 30;
  const start = end - seconds;
  const step = Math.max(1, seconds / (points - 1));
  const lines: string[] = [`${dash.title} (rendered from ${prometheus}: the last ${seconds} s in ${points} steps of ${step.toFixed(1)} s; the value is the last step's)`, ''];
  const queries: RenderedQuery[] = [];
  const walk = async (panels: Panel[]): Promise<void> => {
    for (const p of panels) {
      if (p.type === 'row') {
        lines.push(`== ${p.title} ==`, '');
        await walk(p.panels ?? []);
        continue;
      }
      lines.push(`[${p.title}]`);
      const unit = p.fieldConfig?.defaults?.unit;
      for (const t of p.targets ?? []) {
        const series = await queryRange(prometheus, t.expr, start, end, step);
        queries.push({ panel: p.title, refId: t.refId, expr: t.expr, series: series.length });
        if (series.length === 0) lines.push(`  ${t.refId}  (no data)  ${t.expr}`);
        for (const s of series) {
          const byTime = new Map(s.values.map(([ts, v]) => [Math.round((ts - start) / step), Number(v)]));
          const values = Array.from({ length: points }, (_, i) => byTime.get(i) ?? Number.NaN);
          const last = Number(s.values.at(-1)?.[1]);
          lines.push(`  ${sparkline(values)}  ${formatValue(last, unit).padStart(12)}  ${legend(t.legendFormat, s.metric)}`);
        }
      }
      lines.push('');
    }
  };
  await walk(dash.panels);
  return { text: lines.join('\n'), queries };
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const arg = (name: string): string | undefined => {
    const i = process.argv.indexOf(`--${name}`);
    return i >= 0 ? process.argv[i + 1] : undefined;
  };
  const prometheus = arg('prometheus');
  if (!prometheus) {
    process.stderr.write('usage: render-dashboard.ts --prometheus URL [--seconds N] [--out FILE]\n');
    process.exit(2);
  }
  const { text } = await renderDashboard(prometheus, { seconds: Number(arg('seconds') ?? 300) });
  const out = arg('out');
  if (out) writeFileSync(out, `${text}\n`);
  else process.stdout.write(`${text}\n`);
}
