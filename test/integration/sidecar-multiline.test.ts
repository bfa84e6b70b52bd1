// The built sidecar with JOBHARVEST_MULTILINE=python in node mode, killed
// and restarted in the middle of a traceback, and with a rotation in the
// middle of another: every line arrives, events are whole where no rotation
// split them, and a record keeps its id when it is sent again.
import { afterEach, describe, expect, it } from 'vitest';
import { NdjsonReceiver, type Doc } from '../support/ndjson-receiver.ts';
import { PodScenario } from '../support/pod-scenario.ts';
import type { SidecarProcess } from '../support/sidecar.ts';
import { summaryNumber } from '../support/sidecar.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until(what: string, cond: () => boolean, ms = 30_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

describe('sidecar: multiline events across SIGKILL and rotation', () => {
  let pod: PodScenario | undefined;
  let sidecar: SidecarProcess | undefined;
  let receiver: NdjsonReceiver | undefined;

  afterEach(async () => {
    if (sidecar && sidecar.child.exitCode === null) await sidecar.kill();
    sidecar = undefined;
    await receiver?.stop();
    receiver = undefined;
    pod?.dispose();
    pod = undefined;
  });

  it('every line arrives once joined, and ids are stable', async () => {
    receiver = await new NdjsonReceiver().start();
    pod = new PodScenario('multiline');
    const p = pod;
    const main = p.writer.container('main');
    const written: string[] = [];
    const write = (stream: 'stdout' | 'stderr', lines: string[]) => {
      for (const l of lines) {
        main.write(stream, l);
        written.push(l);
      }
    };
    // A flush timeout far beyond the test: an event goes out only when a line ends it, its file ends, or the drain.
    const start = () => p.startSidecar('http', receiver!.url, { MULTILINE: 'python', MULTILINE_FLUSH_MS: '600000', BATCH_MAX_WAIT_MS: '50', POLL_MS: '50' });
    const messages = () => receiver!.accepted.map((d) => d.message);

    const tb1 = ['Traceback (most recent call last):', '  File "/app/train.py", line 88, in <module>', '    main()', '  File "/app/train.py", line 80, in main', '    step(batch)', 'RuntimeError: CUDA out of memory'];
    sidecar = start();
    write('stdout', ['epoch 1 loss=0.9']);
    write('stderr', tb1.slice(0, 3));
    // A line of the other stream after the traceback's start: acknowledged, it still must not move the checkpoint past the held lines.
    write('stdout', ['epoch 2 loss=0.7']);
    await until('the line written after the start of the traceback', () => messages().includes('epoch 2 loss=0.7'));
    // Let the acknowledgement reach the checkpoint file.
    await sleep(500);
    expect(messages().some((m) => m.startsWith('Traceback'))).toBe(false);
    await sidecar.kill();

    write('stderr', tb1.slice(3));
    write('stdout', ['epoch 3 loss=0.5']);
    // After the exception line a chained one may follow: the next line of the stream tells.
    write('stderr', ['restarting from the last checkpoint']);
    sidecar = start();
    await until('the whole first traceback', () => messages().includes(tb1.join('\n'))).catch((err: Error) => {
      throw new Error(`${err.message}; received: ${JSON.stringify(messages())}\n${sidecar?.tail()}`);
    });

    // A rotation in the middle of the second traceback: its first part goes out with the rotated file.
    const tb2 = ['Traceback (most recent call last):', '  File "/app/eval.py", line 12, in <module>', '    load()', '  File "/app/eval.py", line 5, in load', "    open(path)", "FileNotFoundError: [Errno 2] No such file or directory: 'x'"];
    write('stderr', tb2.slice(0, 3));
    await sleep(300);
    main.rotate();
    write('stderr', tb2.slice(3));
    write('stdout', ['done']);
    await until('the last line', () => messages().includes('done'));

    const exit = await sidecar.stop();
    expect(exit.code, sidecar.tail()).toBe(0);
    expect(summaryNumber(exit.summary, 'lines_unsent')).toBe(0);
    expect(summaryNumber(exit.summary, 'multiline_records')).toBeGreaterThanOrEqual(2);

    // Every line arrived; at-least-once allows a re-sent record, never a missing line.
    const distinct = new Map<string, Doc>();
    for (const d of receiver.accepted) {
      const seen = distinct.get(d.message);
      // A record sent again (after the kill) keeps its id.
      if (seen) expect(d.id, d.message).toBe(seen.id);
      distinct.set(d.message, d);
    }
    const lines = [...distinct.keys()].flatMap((m) => m.split('\n'));
    expect(lines.sort()).toEqual([...written].sort());
    // One id per distinct record.
    expect(new Set([...distinct.values()].map((d) => d.id)).size).toBe(distinct.size);
    // The traceback cut by the kill arrived whole, once joined; the one cut by the rotation in two records, the first of them joined.
    expect(distinct.has(tb1.join('\n'))).toBe(true);
    expect(distinct.has(tb2.slice(0, 3).join('\n'))).toBe(true);
    expect([...distinct.keys()].filter((m) => m.includes('Traceback'))).toHaveLength(2);
  });
});
