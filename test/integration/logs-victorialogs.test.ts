/**
 * `jobharvest logs`, the bundled CLI, against a real VictoriaLogs: the field
 * names each sink writes (sink-fields.ts), CRI order across pods, restarts and
 * ties at one nanosecond, the kubectl-like filters, and a large Job streamed
 * in bounded memory (JOBHARVEST_LOGS_LINES lines; the closing numbers quote a
 * 1,000,000-line run).
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { VictoriaLogs } from '../harness/servers/victorialogs.ts';
import { ensureSidecarBundle } from '../support/sidecar.ts';
import { DOCUMENT_HEADERS, fieldsOf } from './sink-fields.ts';

const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = join(repo, 'dist', 'jobharvest.mjs');
const BASE = 1764574800000000000n;
const GNU_TIME = '/usr/bin/time';
let vl: VictoriaLogs;

beforeAll(async () => {
  ensureSidecarBundle();
  vl = await VictoriaLogs.start();
});
afterAll(async () => {
  await vl?.dispose();
});

interface Row {
  ns: bigint;
  pod: string;
  container: string;
  restart: number;
  stream: 'stdout' | 'stderr';
  id: string;
  message: string;
}

const nsText = (ns: bigint) => `${new Date(Number(ns / 1_000_000n)).toISOString().slice(0, 19)}.${(ns % 1_000_000_000n).toString().padStart(9, '0')}Z`;

/** Pushes rows as the loki sink does: labels, structured metadata, ns timestamps. */
async function pushLoki(namespace: string, job: string, rows: Row[]): Promise<void> {
  const streams = new Map<string, { stream: Record<string, string>; values: unknown[] }>();
  for (const r of rows) {
    const k = `${r.pod}\0${r.container}\0${r.stream}`;
    let s = streams.get(k);
    if (!s) streams.set(k, (s = { stream: { namespace, job, pod: r.pod, container: r.container, stream: r.stream }, values: [] }));
    s.values.push([String(r.ns), r.message, { pod_uid: `uid-${r.pod}`, restart_count: String(r.restart), id: r.id }]);
  }
  const res = await fetch(vl.endpoints.loki, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ streams: [...streams.values()] }) });
  expect(res.status, await res.text()).toBeLessThan(300);
}

/** Pushes rows as the elasticsearch sink does: the JSON document through _bulk. */
async function pushDocuments(namespace: string, job: string, rows: Row[]): Promise<void> {
  const f = fieldsOf('elasticsearch');
  const body = rows
    .map((r) => `${JSON.stringify({ create: { _index: 'jobharvest', _id: r.id } })}\n${JSON.stringify({ '@timestamp': nsText(r.ns), [f.namespace]: namespace, [f.job]: job, [f.pod]: r.pod, [f.uid]: `uid-${r.pod}`, [f.container]: r.container, [f.restart]: r.restart, [f.stream]: r.stream, [f.id]: r.id, message: r.message })}\n`)
    .join('');
  const headers: Record<string, string> = { 'content-type': 'application/x-ndjson' };
  for (const kv of DOCUMENT_HEADERS.split(',')) headers[kv.split('=')[0]!] = kv.split('=')[1]!;
  const res = await fetch(vl.endpoints.elasticsearch, { method: 'POST', headers, body });
  expect(res.status, await res.text()).toBeLessThan(300);
}

/** Runs the bundled CLI; hands every stdout line to onLine instead of keeping them. */
async function cli(args: string[], onLine?: (l: string) => void, nodeFlags: string[] = []): Promise<{ code: number; stdout: string[]; stderr: string; seconds: number; maxRssKiB: number }> {
  // GNU time reports the CLI's own peak RSS into a file, apart from its stderr.
  // Without GNU time the figures are NaN; every assertion but the printed numbers still holds.
  const timingFile = join(tmpdir(), `jh-logs-time-${process.pid}-${Date.now()}`);
  const command = [process.execPath, ...nodeFlags, CLI, 'logs', ...args];
  const timed = existsSync(GNU_TIME);
  const child = spawn(timed ? GNU_TIME : command[0]!, timed ? ['-f', '%e %M', '-o', timingFile, ...command] : command.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, KUBECONFIG: '/nonexistent' } });
  const stdout: string[] = [];
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  const rl = createInterface({ input: child.stdout! });
  rl.on('line', (l) => (onLine ? onLine(l) : stdout.push(l)));
  const code = await new Promise<number>((r) => child.on('close', (c) => r(c ?? -1)));
  const timing = timed ? readFileSync(timingFile, 'utf8') : 'NaN NaN';
  rmSync(timingFile, { force: true });
  // A non-zero exit makes GNU time add a "Command exited" line first.
  const [seconds, rss] = timing.trim().split('\n').at(-1)!.split(/\s+/).map(Number);
  return { code, stdout, stderr, seconds: seconds!, maxRssKiB: rss! };
}

