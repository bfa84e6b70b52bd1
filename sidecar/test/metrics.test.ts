import { get } from 'node:http';
import { describe, expect, it } from 'vitest';
import { freePort } from '../../test/support/ports.ts';
import { startMetrics } from '../metrics.ts';
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
