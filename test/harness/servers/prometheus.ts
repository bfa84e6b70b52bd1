import type { ChildProcess } from 'node:child_process';
import { createWriteStream, mkdtempSync, rmSync, writeFileSync, type WriteStream } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { freePort } from '../../support/ports.ts';
import { spawnLogged, tailFile, terminate, waitStarted } from '../../support/process.ts';
import { PROMETHEUS, ensureGoProgram } from './go-build.ts';

/**
 * Prometheus (Apache-2.0, built from its Go module by go-build.ts) on
 * 127.0.0.1 with a temporary TSDB, scraping static targets and evaluating the
 * rule files given. The e2e suite has no Prometheus Operator: a test turns
 * the chart's ServiceMonitors into these scrape configs itself.
 */
export interface ScrapeConfig {
  job_name: string;
  scheme: 'http' | 'https';
  metrics_path: string;
  scrape_interval?: string;
  tls_config?: { ca_file?: string; server_name?: string; insecure_skip_verify?: boolean };
  static_configs: Array<{ targets: string[]; labels?: Record<string, string> }>;
}

export interface Sample {
  metric: Record<string, string>;
  value: [number, string];
}

export class Prometheus {
  readonly dir: string;
  readonly logFile: string;
  private child: ChildProcess | undefined;
  private logStream: WriteStream | undefined;

  private constructor(
    private readonly bin: string,
    readonly port: number,
  ) {
    this.dir = mkdtempSync(join(tmpdir(), 'jh-prometheus-'));
    this.logFile = join(this.dir, 'prometheus.log');
  }

  /** Builds Prometheus from its pin if the cache has none, and starts it; `ruleFiles` are absolute paths. */
  static async start(o: { scrapeConfigs: ScrapeConfig[]; ruleFiles?: string[]; intervalSeconds?: number; port?: number }): Promise<Prometheus> {
    const p = new Prometheus(ensureGoProgram(PROMETHEUS), o.port ?? (await freePort()));
    const interval = `${o.intervalSeconds ?? 1}s`;
    const config = join(p.dir, 'prometheus.yml');
    writeFileSync(config, stringify({ global: { scrape_interval: interval, evaluation_interval: interval }, rule_files: o.ruleFiles ?? [], scrape_configs: o.scrapeConfigs }));
    p.logStream = createWriteStream(p.logFile, { flags: 'a' });
    p.child = spawnLogged(
      p.bin,
      [`--config.file=${config}`, `--storage.tsdb.path=${join(p.dir, 'data')}`, `--web.listen-address=127.0.0.1:${p.port}`, '--log.level=info'],
      p.logStream,
    );
    await waitStarted(p.child, 'prometheus', async () => (await fetch(`${p.url}/-/ready`, { signal: AbortSignal.timeout(1000) })).ok, 60_000, p.logFile);
    return p;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** An instant query; throws with Prometheus' own error (a parse error, say) when it is refused. */
  async query(expr: string): Promise<Sample[]> {
    const res = await fetch(`${this.url}/api/v1/query`, { method: 'POST', body: new URLSearchParams({ query: expr }), signal: AbortSignal.timeout(10_000) });
    const body = (await res.json()) as { status: string; error?: string; errorType?: string; data?: { resultType: string; result: Sample[] | [number, string] } };
    if (body.status !== 'success') throw new Error(`${expr}: ${body.errorType}: ${body.error}`);
    const data = body.data!;
    if (data.resultType === 'scalar') return [{ metric: {}, value: data.result as [number, string] }];
    return data.result as Sample[];
  }

  /** The scrape targets and their health. */
  async targets(): Promise<Array<{ scrapePool: string; scrapeUrl: string; health: string; lastError: string; labels: Record<string, string> }>> {
    const res = await fetch(`${this.url}/api/v1/targets?state=active`, { signal: AbortSignal.timeout(10_000) });
    return ((await res.json()) as { data: { activeTargets: Array<{ scrapePool: string; scrapeUrl: string; health: string; lastError: string; labels: Record<string, string> }> } }).data.activeTargets;
  }

  /** The loaded rules with their health and last error. */
  async rules(): Promise<Array<{ name: string; health: string; lastError?: string; query: string; state?: string }>> {
    const res = await fetch(`${this.url}/api/v1/rules`, { signal: AbortSignal.timeout(10_000) });
    const body = (await res.json()) as { data: { groups: Array<{ rules: Array<{ name: string; health: string; lastError?: string; query: string; state?: string }> }> } };
    return body.data.groups.flatMap((g) => g.rules);
  }

  logTail(lines = 40): string {
    return tailFile(this.logFile, lines);
  }

  async dispose(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (child) await terminate(child);
    this.logStream?.end();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