const query = ['--query-endpoint', '', '--query-type', 'victorialogs'];
const at = () => query.map((a) => (a === '' ? vl.url : a));

/**
 * Two pods of a retried Job, restarts 0-2, main and an init container, both
 * streams, and groups of lines sharing one nanosecond whose offsets cross a
 * digit count: the order only a correct tiebreak gives.
 */
function jobRows(n: number): Row[] {
  const rows: Row[] = [];
  for (let i = 0; i < n; i++) {
    const pod = `retry-${(i >> 1) % 2 ? 'b' : 'a'}`;
    const restart = Math.floor((i * 3) / n);
    const container = i % 10 === 9 ? 'setup' : 'main';
    rows.push({ ns: BASE + BigInt(Math.floor(i / 4)) * 1000n, pod, container, restart, stream: i % 7 === 3 ? 'stderr' : 'stdout', id: `${pod}r${restart}${container}-${i * 97}`, message: `line ${i} of ${pod}` });
  }
  return rows;
}

describe('jobharvest logs against VictoriaLogs', () => {
  const rows = jobRows(600);

  it.each([
    ['loki', pushLoki],
    ['elasticsearch', pushDocuments],
  ] as const)('reads what the %s sink wrote: every line once, in CRI order, across pods, restarts and ties', async (sink, push) => {
    const ns = `fields-${sink}`;
    await push(ns, 'retry', rows);
    await vl.flush();
    const expected = rows.map((r) => r.message);
    const all = await cli(['job/retry', '-n', ns, '--all-containers', '--page-size', '7', ...at()]);
    expect(all.stderr).toBe('');
    expect(all.stdout).toEqual(expected);
    const main = await cli(['job/retry', '-n', ns, '-c', 'main', '--timestamps', '--prefix', ...at()]);
    const mainRows = rows.filter((r) => r.container === 'main');
    expect(main.stdout).toEqual(mainRows.map((r) => `[pod/${r.pod}/main] ${nsText(r.ns).replace(/\.?0+Z$/, 'Z')} ${r.message}`));
  });

  it('narrows like kubectl: --pod, --previous, --tail, --since-time, -o json', async () => {
    const ns = 'fields-loki';
    const podB = rows.filter((r) => r.pod === 'retry-b');
    expect((await cli(['job/retry', '-n', ns, '--all-containers', '--pod', 'retry-b', ...at()])).stdout).toEqual(podB.map((r) => r.message));
    const previous = rows.filter((r) => r.container === 'main' && r.restart === 1);
    expect((await cli(['job/retry', '-n', ns, '-c', 'main', '--previous', '--page-size', '50', ...at()])).stdout).toEqual(previous.map((r) => r.message));
    expect((await cli(['job/retry', '-n', ns, '--all-containers', '--tail', '3', ...at()])).stdout).toEqual(rows.slice(-3).map((r) => r.message));
    const from = rows[400]!.ns;
    expect((await cli(['job/retry', '-n', ns, '--all-containers', '--since-time', nsText(from), ...at()])).stdout).toEqual(rows.filter((r) => r.ns >= from).map((r) => r.message));
    const json = (await cli(['job/retry', '-n', ns, '--all-containers', '--tail', '1', '-o', 'json', ...at()])).stdout.map((l) => JSON.parse(l));
    const last = rows.at(-1)!;
    expect(json).toEqual([{ time: nsText(last.ns).replace(/\.?0+Z$/, 'Z'), namespace: ns, job: 'retry', pod: last.pod, container: last.container, restart: last.restart, stream: last.stream, message: last.message }]);
  });

  it('reads more lines of one nanosecond than a page holds, in pages that never grow', async () => {
    // 130 lines at one nanosecond from two files, offsets crossing digit counts, between two ordinary lines.
    const tied: Row[] = [
      { ns: BASE - 1n, pod: 'burst-a', container: 'main', restart: 0, stream: 'stdout', id: 'burst-ar0main-0', message: 'before' },
      ...Array.from({ length: 130 }, (_, i): Row => ({ ns: BASE, pod: `burst-${i % 2 ? 'b' : 'a'}`, container: 'main', restart: 0, stream: 'stdout', id: `burst-${i % 2 ? 'b' : 'a'}r0main-${(i >> 1) * 9 + 1}`, message: `tied ${i}` })),
      { ns: BASE + 1n, pod: 'burst-b', container: 'main', restart: 0, stream: 'stdout', id: 'burst-br0main-9999', message: 'after' },
    ];
    await pushLoki('burst', 'burst', tied);
    await vl.flush();
    const expected = ['before', ...tied.slice(1, -1).filter((r) => r.pod === 'burst-a').map((r) => r.message), ...tied.slice(1, -1).filter((r) => r.pod === 'burst-b').map((r) => r.message), 'after'];
    const r = await cli(['job/burst', '-n', 'burst', '--all-containers', '--page-size', '7', ...at()]);
    expect(r.stderr).toBe('');
    expect(r.stdout).toEqual(expected);
  });

  it('cronjob/NAME lists the runs on the log server newest first, and --run prints one of them', async () => {
    const run = (job: string, n: number, t: bigint) => pushLoki('cron', job, Array.from({ length: n }, (_, i) => ({ ns: t + BigInt(i), pod: `${job}-x`, container: 'main', restart: 0, stream: 'stdout' as const, id: `${job}-${i}`, message: `${job} line ${i}` })));
    await run('report-29400000', 3, BASE);
    await run('report-29400001', 2, BASE + 60_000_000_000n);
    await run('report-weekly-29400001', 1, BASE);
    await run('other-29400002', 1, BASE);
    await vl.flush();
    const list = await cli(['cronjob/report', '-n', 'cron', ...at()]);
    expect(list.code, list.stderr).toBe(0);
    const rows = list.stdout.slice(1, 3).map((l) => l.split(/\s+/));
    expect(list.stdout[0]).toMatch(/^RUN\s+JOB/);
    expect(rows.map((r) => [r[0], r[1], r.at(-2), r.at(-1)])).toEqual([
      ['1', 'report-29400001', '2', 'deleted'],
      ['2', 'report-29400000', '3', 'deleted'],
    ]);
    expect(list.stdout.join('\n')).not.toContain('weekly');
    const older = await cli(['cronjob/report', '-n', 'cron', '--run', '2', ...at()]);
    expect(older.code, older.stderr).toBe(0);
    expect(older.stdout).toEqual(['report-29400000 line 0', 'report-29400000 line 1', 'report-29400000 line 2']);
    const byName = await cli(['cronjob/report', '-n', 'cron', '--run', 'report-29400001', ...at()]);
    expect(byName.stdout).toEqual(['report-29400001 line 0', 'report-29400001 line 1']);
  });

  it('says so in one line when the Job has no lines there', async () => {
    const r = await cli(['job/nothing', '-n', 'fields-loki', ...at()]);
    expect(r.code).toBe(0);
    expect(r.stdout).toEqual([]);
    expect(r.stderr).toMatch(/^jobharvest logs: no lines found for job\/nothing in namespace fields-loki at http:\/\/127\.0\.0\.1:\d+\n$/);
  });
});

