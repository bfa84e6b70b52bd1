/**
 * Scenario 3 on the real node: a node-mode Job whose writer goes flat out
 * across the kubelet's real rotation and compression (containerLogMaxSize
 * 1Mi, containerLogMaxFiles 3, sizes checked every 10 s), through the real
 * webhook and image, into VictoriaLogs.
 *
 * The writer is busybox awk printing as fast as containerd takes it, in
 * bursts of BURST lines with a pause between them, for longer than three of
 * the kubelet's checks: at least three rotations while the Job runs, so one
 * rotated file is compressed and one deleted. The rate is measured from the
 * runtime's own per-line timestamps, as stored at the log server.
 */
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { NAMES } from '../../src/contract/env.ts';
import { BUSYBOX_IMAGE } from '../harness/node/images.ts';
import { exact, type VictoriaLogs } from '../harness/servers/victorialogs.ts';
import { containerIdOf, containerPids, jobFinished, jobPod, openFiles, sidecarSummary } from './scenario-support.ts';
import { createNamespace, describeRealNode, startProductOnNode, type NodeEnv, type ProductOnNode } from './support.ts';

const IMAGE = BUSYBOX_IMAGE.replace('docker.io/library/', '');
const BURSTS = 12;
const BURST = 25_000;
const PAUSE_S = 3;
const N = BURSTS * BURST;
// `burst 01 line 000001 ` and a 100-digit number: 121 bytes and the newline.
const LINE_BYTES = 122;
const script =
  `b=1; while [ $b -le ${BURSTS} ]; do ` +
  `awk -v b=$b 'BEGIN { for (i = 1; i <= ${BURST}; i++) printf "burst %02d line %06d %0100d\\n", b, i, i }'; ` +
  `sleep ${PAUSE_S}; b=$((b+1)); done`;

describeRealNode('scenario 3: a fast writer across the real kubelet rotation and compression, node mode', () => {
  let env: NodeEnv;
  let vl: VictoriaLogs;
  let product: ProductOnNode | undefined;
  let failed = false;

  beforeAll(async () => {
    // Without the harvester holding Jobs: the sidecar's own guarantee is measured.
    product = await startProductOnNode('jobharvest-node-fast-writer', ['--max-hold-seconds', '0']);
    ({ env, vl } = product);
  });
  afterAll(async () => {
    await product?.stop(failed);
  });

  it(`${N} lines written flat out in ${BURSTS} bursts over three rotations: every line arrives, with its metadata, nothing counted lost`, async () => {
    try {
      const sinkHost = await env.node.expose(vl.port);
      const namespace = await createNamespace(env.core, 'fast-writer', {
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
          spec: { backoffLimit: 0, template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: IMAGE, command: ['sh', '-c', script] }] } } },
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
      let samples = 0;
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
          samples++;
          await new Promise((r) => setTimeout(r, 250));
        }
      })();
      let cond;
      try {
        cond = await jobFinished(env, namespace, 'writer', 175_000);
      } finally {
        done = true;
        await watcher;
      }

      const filter = `${exact('namespace', namespace)} ${exact('container', 'main')}`;
      const got = await vl.countWithDistinct(filter, '_msg');
      const summary = await sidecarSummary(env, namespace, pod.name);
      const bursts = await vl.query(`${filter} | extract "burst <b> line " | stats by (b) count() as n, min(_time) as first, max(_time) as last | sort by (b)`);
      const rates = bursts.map((r) => {
        const seconds = (Date.parse(r.last!) - Date.parse(r.first!)) / 1000;
        const n = Number(r.n);
        return { burst: r.b, n, seconds, linesPerSecond: n / seconds, mibPerSecond: (n * LINE_BYTES) / seconds / 1024 / 1024 };
      });
      const fastest = rates.reduce((a, b) => (b.linesPerSecond > a.linesPerSecond ? b : a), rates[0]!);
      const sorted = rates.map((r) => r.linesPerSecond).sort((a, b) => a - b);
      const median = sorted[Math.floor(sorted.length / 2)]!;
      const span = (Date.parse(bursts.at(-1)!.last!) - Date.parse(bursts[0]!.first!)) / 1000;
      const lost = typeof summary?.lines_unsent === 'number' ? summary.lines_unsent : NaN;
      console.log(
        `scenario 3 (node mode, fast writer across rotation): written ${N}, received ${got.total} (${got.distinct} distinct), counted lost ${lost}; ` +
          `burst rate fastest ${Math.round(fastest.linesPerSecond)} lines/s = ${fastest.mibPerSecond.toFixed(1)} MiB/s, median ${Math.round(median)} lines/s = ${((median * LINE_BYTES) / 1024 / 1024).toFixed(1)} MiB/s; ` +
          `${N} lines in ${span.toFixed(1)} s overall (${Math.round(N / span)} lines/s); files seen ${JSON.stringify([...seen].map((n) => n.replace(/\d{8}-\d{6}/, '<time>')).sort())}, ` +
          `${deletedWhileRunning.size} deleted while the Job ran; sidecar held at most ${maxHeldRotated} rotated and ${maxHeldDeleted} deleted log files open (${samples} samples)\n` +
          `per burst: ${JSON.stringify(rates.map((r) => [r.burst, r.n, Number(r.seconds.toFixed(3))]))}\nsummary: ${JSON.stringify(summary)}`,
      );

      expect(cond.type).toBe('Complete');
      expect([...seen].some((n) => n.endsWith('.gz')), 'the kubelet compressed a rotated file while the Job ran').toBe(true);
      expect(deletedWhileRunning.size, 'the kubelet deleted a rotated file while the Job ran').toBeGreaterThan(0);
      expect(got, 'every line written arrived, once').toEqual({ total: N, distinct: N });
      expect({ outcome: summary?.outcome, lines_unsent: summary?.lines_unsent, lines_dead_lettered: summary?.lines_dead_lettered, unread_bytes: summary?.unread_bytes }).toEqual({
        outcome: 'complete',
        lines_unsent: 0,
        lines_dead_lettered: 0,
        unread_bytes: 0,
      });
      expect(bursts.map((r) => Number(r.n))).toEqual(Array.from({ length: BURSTS }, () => BURST));
      const rows = await vl.query(`${filter} | stats by (namespace, job, pod, pod_uid, container, restart_count, node) count() as n`);
      expect(rows).toEqual([{ namespace, job: 'writer', pod: pod.name, pod_uid: pod.uid, container: 'main', restart_count: '0', node: env.node.name, n: String(N) }]);
    } catch (err) {
      failed = true;
      throw err;
    }
  });
});
