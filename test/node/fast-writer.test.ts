/**
 * Scenario 3 on the real node: a node-mode Job whose writer goes flat out
 * across the kubelet's real rotation and compression (containerLogMaxSize
 * 1Mi, containerLogMaxFiles 3, sizes checked every 10 s), through the real
 * webhook and image, into VictoriaLogs.
 *
 * The writer is busybox awk printing as fast as containerd takes it, in
 * chunks, for longer than three of the kubelet's checks: at least three
 * rotations while the Job runs, so one rotated file is compressed and one
 * deleted. Once in bursts with pauses between them, once without a pause for
 * 42 s. The rate is measured from the runtime's own per-line timestamps, as
 * stored at the log server.
 *
 * Why nothing can be lost here: the sidecar opens each `0.log` within a
 * second of the runtime creating it and keeps it open across the kubelet's
 * rename, compression and delete, reading it to its end before letting go
 * (sidecar/test/node-source.test.ts proves it with reading paused over five
 * rotations); the kubelet cannot delete a file sooner than two checks
 * (20 s) after it was renamed. The test prints how many rotated and deleted
 * files the sidecar held open at once.
 */
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { NAMES } from '../../src/contract/env.ts';
import { BUSYBOX_IMAGE } from '../harness/node/images.ts';
import { exact, type VictoriaLogs } from '../harness/servers/victorialogs.ts';
import { containerIdOf, containerPids, jobFinished, jobPod, openFiles, sidecarSummary } from './scenario-support.ts';
import { createNamespace, startProductOnNode, type NodeEnv, type ProductOnNode } from '../support/node-env.ts';
import { describeRealNode } from './support.ts';

const IMAGE = BUSYBOX_IMAGE.replace('docker.io/library/', '');
// `chunk 00001 line 000001 ` and a 100-digit number: 124 bytes and the newline.
const LINE_BYTES = 125;
const awkChunk = (lines: number) => `awk -v c=$c 'BEGIN { for (i = 1; i <= ${lines}; i++) printf "chunk %05d line %06d %0100d\\n", c, i, i }'`;

interface Measured {
  written: number;
  /**
   * Records with a chunk and line number (total, distinct), all records, lines
   * split in two at a rotation, how many of those found their tail, and the tails.
   */
  received: { total: number; distinct: number; all: number; split: number; splitPaired: number; tails: number };
  lost: number | string;
  summary: Record<string, unknown> | undefined;
  chunks: number[];
  fastest: { linesPerSecond: number; mibPerSecond: number };
  median: { linesPerSecond: number; mibPerSecond: number };
  overall: { seconds: number; linesPerSecond: number; mibPerSecond: number };
  files: string[];
  deletedWhileRunning: number;
  maxHeldRotated: number;
  maxHeldDeleted: number;
}