describe('a large Job', () => {
  const N = Number(process.env.JOBHARVEST_LOGS_LINES ?? 200_000);
  // The Job's lines as strings alone are N × ~110 bytes; a heap capped well
  // below that can only hold pages. The control run keeps every line (a tail
  // as long as the Job) under the same cap and must run out of memory, which
  // shows the cap is tight enough to catch a CLI that gathers before printing.
  const CAP = ['--max-old-space-size=24'];
  it(`streams ${N} lines in order in bounded memory`, async () => {
    const ns = 'large';
    const pad = 'x'.repeat(80);
    const gen = (i: number): Row => {
      // Groups of four share a nanosecond: two lines of pod a, then two of pod b.
      const pod = i % 4 < 2 ? 'big-a' : 'big-b';
      const restart = Math.floor(i / 250_000);
      return { ns: BASE + BigInt(Math.floor(i / 4)) * 1000n, pod, container: 'main', restart, stream: 'stdout', id: `${pod}r${restart}-${i * 131}`, message: `big line ${i} ${pad}` };
    };
    const t0 = Date.now();
    for (let i = 0; i < N; i += 20_000) await pushLoki(ns, 'big', Array.from({ length: Math.min(20_000, N - i) }, (_, k) => gen(i + k)));
    await vl.flush();
    const ingest = (Date.now() - t0) / 1000;
    let next = 0;
    let wrong = -1;
    const check = (l: string) => {
      if (wrong < 0 && l !== `big line ${next} ${pad}`) wrong = next;
      next++;
    };
    const plain = await cli(['job/big', '-n', ns, '-c', 'main', ...at()], check);
    expect(plain.code, plain.stderr).toBe(0);
    expect(wrong, 'first line out of order').toBe(-1);
    expect(next).toBe(N);
    next = 0;
    const capped = await cli(['job/big', '-n', ns, '-c', 'main', ...at()], check, CAP);
    expect(capped.code, capped.stderr).toBe(0);
    expect(wrong, 'first line out of order').toBe(-1);
    expect(next).toBe(N);
    const control = await cli(['job/big', '-n', ns, '-c', 'main', '--tail', String(N), ...at()], () => undefined, CAP);
    console.log(
      `jobharvest logs, ${N} lines from VictoriaLogs (ingest ${ingest.toFixed(1)} s): ${plain.seconds} s, peak RSS ${(plain.maxRssKiB / 1024).toFixed(1)} MiB; ` +
        `old space capped at 24 MiB: ${capped.seconds} s, ${(capped.maxRssKiB / 1024).toFixed(1)} MiB; holding every line under that cap: exit ${control.code}`,
    );
    expect(control.code, 'holding every line under the cap runs out of memory').not.toBe(0);
  }, 1_800_000);
});
