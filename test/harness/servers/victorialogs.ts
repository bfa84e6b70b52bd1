import type { ChildProcess } from 'node:child_process';
import { createWriteStream, mkdtempSync, rmSync, type WriteStream } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../support/ports.ts';
import { exited, spawnLogged, tailFile, terminate, waitStarted } from '../../support/process.ts';
import { VICTORIA_LOGS, ensureGoProgram } from './go-build.ts';

export interface VictoriaLogsOptions {
  /** Keep the storage folder after stop(), for post-mortems. */
  keepStorage?: boolean;
  startTimeoutMs?: number;
  /** Basic auth on every endpoint (-httpAuth.*); the harness's own queries send it too. */
  basicAuth?: { username: string; password: string };
}

/**
 * A real VictoriaLogs process on 127.0.0.1 with its own storage folder.
 * stop()/start() keep the port and the storage, so a test can take the
 * server down and bring it back with the data it had accepted.
 */
export class VictoriaLogs {
  readonly dir: string;
  readonly storage: string;
  readonly logFile: string;
  private child: ChildProcess | undefined;
  private logStream: WriteStream | undefined;
  private portValue = 0;

  private constructor(private readonly bin: string, private readonly opts: VictoriaLogsOptions) {
    this.dir = mkdtempSync(join(tmpdir(), 'jh-vlogs-'));
    this.storage = join(this.dir, 'data');
    this.logFile = join(this.dir, 'victoria-logs.log');
  }

  static async start(opts: VictoriaLogsOptions = {}): Promise<VictoriaLogs> {
    const vl = new VictoriaLogs(ensureGoProgram(VICTORIA_LOGS), opts);
    await vl.start();
    return vl;
  }

  get port(): number {
    return this.portValue;
  }
  get url(): string {
    return `http://127.0.0.1:${this.portValue}`;
  }
  get running(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Ingestion endpoints, as documented for the server. */
  get endpoints() {
    return {
      jsonline: `${this.url}/insert/jsonline`,
      loki: `${this.url}/insert/loki/api/v1/push`,
      elasticsearch: `${this.url}/insert/elasticsearch/_bulk`,
      elasticsearchBase: `${this.url}/insert/elasticsearch`,
      otlp: `${this.url}/insert/opentelemetry/v1/logs`,
    };
  }

  async start(): Promise<void> {
    if (this.running) return;
    if (this.portValue === 0) this.portValue = await freePort();
    this.logStream = createWriteStream(this.logFile, { flags: 'a' });
    this.child = spawnLogged(
      this.bin,
      [
        `-httpListenAddr=127.0.0.1:${this.portValue}`,
        `-storageDataPath=${this.storage}`,
        // Test data carries wall-clock timestamps; a wide window keeps any of it from being dropped as too old.
        '-retentionPeriod=100y',
        // Two shared cores and other suites running: keep the server's own appetite small.
        '-memory.allowedBytes=512MiB',
        '-loggerLevel=INFO',
        ...(this.opts.basicAuth ? [`-httpAuth.username=${this.opts.basicAuth.username}`, `-httpAuth.password=${this.opts.basicAuth.password}`] : []),
      ],
      this.logStream,
    );
    const health = `${this.url}/health`;
    await waitStarted(this.child, 'victoria-logs', async () => (await fetch(health, { headers: this.authHeaders, signal: AbortSignal.timeout(1000) })).ok, this.opts.startTimeoutMs ?? 30_000, this.logFile);
  }

  /** Graceful stop; the port and storage stay reserved for start(). */
  async stop(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (child) await terminate(child);
    this.logStream?.end();
    this.logStream = undefined;
  }

  /** Hard stop, as a crash would: the server loses what it had not flushed. */
  async kill(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (child && child.exitCode === null) {
      const done = exited(child);
      child.kill('SIGKILL');
      await done;
    }
    this.logStream?.end();
    this.logStream = undefined;
  }

  async dispose(): Promise<void> {
    await this.stop();
    if (!this.opts.keepStorage) rmSync(this.dir, { recursive: true, force: true });
  }

  logTail(lines = 40): string {
    return tailFile(this.logFile, lines);
  }

  private get authHeaders(): Record<string, string> {
    const a = this.opts.basicAuth;
    return a ? { authorization: `Basic ${Buffer.from(`${a.username}:${a.password}`).toString('base64')}` } : {};
  }

  /** Makes everything ingested so far visible to queries. */
  async flush(): Promise<void> {
    const res = await fetch(`${this.url}/internal/force_flush`, { headers: this.authHeaders });
    if (!res.ok) throw new Error(`force_flush: HTTP ${res.status} ${await res.text()}`);
  }

  /** Runs a LogsQL query over all time and returns the result rows. */
  async query(logsql: string, limit?: number): Promise<Record<string, string>[]> {
    await this.flush();
    const body = new URLSearchParams({ query: logsql, start: '0' });
    if (limit !== undefined) body.set('limit', String(limit));
    const res = await fetch(`${this.url}/select/logsql/query`, { method: 'POST', body, headers: this.authHeaders });
    const text = await res.text();
    if (!res.ok) throw new Error(`LogsQL ${JSON.stringify(logsql.slice(0, 300))}: HTTP ${res.status} ${text.slice(0, 500)}`);
    return text
      .split('\n')
      .filter((l) => l.length > 0)
      .map((l) => JSON.parse(l) as Record<string, string>);
  }

  /** Number of log entries matching a LogsQL filter. */
  async count(filter = '*'): Promise<number> {
    const rows = await this.query(`${filter} | stats count() as n`);
    return Number(rows[0]?.n ?? 0);
  }

  /** Entries matching `filter`, and how many distinct values `field` has among them. */
  async countWithDistinct(filter: string, field: string): Promise<{ total: number; distinct: number }> {
    const rows = await this.query(`${filter} | stats count() as total, count_uniq(${quoteField(field)}) as distinct`);
    return { total: Number(rows[0]?.total ?? 0), distinct: Number(rows[0]?.distinct ?? 0) };
  }
}

/** Quotes a field name for LogsQL when it has characters a bare name can't. */
export function quoteField(name: string): string {
  return /^[A-Za-z_][A-Za-z0-9_.]*$/.test(name) ? name : JSON.stringify(name);
}

/** An exact-match LogsQL filter `field:="value"`. */
export function exact(field: string, value: string): string {
  return `${quoteField(field)}:=${JSON.stringify(value)}`;
}
