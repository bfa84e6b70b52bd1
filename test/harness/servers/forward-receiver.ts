import type { ChildProcess } from 'node:child_process';
import { createWriteStream, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync, type WriteStream } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { canConnect, freePort } from '../../support/ports.ts';
import { exited, spawnLogged, tailFile, terminate, waitStarted } from '../../support/process.ts';
import { OTELCOL, ensureGoProgram } from './go-build.ts';

/** One log record as the collector wrote it: body, attributes and time. */
export interface ReceivedForward {
  body: string;
  timeUnixNano: string;
  attributes: Record<string, string | number | boolean>;
}

type OtlpValue = { stringValue?: string; intValue?: string | number; boolValue?: boolean; doubleValue?: number };

function plain(v: OtlpValue | undefined): string | number | boolean {
  if (!v) return '';
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.doubleValue !== undefined) return v.doubleValue;
  return JSON.stringify(v);
}

/**
 * A real Fluentd forward receiver: the OpenTelemetry Collector's
 * fluentforward receiver (built from the pinned Go modules in
 * test/harness/servers/otelcol) feeding the file exporter. The receiver sends
 * {"ack": chunk} only after the pipeline (here: the file writer) took the
 * chunk. The file is appended to across restarts; a SIGTERM restart flushes
 * it first.
 */
export class ForwardReceiver {
  private child: ChildProcess | undefined;
  private logStream: WriteStream | undefined;
  readonly dir = mkdtempSync(join(tmpdir(), 'jh-forward-'));
  private constructor(
    private readonly bin: string,
    readonly port: number,
  ) {}

  static async start(): Promise<ForwardReceiver> {
    const r = new ForwardReceiver(ensureGoProgram(OTELCOL), await freePort());
    r.writeConfig();
    await r.run();
    return r;
  }

  get endpoint(): string {
    return `tcp://127.0.0.1:${this.port}`;
  }
  get outFile(): string {
    return join(this.dir, 'logs.jsonl');
  }
  get logFile(): string {
    return join(this.dir, 'otelcol.log');
  }

  private writeConfig(): void {
    writeFileSync(
      join(this.dir, 'config.yaml'),
      JSON.stringify({
        receivers: { fluentforward: { endpoint: `127.0.0.1:${this.port}` } },
        exporters: { file: { path: this.outFile, format: 'json', append: true, flush_interval: '100ms' } },
        service: {
          telemetry: { logs: { level: 'warn' }, metrics: { level: 'none' } },
          pipelines: { logs: { receivers: ['fluentforward'], exporters: ['file'] } },
        },
      }),
    );
  }

  private async run(): Promise<void> {
    this.logStream ??= createWriteStream(this.logFile, { flags: 'a' });
    this.child = spawnLogged(this.bin, [`--config=file:${join(this.dir, 'config.yaml')}`], this.logStream);
    await waitStarted(this.child, 'otelcol', () => canConnect(this.port), 30_000, this.logFile);
  }

  /** SIGTERM (the collector shuts down gracefully, flushing the file), then start again on the same port. */
  async restart(downMs = 0): Promise<void> {
    if (this.child) {
      const done = exited(this.child);
      this.child.kill('SIGTERM');
      await done;
    }
    if (downMs > 0) await new Promise((r) => setTimeout(r, downMs));
    await this.run();
  }

  /** Every record written so far (complete lines only; the exporter writes one request per line). */
  received(): ReceivedForward[] {
    if (!existsSync(this.outFile)) return [];
    const out: ReceivedForward[] = [];
    const text = readFileSync(this.outFile, 'utf8');
    const complete = text.slice(0, text.lastIndexOf('\n') + 1);
    for (const line of complete.split('\n')) {
      if (line === '') continue;
      const req = JSON.parse(line) as {
        resourceLogs?: Array<{ scopeLogs?: Array<{ logRecords?: Array<{ body?: OtlpValue; timeUnixNano?: string; attributes?: Array<{ key: string; value: OtlpValue }> }> }> }>;
      };
      for (const rl of req.resourceLogs ?? [])
        for (const sl of rl.scopeLogs ?? [])
          for (const lr of sl.logRecords ?? []) {
            const attributes: ReceivedForward['attributes'] = {};
            for (const a of lr.attributes ?? []) attributes[a.key] = plain(a.value);
            out.push({ body: String(plain(lr.body)), timeUnixNano: lr.timeUnixNano ?? '', attributes });
          }
    }
    return out;
  }

  logTail(lines = 40): string {
    return tailFile(this.logFile, lines);
  }

  async dispose(): Promise<void> {
    if (this.child) await terminate(this.child);
    this.child = undefined;
    this.logStream?.end();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
