import type { ChildProcess } from 'node:child_process';
import { createWriteStream, mkdtempSync, rmSync, writeFileSync, type WriteStream } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../support/ports.ts';
import { spawnLogged, tailFile, terminate, waitStarted } from '../../support/process.ts';
import { OTELCOL, ensureGoProgram } from './go-build.ts';

export interface CollectorOptions {
  /** The receiver's `compression_algorithms`: the Content-Encodings it decodes (its default: all it knows, zstd among them). */
  readonly compressionAlgorithms?: readonly string[];
}

/**
 * A real OpenTelemetry Collector (OTLP/HTTP receiver → OTLP/HTTP protobuf
 * exporter), used in front of VictoriaLogs for senders that speak OTLP JSON,
 * which VictoriaLogs does not ingest. The exporter's queue is off, so the
 * collector answers a request only after VictoriaLogs has accepted it: an
 * acknowledgement still means stored.
 */
export class OtelCollector {
  private child: ChildProcess | undefined;
  private logStream: WriteStream | undefined;
  private readonly dir = mkdtempSync(join(tmpdir(), 'jh-otelcol-'));
  private constructor(
    private readonly bin: string,
    readonly port: number,
    private readonly logsEndpoint: string,
    private readonly options: CollectorOptions,
  ) {}

  /** Starts a collector that forwards logs to `logsEndpoint` (a full OTLP/HTTP logs URL). */
  static async start(logsEndpoint: string, options: CollectorOptions = {}): Promise<OtelCollector> {
    const c = new OtelCollector(ensureGoProgram(OTELCOL), await freePort(), logsEndpoint, options);
    await c.run();
    return c;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }
  /** The OTLP/HTTP logs endpoint senders post to. */
  get logsUrl(): string {
    return `${this.url}/v1/logs`;
  }
  get logFile(): string {
    return join(this.dir, 'otelcol.log');
  }

  private async run(): Promise<void> {
    const config = join(this.dir, 'config.yaml');
    writeFileSync(
      config,
      JSON.stringify({
        receivers: {
          otlp: {
            protocols: {
              http: {
                endpoint: `127.0.0.1:${this.port}`,
                ...(this.options.compressionAlgorithms ? { compression_algorithms: this.options.compressionAlgorithms } : {}),
              },
            },
          },
        },
        exporters: {
          otlphttp: {
            logs_endpoint: this.logsEndpoint,
            encoding: 'proto',
            sending_queue: { enabled: false },
            retry_on_failure: { enabled: true, max_elapsed_time: '60s' },
          },
        },
        service: {
          telemetry: { logs: { level: 'warn' }, metrics: { level: 'none' } },
          pipelines: { logs: { receivers: ['otlp'], exporters: ['otlphttp'] } },
        },
      }),
    );
    this.logStream = createWriteStream(this.logFile, { flags: 'a' });
    this.child = spawnLogged(this.bin, [`--config=file:${config}`], this.logStream);
    // Any HTTP answer means the receiver is listening.
    await waitStarted(this.child, 'otelcol', () => fetch(this.logsUrl, { signal: AbortSignal.timeout(1000) }).then(() => true), 30_000, this.logFile);
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
