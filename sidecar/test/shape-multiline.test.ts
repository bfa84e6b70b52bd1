import { afterEach, describe, expect, it, vi } from 'vitest';
import { ConfigError } from '../config.ts';
import { customRule } from '../shape/multiline-rules.ts';
import { recordId } from '../records/record.ts';
import { harness, Lines, shaping } from './shape-helpers.ts';

const PYTHON = `Starting job
Traceback (most recent call last):
  File "/app/main.py", line 10, in <module>
    main()
  File "/app/main.py", line 6, in main
    return 1 / 0
           ~~^~~
ZeroDivisionError: division by zero
Job finished`;

const PYTHON_CHAINED = `Traceback (most recent call last):
  File "/app/x.py", line 3, in <module>
    d["k"]
    ~^^^^^
KeyError: 'k'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/app/x.py", line 5, in <module>
    raise ValueError("bad")
ValueError: bad

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/app/x.py", line 7, in <module>
    raise RuntimeError("worse") from e
RuntimeError: worse
retrying in 5s`;

const JAVA = `2024-05-06 07:08:09 ERROR App - request failed
java.lang.IllegalStateException: boom
\tat com.example.App.run(App.java:42)
\tat com.example.App.main(App.java:10)
Caused by: java.io.IOException: disk full
\tat com.example.Store.write(Store.java:7)
\t... 1 more
Exception in thread "worker-1" java.lang.NullPointerException: Cannot invoke "String.length()" because "s" is null
\tat com.example.Worker.run(Worker.java:17)
\tat java.base/java.lang.Thread.run(Thread.java:1583)
2024-05-06 07:08:10 INFO App - retrying`;

const GO = `starting worker
panic: runtime error: index out of range [5] with length 3

goroutine 1 [running]:
main.process(...)
\t/app/main.go:12
main.main()
\t/app/main.go:8 +0x1d

goroutine 6 [chan receive]:
main.worker(0xc000012345)
\t/app/worker.go:20 +0x45
created by main.main in goroutine 1
\t/app/main.go:7 +0x66
exit status 2
after`;

const NODE = `server listening on 8080
/app/index.js:3
  throw new Error('boom');
  ^

Error: boom
    at Object.<anonymous> (/app/index.js:3:9)
    at Module._compile (node:internal/modules/cjs/loader:1554:14)
    at node:internal/main/run_main_module:36:49

Node.js v22.14.0
bye
TypeError: Cannot read properties of undefined (reading 'x')
    at f (/app/a.js:1:20)
    at /app/a.js:4:3 {
  code: 'ERR_X'
}
done`;

async function run(env: Record<string, string>, text: string) {
  const h = harness(shaping(env));
  const lines = new Lines();
  await h.shaper.push(lines.make(text));
  await h.shaper.flush();
  return h;
}

const blocks = (text: string, cuts: number[][]): string[] => {
  const lines = text.split('\n');
  return cuts.map(([a, b]) => lines.slice(a, b).join('\n'));
};