describeRealNode('scenario 3: a fast writer across the real kubelet rotation and compression, node mode', () => {
  let env: NodeEnv;
  let vl: VictoriaLogs;
  let product: ProductOnNode | undefined;
  let failed = false;

  beforeAll(async () => {
    // Without the harvester holding Jobs: the sidecar's own guarantee is measured.
    product = await startProductOnNode('jobharvest-node-fast-writer');
    ({ env, vl } = product);
  });
  afterAll(async () => {
    await product?.stop(failed);
  });

  /**
   * Runs the writer as a node-mode Job. It writes its number of chunks to
   * its termination message, so what was written is known without the sidecar.
   */
  async function measure(tag: string, linesPerChunk: number, script: string): Promise<Measured & { namespace: string; pod: { name: string; uid: string } }> {
    const sinkHost = await env.node.expose(vl.port);
    const namespace = await createNamespace(env.core, tag, {
      'jobharvest.io/inject': 'enabled',
      'jobharvest.io/mode': 'node',
      'jobharvest.io/sink': 'loki',
      'jobharvest.io/endpoint': `http://${sinkHost}/insert/loki/api/v1/push`,
      'jobharvest.io/ttl-seconds-after-finished': '600',
      'jobharvest.io/drain-seconds': '60',
    });
    const stored = await env.batch.createNamespacedJob({
      namespace,
      body: {
        metadata: { name: 'writer' },
        spec: { backoffLimit: 0, template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: IMAGE, command: ['sh', '-c', `${script}; echo $c > /dev/termination-log`] }] } } },
      },
    });
    expect(stored.spec?.template.spec?.initContainers?.[0]?.name, 'the webhook injected the sidecar').toBe(NAMES.container);
    const pod = await jobPod(env, namespace, 'writer');
    const dir = join(env.node.podLogsDir, `${namespace}_${pod.name}_${pod.uid}`, 'main');
    const sidecarId = await containerIdOf(env, namespace, pod.name, NAMES.container);

    // While the Job runs: which log files exist, and which the sidecar holds
    // open after the kubelet renamed, compressed or deleted them.
    const seen = new Set<string>();
    const deletedWhileRunning = new Set<string>();
    let maxHeldDeleted = 0;
    let maxHeldRotated = 0;
    let done = false;
    const watcher = (async () => {
      while (!done) {
        if (existsSync(dir)) {
          const now = new Set(readdirSync(dir));
          for (const name of seen) if (!now.has(name) && name !== '0.log') deletedWhileRunning.add(name);
          for (const name of now) seen.add(name);
        }
        const held = containerPids(env.node, sidecarId).flatMap((pid) => openFiles(pid)).filter((f) => /\/main\/0\.log/.test(f));
        maxHeldDeleted = Math.max(maxHeldDeleted, held.filter((f) => f.endsWith(' (deleted)')).length);
        maxHeldRotated = Math.max(maxHeldRotated, held.filter((f) => /0\.log\.\d{8}-\d{6}/.test(f)).length);
        await new Promise((r) => setTimeout(r, 250));
      }
    })();
    let cond;
    try {
      cond = await jobFinished(env, namespace, 'writer', 240_000);
    } finally {
      done = true;
      await watcher;
    }
    expect(cond.type).toBe('Complete');
    const after = await env.core.readNamespacedPod({ name: pod.name, namespace });
    const chunkCount = Number(after.status?.containerStatuses?.find((s) => s.name === 'main')?.state?.terminated?.message?.trim());
    expect(chunkCount, 'the writer said how many chunks it wrote').toBeGreaterThan(0);
    const written = chunkCount * linesPerChunk;

    const filter = `${exact('namespace', namespace)} ${exact('container', 'main')}`;
    const summary = await sidecarSummary(env, namespace, pod.name);
    // Distinct messages chunk by chunk: over millions of records at once
    // count_uniq needs more memory than VictoriaLogs allows a query.
    let total = 0;
    let distinct = 0;
    for (let c = 1; c <= chunkCount; c += 4) {
      const batch = [c, c + 1, c + 2, c + 3].filter((x) => x <= chunkCount);
      const counts = await Promise.all(batch.map((x) => vl.countWithDistinct(`${filter} "chunk ${String(x).padStart(5, '0')} line"`, '_msg')));
      for (const r of counts) {
        total += r.total;
        distinct += r.distinct;
      }
    }
    const all = await vl.count(filter);
    // A line the runtime was writing when the kubelet reopened the log ends
    // the rotated file as a `P` fragment and goes on as the first line of the
    // new file. The sidecar joins the two; were it not to, there would be two
    // records, the head with the chunk and line numbers, the tail without.
    // Found here to say what went wrong, not tolerated.
    const tails = (await vl.query(`${filter} !chunk | fields _msg`, 1000)).map((r) => r._msg!);
    const heads = (await vl.query(`${filter} chunk !_msg:~"^chunk [0-9]{5} line [0-9]{6} [0-9]{100}$" | fields _msg`, 1000)).map((r) => r._msg!);
    const splits = heads.map((head) => {
      const [, chunk, line] = /^chunk (\d{5}) line (\d{6}) /.exec(head) ?? [];
      const whole = `chunk ${chunk} line ${line} ${String(Number(line)).padStart(100, '0')}`;
      return { head, whole, tail: tails.find((t) => head + t === whole) };
    });
    const rows = await vl.query(`${filter} chunk | extract "chunk <c> line " | stats by (c) count() as n, min(_time) as first, max(_time) as last | sort by (c)`, chunkCount + 10);
    const rate = (n: number, seconds: number) => ({ linesPerSecond: Math.round(n / seconds), mibPerSecond: Number(((n * LINE_BYTES) / seconds / 1024 / 1024).toFixed(1)) });
    const rates = rows.map((r) => rate(Number(r.n), (Date.parse(r.last!) - Date.parse(r.first!)) / 1000)).sort((a, b) => a.linesPerSecond - b.linesPerSecond);
    const seconds = (Date.parse(rows.at(-1)!.last!) - Date.parse(rows[0]!.first!)) / 1000;
    return {
      namespace,
      pod,
      written,
      received: { total, distinct, all, split: splits.length, splitPaired: splits.filter((x) => x.tail !== undefined).length, tails: tails.length },
      lost: typeof summary?.lines_unsent === 'number' ? summary.lines_unsent : 'no summary',
      summary,
      chunks: rows.map((r) => Number(r.n)),
      fastest: rates.at(-1)!,
      median: rates[Math.floor(rates.length / 2)]!,
      overall: { seconds: Number(seconds.toFixed(1)), ...rate(written, seconds) },
      files: [...seen].map((n) => n.replace(/\d{8}-\d{6}/, '<time>')).sort(),
      deletedWhileRunning: deletedWhileRunning.size,
      maxHeldRotated,
      maxHeldDeleted,
    };
  }

  function report(title: string, m: Measured): void {
    console.log(
      `${title}: written ${m.written}, received ${m.received.total} (${m.received.distinct} distinct) in ${m.received.all} records, ` +
        `of them ${m.received.split} split in two at a rotation; counted lost ${m.lost}; ` +
        `chunk rate fastest ${m.fastest.linesPerSecond} lines/s = ${m.fastest.mibPerSecond} MiB/s, median ${m.median.linesPerSecond} lines/s = ${m.median.mibPerSecond} MiB/s; ` +
        `overall ${m.overall.linesPerSecond} lines/s = ${m.overall.mibPerSecond} MiB/s over ${m.overall.seconds} s; files seen ${JSON.stringify(m.files)}, ` +
        `${m.deletedWhileRunning} deleted while the Job ran; the sidecar held at most ${m.maxHeldRotated} rotated and ${m.maxHeldDeleted} deleted log files open\n` +
        `summary: ${JSON.stringify(m.summary)}`,
    );
  }

  async function expectEverything(m: Measured & { namespace: string; pod: { name: string; uid: string } }, linesPerChunk: number): Promise<void> {
    expect(m.files.some((n) => n.endsWith('.gz')), 'the kubelet compressed a rotated file while the Job ran').toBe(true);
    expect(m.deletedWhileRunning, 'the kubelet deleted a rotated file while the Job ran').toBeGreaterThan(0);
    // Every line arrived as exactly one record, whole, also one the runtime
    // split at a rotation (P at the end of the rotated file, F in the new one).
    const r = m.received;
    expect({ total: r.total, distinct: r.distinct, split: r.split, tails: r.tails, all: r.all }, 'every line written arrived, once and whole').toEqual({
      total: m.written,
      distinct: m.written,
      split: 0,
      tails: 0,
      all: m.written,
    });
    expect(m.chunks).toEqual(Array.from({ length: m.written / linesPerChunk }, () => linesPerChunk));
    expect({ outcome: m.summary?.outcome, lines_unsent: m.summary?.lines_unsent, lines_dead_lettered: m.summary?.lines_dead_lettered, unread_bytes: m.summary?.unread_bytes }).toEqual({
      outcome: 'complete',
      lines_unsent: 0,
      lines_dead_lettered: 0,
      unread_bytes: 0,
    });
    const filter = `${exact('namespace', m.namespace)} ${exact('container', 'main')}`;
    const rows = await vl.query(`${filter} | stats by (namespace, job, pod, pod_uid, container, restart_count, node) count() as n`);
    expect(rows).toEqual([{ namespace: m.namespace, job: 'writer', pod: m.pod.name, pod_uid: m.pod.uid, container: 'main', restart_count: '0', node: env.node.name, n: String(m.written) }]);
  }

  function scenario(title: string, body: () => Promise<void>): void {
    // Up to 2 M lines to write, ship and count on a shared machine.
    it(title, async () => {
      try {
        await body();
      } catch (err) {
        failed = true;
        throw err;
      }
    }, 300_000);
  }

  scenario('12 bursts of 25000 lines flat out, 3 s apart, over three rotations: every line arrives, with its metadata, nothing counted lost', async () => {
    const m = await measure('fast-bursts', 25_000, `c=0; while [ $c -lt 12 ]; do c=$((c+1)); ${awkChunk(25_000)}; sleep 3; done`);
    report('scenario 3a (node mode, bursts across rotation)', m);
    expect(m.written).toBe(300_000);
    await expectEverything(m, 25_000);
  });

  scenario('flat out without a pause for 42 s, over three rotations: every line arrives, with its metadata, nothing counted lost', async () => {
    const m = await measure('fast-flat', 20_000, `end=$(( $(date +%s) + 42 )); c=0; while [ $(date +%s) -lt $end ]; do c=$((c+1)); ${awkChunk(20_000)}; done`);
    report('scenario 3b (node mode, flat out across rotation)', m);
    await expectEverything(m, 20_000);
  });
});
