import { spawn } from 'node:child_process';
import { openSync, closeSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ensureGoProgram, OTELCOL } from '../../test/harness/servers/go-build.ts';
import { exited, terminate, track } from '../../test/support/process.ts';
import type { PeerRun } from './rsyslog-peer.ts';

/**
 * Starts the OpenTelemetry Collector (the pinned build in
 * test/harness/servers/otelcol) as a user would put it beside a Job: the
 * filelog receiver reading the pod's CRI file from its start with the
 * container operator, the batch processor and the otlphttp exporter, all at
 * their documented defaults except `gzipLevel` (1 = the sidecar's level;
 * undefined = the exporter's default gzip). Its own metrics are off, so no
 * telemetry port is opened on a shared machine.
 */
export function startOtelcolPeer(opts: { file: string; logsUrl: string; workDir: string; cpus?: string; gzipLevel?: number }): PeerRun & { logTail: () => string } {
  const conf = join(opts.workDir, 'otelcol.yaml');
  const exporter: Record<string, unknown> = { logs_endpoint: opts.logsUrl };
  if (opts.gzipLevel !== undefined) exporter.compression_params = { level: opts.gzipLevel };
  writeFileSync(
    conf,
    JSON.stringify({
      receivers: {
        // include_file_path: the container operator reads namespace, pod, container and restart from the path.
        filelog: { include: [opts.file], start_at: 'beginning', include_file_path: true, operators: [{ type: 'container' }] },
      },
      processors: { batch: {} },
      exporters: { otlphttp: exporter },
      service: {
        telemetry: { logs: { level: 'warn' }, metrics: { level: 'none' } },
        pipelines: { logs: { receivers: ['filelog'], processors: ['batch'], exporters: ['otlphttp'] } },
      },
    }),
  );
  const bin = ensureGoProgram(OTELCOL);
  const logFile = join(opts.workDir, 'otelcol.log');
  const out = openSync(logFile, 'a');
  const args = [`--config=file:${conf}`];
  const startedAt = Date.now();
  const stdio: ['ignore', number, number] = ['ignore', out, out];
  const child = opts.cpus ? spawn('taskset', ['-c', opts.cpus, bin, ...args], { stdio }) : spawn(bin, args, { stdio });
  closeSync(out);
  track(child);
  return {
    pid: child.pid ?? -1,
    startedAt,
    stop: () => terminate(child),
    exited: () => exited(child),
    logTail: () => readFileSync(logFile, 'utf8').split('\n').slice(-30).join('\n'),
  };
}
