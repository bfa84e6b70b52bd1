import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { canConnect, freePort } from '../../support/ports.ts';
import { ReceiverProcess } from '../receiver.ts';
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
export class ForwardReceiver extends ReceiverProcess {
  private constructor(bin: string, port: number) {
    super(bin, port, 'jh-forward-', { name: 'otelcol', logName: 'otelcol.log', startTimeoutMs: 30_000 });
  }

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

  protected args(): string[] {
    return [`--config=file:${join(this.dir, 'config.yaml')}`];
  }

  protected ready(): Promise<boolean> {
    return canConnect(this.port);
  }

  /** Every record written so far (complete lines only; the exporter writes one request per line). */
  received(): ReceivedForward[] {
    const out: ReceivedForward[] = [];
    for (const line of this.outputLines(this.outFile, true)) {
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
}
