// Optional Prometheus endpoint (JOBHARVEST_METRICS_PORT). prom-client is only
// loaded when it is turned on; the counters read the pipeline's plain stats
// at scrape time, so the hot path never touches a metric object.
import http from 'node:http';
import type { Stats } from './stats.ts';

export interface MetricsGauges {
  inFlight(): number;
  openFiles(): number;
}

const COUNTERS: ReadonlyArray<readonly [keyof Stats, string, string]> = [
  ['linesRead', 'jobharvest_sidecar_lines_read_total', 'Records read from log files.'],
  ['bytesRead', 'jobharvest_sidecar_bytes_read_total', 'Log file bytes read.'],
  ['linesShipped', 'jobharvest_sidecar_lines_shipped_total', 'Records acknowledged by the sink.'],
  ['bytesShipped', 'jobharvest_sidecar_bytes_shipped_total', 'Log file bytes of acknowledged records.'],
  ['requests', 'jobharvest_sidecar_requests_total', 'Send attempts.'],
  ['retries', 'jobharvest_sidecar_retries_total', 'Retries after a retryable failure.'],
  ['linesDeadLettered', 'jobharvest_sidecar_dead_lettered_total', 'Records written to the dead-letter file after a permanent rejection.'],
  ['linesUnsent', 'jobharvest_sidecar_unsent_total', 'Records not acknowledged by the drain deadline (also in the dead-letter file).'],
  ['malformed', 'jobharvest_sidecar_malformed_lines_total', 'Lines that were not CRI, forwarded raw.'],
  ['truncated', 'jobharvest_sidecar_truncated_records_total', 'Records cut at the size cap.'],
  ['checkpointWrites', 'jobharvest_sidecar_checkpoint_writes_total', 'Checkpoint files written.'],
  ['deadLetterOverflowLines', 'jobharvest_sidecar_dead_letter_overflow_total', 'Dead-lettered or unsent records not written because the dead-letter file reached its cap.'],
  ['deadLetterOverflowBytes', 'jobharvest_sidecar_dead_letter_overflow_bytes_total', 'Log file bytes of the records not written because the dead-letter file reached its cap.'],
  ['resumeGaps', 'jobharvest_sidecar_resume_gaps_total', 'api mode: log streams resumed past a kubelet rotation; the lines in between are lost (their number is unknown).'],
  ['multilineRecords', 'jobharvest_sidecar_multiline_records_total', 'Records joined from several lines of one stream (JOBHARVEST_MULTILINE).'],
  ['jsonRecords', 'jobharvest_sidecar_json_records_total', 'Records whose JSON object became fields (JOBHARVEST_PARSE=json).'],
  ['jsonTooWide', 'jobharvest_sidecar_json_too_wide_total', 'JSON lines left a plain message for holding more than JOBHARVEST_JSON_MAX_FIELDS fields.'],
  ['masked', 'jobharvest_sidecar_masked_total', 'Matches replaced by a mask (JOBHARVEST_MASK, JOBHARVEST_MASK_PATTERNS).'],
  ['codecFallbacks', 'jobharvest_sidecar_codec_fallbacks_total', 'The log server refused JOBHARVEST_COMPRESSION=zstd and took the same body as gzip; gzip from then on.'],
  ['symlinksSkipped', 'jobharvest_sidecar_symlinks_skipped_total', 'Symlinks in the pod log directory, skipped rather than followed.'],
];

type PromClient = typeof import('prom-client');

export async function startMetrics(port: number, stats: Stats, gauges: MetricsGauges): Promise<{ close(): Promise<void> }> {
  const mod = await import('prom-client');
  // CommonJS module: bundled, its exports arrive as the default export.
  const prom = ((mod as unknown as { default?: typeof mod }).default ?? mod) as PromClient;
  const served = await serveMetrics(sidecarRegistry(prom, stats, gauges), port);
  return { close: served.close };
}

/** Every metric the sidecar serves, read at scrape time from its stats. */
export function sidecarRegistry(prom: PromClient, stats: Stats, gauges: MetricsGauges): InstanceType<PromClient['Registry']> {
  const registry = new prom.Registry();
  for (const [field, name, help] of COUNTERS) {
    new prom.Counter({
      name,
      help,
      registers: [registry],
      collect() {
        this.reset();
        this.inc(stats[field]);
      },
    });
  }
  new prom.Gauge({ name: 'jobharvest_sidecar_requests_in_flight', help: 'Batches being delivered.', registers: [registry], collect() { this.set(gauges.inFlight()); } });
  new prom.Gauge({ name: 'jobharvest_sidecar_open_files', help: 'Log files being followed.', registers: [registry], collect() { this.set(gauges.openFiles()); } });
  // Gauges: a file whose permissions are fixed is read after all and leaves the count.
  new prom.Gauge({ name: 'jobharvest_sidecar_unreadable_files', help: 'Log files and directories that exist but cannot be opened.', registers: [registry], collect() { this.set(stats.unreadableFiles); } });
  new prom.Gauge({ name: 'jobharvest_sidecar_unreadable_bytes', help: 'Size of the log files that cannot be opened.', registers: [registry], collect() { this.set(stats.unreadableBytes); } });
  return registry;
}

/**
 * Serves a prom-client registry at /metrics on `port` (0: any free port), for
 * the sidecar and the harvester alike; the server never keeps the process alive.
 */
export async function serveMetrics(registry: { metrics(): Promise<string>; contentType: string }, port: number): Promise<{ port: number; close(): Promise<void> }> {
  const server = http.createServer((req, res) => {
    if (req.url !== '/metrics') {
      res.writeHead(404).end();
      return;
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
      (err: Error) => res.writeHead(500).end(err.message),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, resolve);
  });
  server.unref();
  const address = server.address();
  return { port: typeof address === 'object' && address ? address.port : port, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}
