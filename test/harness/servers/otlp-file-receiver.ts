import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { freePort } from '../../support/ports.ts';
import { ReceiverProcess } from '../receiver.ts';
import { OTELCOL, ensureGoProgram } from './go-build.ts';

/** An OTLP AnyValue as the collector's JSON marshaller writes it. */
export interface OtlpAnyValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: string | number;
  doubleValue?: number;
  arrayValue?: { values?: OtlpAnyValue[] };
  kvlistValue?: { values?: Array<{ key: string; value?: OtlpAnyValue }> };
}

/** One log record as the collector decoded it, its resource's attributes beside it. */
export interface CollectedLog {
  resource: Record<string, unknown>;
  body: unknown;
  attributes: Record<string, unknown>;
  severityNumber?: number;
  severityText?: string;
  timeUnixNano: string;
}

/** An AnyValue as plain JSON: maps become objects, arrays arrays, int64 numbers. */
export function plainValue(v: OtlpAnyValue | undefined): unknown {
  if (!v) return null;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.arrayValue !== undefined) return (v.arrayValue.values ?? []).map(plainValue);
  if (v.kvlistValue !== undefined) return Object.fromEntries((v.kvlistValue.values ?? []).map((e) => [e.key, plainValue(e.value)]));
  return null;
}

const plainAttributes = (list: Array<{ key: string; value?: OtlpAnyValue }> | undefined) => Object.fromEntries((list ?? []).map((a) => [a.key, plainValue(a.value)]));

/**
 * A real OpenTelemetry Collector as an OTLP/HTTP receiver (protobuf and
 * JSON) feeding the file exporter: what the collector's own decoder made of
 * each record, body maps and attributes included, read back from its file.
 * VictoriaLogs behind a collector would flatten a map body; the file keeps
 * the OTLP shape.
 */
export class OtlpFileReceiver extends ReceiverProcess {
  private constructor(bin: string, port: number) {
    super(bin, port, 'jh-otlp-file-', { name: 'otelcol', logName: 'otelcol.log', startTimeoutMs: 30_000 });
  }

  static async start(): Promise<OtlpFileReceiver> {
    const r = new OtlpFileReceiver(ensureGoProgram(OTELCOL), await freePort());
    r.writeConfig();
    await r.run();
    return r;
  }

  /** The OTLP/HTTP logs endpoint senders post to. */
  get logsUrl(): string {
    return `http://127.0.0.1:${this.port}/v1/logs`;
  }
  get outFile(): string {
    return join(this.dir, 'logs.jsonl');
  }

  private writeConfig(): void {
    writeFileSync(
      join(this.dir, 'config.yaml'),
      JSON.stringify({
        receivers: { otlp: { protocols: { http: { endpoint: `127.0.0.1:${this.port}` } } } },
        exporters: { file: { path: this.outFile, format: 'json', append: true, flush_interval: '100ms' } },
        service: {
          telemetry: { logs: { level: 'warn' }, metrics: { level: 'none' } },
          pipelines: { logs: { receivers: ['otlp'], exporters: ['file'] } },
        },
      }),
    );
  }

  protected args(): string[] {
    return [`--config=file:${join(this.dir, 'config.yaml')}`];
  }

  /** Any HTTP answer means the receiver is listening. */
  protected ready(): Promise<boolean> {
    return fetch(this.logsUrl, { signal: AbortSignal.timeout(1000) }).then(() => true);
  }

  /** Every record written so far (complete lines only; the exporter writes one request per line). */
  received(): CollectedLog[] {
    const out: CollectedLog[] = [];
    for (const line of this.outputLines(this.outFile, true)) {
      const req = JSON.parse(line) as {
        resourceLogs?: Array<{
          resource?: { attributes?: Array<{ key: string; value?: OtlpAnyValue }> };
          scopeLogs?: Array<{ logRecords?: Array<{ body?: OtlpAnyValue; attributes?: Array<{ key: string; value?: OtlpAnyValue }>; severityNumber?: number; severityText?: string; timeUnixNano?: string }> }>;
        }>;
      };
      for (const rl of req.resourceLogs ?? []) {
        const resource = plainAttributes(rl.resource?.attributes);
        for (const sl of rl.scopeLogs ?? [])
          for (const lr of sl.logRecords ?? []) {
            out.push({
              resource,
              body: plainValue(lr.body),
              attributes: plainAttributes(lr.attributes),
              ...(lr.severityNumber !== undefined ? { severityNumber: lr.severityNumber } : {}),
              ...(lr.severityText !== undefined ? { severityText: lr.severityText } : {}),
              timeUnixNano: lr.timeUnixNano ?? '',
            });
          }
      }
    }
    return out;
  }
}
