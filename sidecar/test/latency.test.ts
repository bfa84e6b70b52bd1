// The first request must not wait for the batch timer when the reader has
// reached the end of what is there and nothing is in flight.
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Pipeline } from '../pipeline.ts';
import { cri, testConfig, tmpDir } from '../../test/support/sidecar-helpers.ts';
import { NdjsonReceiver } from '../../test/support/ndjson-receiver.ts';

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe('first request', () => {
  it('is sent as soon as the reader is at EOF, not after BATCH_MAX_WAIT_MS; later lines batch while a request is in flight', async () => {
    const sink = await new NdjsonReceiver().start();
    cleanups.push(() => sink.stop());
    let release: (() => void) | undefined;
    const held = new Promise<void>((r) => (release = r));
    sink.handler = (_docs, _req, res) => {
      // Hold the first answer, so that the next lines arrive while a request is in flight.
      if (sink.requests === 1) void held.then(() => res.writeHead(200).end('{}'));
      else res.writeHead(200).end('{}');
      return false;
    };
    const root = await tmpDir();
    const log = path.join(root, 'pod', 'main', '0.log');
    await mkdir(path.dirname(log), { recursive: true });
    await writeFile(log, cri('2024-01-01T00:00:00.000000001Z', 'stdout', 'F', 'first'));
    const p = new Pipeline(
      testConfig({
        JOBHARVEST_SINK: 'http',
        JOBHARVEST_ENDPOINT: sink.url,
        JOBHARVEST_LOG_DIR: path.join(root, 'pod'),
        JOBHARVEST_STATE_DIR: path.join(root, 'state'),
        JOBHARVEST_BATCH_MAX_WAIT_MS: '10000',
        JOBHARVEST_POLL_MS: '50',
      }),
    );
    const started = Date.now();
    await p.start();
    cleanups.push(() => p.drain());
    while (sink.requests === 0) {
      if (Date.now() - started > 5000) throw new Error('no request within 5 s');
      await new Promise((r) => setTimeout(r, 10));
    }
    expect(Date.now() - started).toBeLessThan(2000);
    // One request in flight: new lines wait for the batch to fill or its timer.
    for (let i = 0; i < 5; i++) {
      await writeFile(log, cri(`2024-01-01T00:00:00.00000000${i + 2}Z`, 'stdout', 'F', `more ${i}`), { flag: 'a' });
      await new Promise((r) => setTimeout(r, 60));
    }
    expect(sink.requests).toBe(1);
    release!();
    // The answer frees the pipe; the next read (or the drain) sends the rest together.
    await p.drain();
    expect(sink.received.map((d) => d.message)).toEqual(['first', 'more 0', 'more 1', 'more 2', 'more 3', 'more 4']);
    expect(sink.requests).toBe(2);
  });
});
