import { get } from 'node:http';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { canConnect, freePort } from '../../test/support/ports.ts';
import { NdjsonReceiver } from '../../test/support/ndjson-receiver.ts';
import { cri, testConfig, tmpDir, waitUntil } from '../../test/support/sidecar-helpers.ts';
import { startMetrics } from '../metrics.ts';
import { SidecarPipeline } from '../run.ts';
import { newStats } from '../stats.ts';

function scrape(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    get({ host: '127.0.0.1', port, path: '/metrics' }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve(text));
    }).on('error', reject);
  });
}

describe('sidecar metrics', () => {
  it('carry no labels at all: nothing a log file, a server or an error says can become a series', async () => {
    const stats = newStats();
    Object.assign(stats, { unreadableFiles: 2, unreadableBytes: 300, deadLetterOverflowLines: 7, deadLetterOverflowBytes: 900, symlinksSkipped: 1 });
    const port = await freePort();
    const m = await startMetrics(port, stats, { inFlight: () => 1, openFiles: () => 3 });
    try {
      const samples = (await scrape(port)).split('\n').filter((l) => l !== '' && !l.startsWith('#'));
      expect(samples.length).toBeGreaterThan(10);
      for (const s of samples) expect(s, s).toMatch(/^jobharvest_sidecar_[a-z_]+ -?\d+(\.\d+)?$/);
      expect(samples).toEqual(
        expect.arrayContaining([
          'jobharvest_sidecar_unreadable_files 2',
          'jobharvest_sidecar_unreadable_bytes 300',
          'jobharvest_sidecar_dead_letter_overflow_total 7',
          'jobharvest_sidecar_dead_letter_overflow_bytes_total 900',
          'jobharvest_sidecar_symlinks_skipped_total 1',
        ]),
      );
    } finally {
      await m.close();
    }
  });
});

describe('the sidecar pipeline with JOBHARVEST_METRICS_PORT', () => {
  it("serves the engine's counters and gauges while it runs, and stops serving once drained", async () => {
    const root = await tmpDir();
    const logDir = path.join(root, 'pod');
    await mkdir(path.join(logDir, 'main'), { recursive: true });
    await writeFile(path.join(logDir, 'main', '0.log'), cri('2024-03-04T05:06:07.000000001Z', 'stdout', 'F', 'one') + cri('2024-03-04T05:06:07.000000002Z', 'stdout', 'F', 'two'));
    const srv = await new NdjsonReceiver().start();
    const port = await freePort();
    const p = new SidecarPipeline(
      testConfig({ JOBHARVEST_SINK: 'http', JOBHARVEST_ENDPOINT: srv.url, JOBHARVEST_LOG_DIR: logDir, JOBHARVEST_STATE_DIR: path.join(root, 'state'), JOBHARVEST_POLL_MS: '50', JOBHARVEST_BATCH_MAX_WAIT_MS: '50', JOBHARVEST_METRICS_PORT: String(port) }),
    );
    try {
      await p.start();
      await waitUntil(() => srv.accepted.length >= 2, '2 lines');
      const samples = (await scrape(port)).split('\n');
      expect(samples).toEqual(expect.arrayContaining(['jobharvest_sidecar_lines_shipped_total 2', 'jobharvest_sidecar_open_files 1', 'jobharvest_sidecar_requests_in_flight 0']));
      expect((await p.drain()).lines_shipped).toBe(2);
      expect(await canConnect(port)).toBe(false);
    } finally {
      await p.drain();
      await srv.stop();
    }
  });
});