describe('multiline built-in rules', () => {
  it('python: a traceback with the lines around it', async () => {
    const h = await run({ MULTILINE: 'python' }, PYTHON);
    expect(h.messages()).toEqual(blocks(PYTHON, [[0, 1], [1, 8], [8, 9]]));
    expect(h.out[1]!.lines).toBe(7);
    expect(h.out[0]!.lines).toBeUndefined();
    expect(h.stats.multilineRecords).toBe(1);
    expect(h.stats.linesRead).toBe(9);
  });

  it('python: chained exceptions stay one event; a blank line after the last exception is not taken', async () => {
    const h = await run({ MULTILINE: 'python' }, PYTHON_CHAINED);
    expect(h.messages()).toEqual(blocks(PYTHON_CHAINED, [[0, 19], [19, 20]]));
    const trailing = await run({ MULTILINE: 'python' }, 'Traceback (most recent call last):\n  File "a.py", line 1\nValueError: x\n\nnext');
    expect(trailing.messages()).toEqual(['Traceback (most recent call last):\n  File "a.py", line 1\nValueError: x', '', 'next']);
  });

  it('python 3.11+: an exception group, drawn indented', async () => {
    const group = [
      '  + Exception Group Traceback (most recent call last):',
      '  |   File "/app/tasks.py", line 9, in <module>',
      '  |     raise ExceptionGroup("many", [ValueError(1), TypeError(2)])',
      '  | ExceptionGroup: many (2 sub-exceptions)',
      '  +-+---------------- 1 ----------------',
      '    | ValueError: 1',
      '    +---------------- 2 ----------------',
      '    | TypeError: 2',
      '    +------------------------------------',
    ];
    const h = await run({ MULTILINE: 'python' }, ['before', ...group, 'after'].join('\n'));
    expect(h.messages()).toEqual(['before', group.join('\n'), 'after']);
  });

  it('java: exception, frames, Caused by and "... N more"', async () => {
    const h = await run({ MULTILINE: 'java' }, JAVA);
    expect(h.messages()).toEqual(blocks(JAVA, [[0, 1], [1, 7], [7, 10], [10, 11]]));
  });

  it('go: a panic dump with blank lines and several goroutines', async () => {
    const h = await run({ MULTILINE: 'go' }, GO);
    expect(h.messages()).toEqual(blocks(GO, [[0, 1], [1, 15], [15, 16]]));
  });

  it("nodejs: Node's location, source and caret preamble, the stack, properties and the version line", async () => {
    const h = await run({ MULTILINE: 'nodejs' }, NODE);
    expect(h.messages()).toEqual(blocks(NODE, [[0, 1], [1, 11], [11, 12], [12, 17], [17, 18]]));
  });

  it('all rules at once over all the samples', async () => {
    const text = [PYTHON, JAVA, GO, NODE].join('\n');
    const h = await run({ MULTILINE: 'python,java,go,nodejs' }, text);
    const expected = [
      ...blocks(PYTHON, [[0, 1], [1, 8], [8, 9]]),
      ...blocks(JAVA, [[0, 1], [1, 7], [7, 10], [10, 11]]),
      ...blocks(GO, [[0, 1], [1, 15], [15, 16]]),
      ...blocks(NODE, [[0, 1], [1, 11], [11, 12], [12, 17], [17, 18]]),
    ];
    expect(h.messages()).toEqual(expected);
  });

  it('a preamble that turns out not to be one goes out line by line', async () => {
    const h = await run({ MULTILINE: 'nodejs' }, 'config.js:12\nloaded\nok');
    expect(h.messages()).toEqual(['config.js:12', 'loaded', 'ok']);
  });

  it('lines of the two streams are joined apart', async () => {
    const h = harness(shaping({ MULTILINE: 'python' }));
    const l = new Lines();
    const tb = PYTHON.split('\n').slice(1, 8);
    for (const [i, line] of tb.entries()) {
      await h.shaper.push(l.make([line], 'stderr'));
      await h.shaper.push(l.make([`progress ${i}`], 'stdout'));
    }
    await h.shaper.flush();
    expect(h.messages()).toEqual([...tb.map((_, i) => `progress ${i}`), tb.join('\n')]);
  });
});

describe('custom start pattern (RE2)', () => {
  it('a matching line starts an event, any other continues it', async () => {
    const text = 'orphan\n2024-05-06 first\n  more\nstill more\n2024-05-07 second\n2024-05-08 third\n  tail';
    const h = await run({ MULTILINE_START: '^\\d{4}-\\d{2}-\\d{2} ' }, text);
    expect(h.messages()).toEqual(['orphan', '2024-05-06 first\n  more\nstill more', '2024-05-07 second', '2024-05-08 third\n  tail']);
  });

  it('a bad pattern is a configuration error', () => {
    expect(() => customRule('(a')).toThrow(ConfigError);
    expect(() => harness(shaping({ MULTILINE_START: '(?<=x)y' }))).toThrow(/JOBHARVEST_MULTILINE_START is not a valid RE2 pattern/);
  });

  it('a pathological pattern against a 100 KB line completes (RE2 is linear), and reads only the line\'s first 1 KiB', async () => {
    const line = 'a'.repeat(100_000) + 'b';
    // The start decides: a 'b' past the first 1 KiB is not seen, so `$` matches at the cut.
    expect(customRule('(a+)+$').start(line)).toBe(0);
    expect(customRule('(a+)+$').start('a'.repeat(1000) + 'b')).toBe(-1);
    expect(customRule('(x+x+)+y').start('x'.repeat(100_000))).toBe(-1);
    expect(customRule('(x+x+)+y').start('x'.repeat(100_000) + 'y')).toBe(-1);
    const h = await run({ MULTILINE_START: '(a+)+$' }, `aaa\nab\n${line}\naaaa`);
    expect(h.out.map((r) => r.message.length)).toEqual([3 + 1 + 2, line.length, 4]);
  });
});

