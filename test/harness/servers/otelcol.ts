import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { freePort } from '../../support/ports.ts';
import { ReceiverProcess } from '../receiver.ts';
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
export class OtelCollector extends ReceiverProcess {
  private constructor(
    bin: string,
    port: number,
    private readonly logsEndpoint: string,
    private readonly options: CollectorOptions,
  ) {
    super(bin, port, 'jh-otelcol-', { name: 'otelcol', logName: 'otelcol.log', startTimeoutMs: 30_000 });
  }

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

  protected args(): string[] {
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
    return [`--config=file:${config}`];
  }

  /** Any HTTP answer means the receiver is listening. */
  protected ready(): Promise<boolean> {
    return fetch(this.logsUrl, { signal: AbortSignal.timeout(1000) }).then(() => true);
  }
}
