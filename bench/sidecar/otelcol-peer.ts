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
 * their documented defaults except `compression` (gzip or zstd at level 1 =
 * the sidecar's; undefined = the exporter's default gzip). Its own metrics are off, so no
 * telemetry port is opened on a shared machine. With `shaping`, the container
 * operator is followed by the sidecar's record shaping as the Collector does
 * it (see shapingOperators).
 */
/** The exporter's codec and level (its `compression` and `compression_params`). */
export interface PeerCompression {
  readonly codec: 'gzip' | 'zstd';
  readonly level: number;
}

export function startOtelcolPeer(opts: { file: string; logsUrl: string; workDir: string; cpus?: string; compression?: PeerCompression; shaping?: Shaping }): PeerRun & { logTail: () => string } {
  const conf = join(opts.workDir, 'otelcol.yaml');
  const exporter: Record<string, unknown> = { logs_endpoint: opts.logsUrl };
  if (opts.compression !== undefined) {
    exporter.compression = opts.compression.codec;
    exporter.compression_params = { level: opts.compression.level };
  }
  const operators: unknown[] = [{ type: 'container' }, ...(opts.shaping ? shapingOperators(opts.shaping) : [])];
  writeFileSync(
    conf,
    JSON.stringify({
      receivers: {
        // include_file_path: the container operator reads namespace, pod, container and restart from the path.
        filelog: { include: [opts.file], start_at: 'beginning', include_file_path: true, operators },
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

/** The sidecar's JOBHARVEST_MULTILINE_* and JOBHARVEST_PARSE=json, as settings both sides get. */
export interface Shaping {
  /** RE2 start-of-event pattern: JOBHARVEST_MULTILINE_START on the sidecar, recombine's is_first_entry here. */
  eventStart: string;
  /** JOBHARVEST_MULTILINE_MAX_LINES. */
  maxLines: number;
  /** JOBHARVEST_MULTILINE_MAX_BYTES. */
  maxBytes: number;
  /** JOBHARVEST_MULTILINE_FLUSH_MS. */
  flushMs: number;
}

/**
 * The filelog operators that do what the sidecar does with multiline joining
 * and JSON parsing on, from the same settings:
 * - `recombine` joins a line that does not match the start pattern to the one
 *   before it (is_first_entry; the Collector's regexp is Go's, RE2 syntax like
 *   the sidecar's re2js, so the pattern means the same on both sides), per
 *   stream (source_identifier log.iostream, which the container operator sets;
 *   the sidecar joins within one container stream), with the sidecar's bounds
 *   (lines, bytes) and its flush period for a record that gets no next line;
 * - `json_parser` parses a body that is a JSON object into attributes (its
 *   default parse_to), and leaves any other body alone: it only looks at
 *   bodies that start with `{`, and a body that still fails to parse passes on
 *   unchanged (send_quiet), as the sidecar keeps such a line a plain message.
 *   The Collector has no counterpart of JOBHARVEST_JSON_MAX_FIELDS/DEPTH; the
 *   corpus's objects are within the sidecar's defaults (64 fields, depth 4).
 */
export function shapingOperators(s: Shaping): unknown[] {
  // expr-lang string literals take the escapes JSON does.
  const matches = (re: string) => `body matches ${JSON.stringify(re)}`;
  return [
    {
      type: 'recombine',
      combine_field: 'body',
      combine_with: '\n',
      is_first_entry: matches(s.eventStart),
      source_identifier: 'attributes["log.iostream"]',
      max_batch_size: s.maxLines,
      max_log_size: String(s.maxBytes),
      force_flush_period: `${s.flushMs}ms`,
    },
    { type: 'json_parser', if: matches(String.raw`^\s*\{`), on_error: 'send_quiet' },
  ];
}