describe('bounds', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('max lines: the event goes on in the next record', async () => {
    const text = ['Traceback (most recent call last):', ...Array.from({ length: 8 }, (_, i) => `  frame ${i}`), 'E: x', 'after'].join('\n');
    const h = await run({ MULTILINE: 'python', MULTILINE_MAX_LINES: '4' }, text);
    expect(h.out.map((r) => r.lines ?? 1)).toEqual([4, 4, 2, 1]);
    expect(h.out.map((r) => r.message).join('\n')).toBe(text);
  });

  it('max bytes, never above the record cap', async () => {
    const frame = '  ' + 'f'.repeat(498);
    const text = ['Traceback (most recent call last):', ...Array.from({ length: 10 }, () => frame), 'E: x'].join('\n');
    const h = await run({ MULTILINE: 'python', MULTILINE_MAX_BYTES: '1200' }, text);
    for (const r of h.out) expect(Buffer.byteLength(r.message)).toBeLessThanOrEqual(1200);
    expect(h.out.map((r) => r.message).join('\n')).toBe(text);
    expect(shaping({ MULTILINE: 'python', MULTILINE_MAX_BYTES: '1000000' }, 4096).multiline!.maxBytes).toBe(4096);
  });

  it('flush timeout: an event with no new line for MULTILINE_FLUSH_MS goes out as it is', async () => {
    vi.useFakeTimers();
    const h = harness(shaping({ MULTILINE: 'python', MULTILINE_FLUSH_MS: '1000' }));
    const l = new Lines();
    await h.shaper.push(l.make('Traceback (most recent call last):\n  File "a.py", line 1'));
    await vi.advanceTimersByTimeAsync(600);
    await h.shaper.push(l.make('    x()'));
    await vi.advanceTimersByTimeAsync(999);
    expect(h.out).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(h.messages()).toEqual(['Traceback (most recent call last):\n  File "a.py", line 1\n    x()']);
    // A continuation after the timeout is a line of its own.
    await h.shaper.push(l.make('ValueError: late'));
    await h.shaper.flush();
    expect(h.messages()[1]).toBe('ValueError: late');
  });
});

describe('record identity', () => {
  it('a joined record takes the first line offset, ts and stream, the sum of sizes, the last safe and the OR of flags', async () => {
    const h = harness(shaping({ MULTILINE: 'java' }));
    const l = new Lines();
    const lines = l.make(JAVA).map((r, i) => (i === 3 ? { ...r, flags: 1 } : r));
    await h.shaper.push(lines);
    await h.shaper.flush();
    const ev = h.out[1]!;
    expect(ev.offset).toBe(lines[1]!.offset);
    expect(ev.ts).toBe(lines[1]!.ts);
    expect(ev.size).toBe(lines.slice(1, 7).reduce((n, r) => n + r.size, 0));
    expect(ev.safe).toBe(lines[6]!.safe);
    expect(ev.flags).toBe(1);
    expect(recordId(ev)).toBe(lines[1]!.file.idPrefix + lines[1]!.offset);
  });

  it('a re-run over the same lines, read in other chunks, gives the same ids', async () => {
    const text = [PYTHON, JAVA, GO, NODE].join('\n');
    const ids = async (chunk: number) => {
      const h = harness(shaping({ MULTILINE: 'python,java,go,nodejs' }));
      const all = new Lines().make(text);
      for (let i = 0; i < all.length; i += chunk) await h.shaper.push(all.slice(i, i + chunk));
      await h.shaper.flush();
      return h.out.map(recordId);
    };
    const a = await ids(1000);
    expect(await ids(1)).toEqual(a);
    expect(await ids(7)).toEqual(a);
    expect(new Set(a).size).toBe(a.length);
  });
});
