// The shaping stage inside the pipeline, over real files in node mode: a
// rotation or the end of a file sends the event it ends with, and that file's
// checkpoint then reaches its end and is marked done.
import { appendFile, mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CHECKPOINT_FILE } from '../delivery/checkpoint.ts';
import { Pipeline } from '../pipeline.ts';
import { cri, testConfig, tmpDir, waitUntil } from '../../test/support/sidecar-helpers.ts';
import { NdjsonReceiver } from '../../test/support/ndjson-receiver.ts';

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

let tick = 0;
const TS = () => `2024-03-04T05:06:07.${String(++tick).padStart(9, '0')}Z`;
const text = (stream: 'stdout' | 'stderr', lines: string[]) => lines.map((l) => cri(TS(), stream, 'F', l)).join('');

const TB = ['Traceback (most recent call last):', '  File "/app/job.py", line 3, in <module>', '    run()', 'OSError: [Errno 28] No space left on device'];

async function setup(env: Record<string, string>) {
  const root = await tmpDir();
  const logDir = path.join(root, 'pod');
  const stateDir = path.join(root, 'state');
  await mkdir(path.join(logDir, 'main'), { recursive: true });
  const srv = await new NdjsonReceiver().start();
  cleanups.push(() => srv.stop());
  const config = testConfig({
    JOBHARVEST_SINK: 'http',
    JOBHARVEST_ENDPOINT: srv.url,
    JOBHARVEST_LOG_DIR: logDir,
    JOBHARVEST_STATE_DIR: stateDir,
    JOBHARVEST_POLL_MS: '50',
    JOBHARVEST_BATCH_MAX_WAIT_MS: '50',
    JOBHARVEST_TERMINATION_LOG: '',
    ...env,
  });
  const p = new Pipeline(config);
  await p.start();
  cleanups.push(async () => {
    await p.drain();
  });
  const checkpoint = async () => (JSON.parse(await readFile(path.join(stateDir, CHECKPOINT_FILE), 'utf8')) as { files: Record<string, { offset: number; done: boolean }> }).files;
  return { p, srv, log: path.join(logDir, 'main', '0.log'), checkpoint, messages: () => srv.accepted.map((d) => d.message) };
}

describe('shaping in the pipeline (node mode)', () => {
  it('a rotation sends the event the rotated file ends with, and that file is then done', async () => {
    const t = await setup({ JOBHARVEST_MULTILINE: 'python', JOBHARVEST_MULTILINE_FLUSH_MS: '600000' });
    const first = text('stdout', ['step 1']);
    await writeFile(t.log, first + text('stderr', TB.slice(0, 2)) + text('stdout', ['step 2']));
    await waitUntil(() => t.messages().includes('step 2'), 'the line after the start of the traceback');
    // Held: the traceback is not sent, and the checkpoint stays before its first line, although "step 2" after it is acknowledged.
    await new Promise((r) => setTimeout(r, 200));
    expect(t.messages()).toEqual(['step 1', 'step 2']);
    const before = Object.values(await t.checkpoint());
    expect(before).toHaveLength(1);
    expect(before[0]!.offset).toBe(Buffer.byteLength(first));
    await appendFile(t.log, text('stderr', TB.slice(2)));
    await rename(t.log, `${t.log}.20240304-050607`);
    await writeFile(t.log, text('stdout', ['after rotation']));
    await waitUntil(() => t.messages().includes(TB.join('\n')), 'the traceback, sent when its file was rotated away');
    await waitUntil(() => t.messages().includes('after rotation'), 'the new file');
    // The rotated file is read to its end and acknowledged: done in the checkpoint.
    const deadline = Date.now() + 5000;
    let done = false;
    while (!done && Date.now() < deadline) {
      done = Object.values(await t.checkpoint()).some((e) => e.done);
      if (!done) await new Promise((r) => setTimeout(r, 50));
    }
    expect(done).toBe(true);
    const summary = await t.p.drain();
    expect(summary).toMatchObject({ outcome: 'complete', lines_read: 7, lines_shipped: 7, multiline_records: 1, json_records: 0, masked: 0 });
  });

  it('the drain sends an open event; the counters reach the summary', async () => {
    const t = await setup({ JOBHARVEST_MULTILINE: 'python', JOBHARVEST_MULTILINE_FLUSH_MS: '600000', JOBHARVEST_PARSE: 'json', JOBHARVEST_MASK: 'all' });
    await writeFile(t.log, text('stdout', ['{"event":"login","token":"Bearer abc"}']) + text('stderr', TB));
    await waitUntil(() => t.messages().length === 1, 'the JSON line');
    const summary = await t.p.drain();
    expect(t.messages()).toEqual(['{"event":"login","token":"Bearer [MASKED]"}', TB.join('\n')]);
    expect(summary).toMatchObject({ outcome: 'complete', lines_read: 5, lines_shipped: 5, multiline_records: 1, json_records: 1, json_too_wide: 0, masked: 1 });
  });

  it('all off: the summary has no shaping counters', async () => {
    const t = await setup({});
    await writeFile(t.log, text('stdout', ['a', 'b']));
    await waitUntil(() => t.messages().length === 2, 'both lines');
    const summary = await t.p.drain();
    expect(summary).not.toHaveProperty('multiline_records');
    expect(summary).not.toHaveProperty('masked');
  });
});
