/**
 * Scenario 2b on the real node: an api-mode Job with a fast writer, whose
 * sidecar's connections to the API server are cut for longer than two of the
 * kubelet's 10 s rotation checks. The cut is a real one: every TCP
 * connection from the pod to the API server (its pods/log stream and its pod
 * watch) is reset, and new ones are refused with an RST, at the one network
 * hop between the node's pods and the API server (node.ts's forwarder); the
 * kubelet keeps running and keeps rotating (containerLogMaxSize 1Mi).
 *
 * pods/log serves only the current file, so the lines written after the last
 * one the sidecar read, up to the start of the file the kubelet writes when
 * the stream comes back, are in rotated files it cannot reach. The test
 * counts them (written - received) and requires the sidecar's summary to
 * report the gap whenever any were lost.
 */
import { RbacAuthorizationV1Api } from '@kubernetes/client-node';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { NAMES } from '../../src/contract/env.ts';
import { kubeConfigFor } from '../harness/kubelet/stack.ts';
import { BUSYBOX_IMAGE } from '../harness/node/images.ts';
import { exact, type VictoriaLogs } from '../harness/servers/victorialogs.ts';
import { waitFor } from '../support/wait.ts';
import { summaryIn } from '../support/summary.ts';
import { jobFinished, jobPod } from './scenario-support.ts';
import { createNamespace, startProductOnNode, waitForPodPhase, type NodeEnv, type ProductOnNode } from '../support/node-env.ts';
import { describeRealNode } from './support.ts';

const IMAGE = BUSYBOX_IMAGE.replace('docker.io/library/', '');
const BURSTS = 130;
const BURST = 1000;
const N = BURSTS * BURST;
const CUT_MS = 25_000;
// `cut line 00000001 ` and 80 x's: 99 bytes and the newline.
const LINE_BYTES = 100;
// 1000 lines every half second or so: about 2000 lines/s, 2 MB per 10 s
// (more with the CRI prefix), so every kubelet check finds more than 1Mi.
const script =
  `b=1; i=1; while [ $b -le ${BURSTS} ]; do j=1; while [ $j -le ${BURST} ]; do ` +
  `printf 'cut line %08d %s\\n' $i ${'x'.repeat(80)}; i=$((i+1)); j=$((j+1)); done; sleep 0.5; b=$((b+1)); done`;

/** The missing ranges of 1..n, given the numbers present. */
function missingRanges(present: Set<number>, n: number): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  for (let i = 1; i <= n; i++) {
    if (present.has(i)) continue;
    const from = i;
    while (i + 1 <= n && !present.has(i + 1)) i++;
    out.push([from, i]);
  }
  return out;
}

describeRealNode('scenario 2b: api mode, a fast writer across the real rotation with the pods/log stream cut', () => {
  let env: NodeEnv;
  let vl: VictoriaLogs;
  let product: ProductOnNode | undefined;
  let failed = false;

  beforeAll(async () => {
    // Without the harvester holding Jobs: the sidecar's own account is measured.
    product = await startProductOnNode('jobharvest-node-api-cut');
    ({ env, vl } = product);
  });
  afterAll(async () => {
    await product?.stop(failed);
  });

  it(`a ${CUT_MS / 1000} s cut spanning rotations: written = received + lost, and the summary counts the gap`, async () => {
    try {
      const sinkHost = await env.node.expose(vl.port);
      const apiPort = Number(new URL(env.cluster.server).port);
      const namespace = await createNamespace(env.core, 'api-cut', {
        'jobharvest.io/inject': 'enabled',
        'jobharvest.io/mode': 'api',
        'jobharvest.io/sink': 'loki',
        'jobharvest.io/endpoint': `http://${sinkHost}/insert/loki/api/v1/push`,
        'jobharvest.io/ttl-seconds-after-finished': '600',
        'jobharvest.io/drain-seconds': '30',
      });
      const rbac = kubeConfigFor(env.cluster).makeApiClient(RbacAuthorizationV1Api);
      await waitFor('the log-reader RoleBinding', () => rbac.readNamespacedRoleBinding({ name: 'jobharvest-log-reader', namespace }), { timeoutMs: 30_000 });
      const stored = await env.batch.createNamespacedJob({
        namespace,
        body: {
          metadata: { name: 'cut' },
          spec: { backoffLimit: 0, template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: IMAGE, command: ['sh', '-c', script] }] } } },
        },
      });
      expect(stored.spec?.template.spec?.initContainers?.[0]?.name, 'the webhook injected the sidecar').toBe(NAMES.container);
      const pod = await jobPod(env, namespace, 'cut');
      await waitForPodPhase(env.core, namespace, pod.name, ['Running']);
      const filter = `${exact('namespace', namespace)} ${exact('container', 'main')}`;
      await waitFor('the first lines at the log server', async () => ((await vl.count(filter)) >= 10_000 ? true : undefined), { timeoutMs: 90_000, intervalMs: 250 });

      const receivedBeforeCut = await vl.count(filter);
      const cutAt = Date.now();
      const cut = await env.node.cutPodConnections(apiPort, CUT_MS);
      const receivedAtReopen = await vl.count(filter);
      const cond = await jobFinished(env, namespace, 'cut', 170_000);

      const dir = join(env.node.podLogsDir, `${namespace}_${pod.name}_${pod.uid}`, 'main');
      const files = readdirSync(dir).map((n) => n.replace(/\d{8}-\d{6}/, '<time>')).sort();
      const sidecarLog = await env.core.readNamespacedPodLog({ name: pod.name, namespace, container: NAMES.container });
      const summary = summaryIn(sidecarLog);
      const gapWarnings = sidecarLog.split('\n').filter((l) => l.includes('resumed a container log past a rotation'));
      const after = await env.core.readNamespacedPod({ name: pod.name, namespace });
      const sidecarStatus = after.status?.initContainerStatuses?.find((s) => s.name === NAMES.container);
      const sidecarExit = sidecarStatus?.state?.terminated?.exitCode;
      const notable = sidecarLog.split('\n').filter((l) => /"level":"(warn|error)"/.test(l) && !l.includes('"msg":"container log stream failed; reconnecting"'));
      const got = await vl.countWithDistinct(filter, '_msg');
      const numbers = await vl.query(`${filter} | extract "cut line <n> " | fields n`, N + 1000);
      const missing = missingRanges(new Set(numbers.map((r) => Number(r.n))), N);
      const lost = N - got.distinct;
      const times = await vl.query(`${filter} | stats min(_time) as first, max(_time) as last`);
      const seconds = (Date.parse(times[0]!.last!) - Date.parse(times[0]!.first!)) / 1000;
      console.log(
        `scenario 2b (api mode, stream cut ${CUT_MS / 1000} s across rotation): written ${N}, received ${got.total} (${got.distinct} distinct), lost ${lost} ` +
          `in ${missing.length} range(s) ${JSON.stringify(missing)}; sidecar counted resume_gaps ${String(summary?.resume_gaps)}, outcome ${String(summary?.outcome)}, exit ${sidecarExit}; ` +
          `write rate about ${Math.round(N / seconds)} lines/s = ${((N * LINE_BYTES) / seconds / 1024 / 1024).toFixed(2)} MiB/s over ${seconds.toFixed(1)} s (first to last line received); ` +
          `cut ${cut.reset} connection(s) ${Math.round((Date.now() - cutAt) / 1000)} s before the end check, refused ${cut.refused} reconnection(s); ` +
          `received ${receivedBeforeCut} before the cut, ${receivedAtReopen} when it ended; files at the end ${JSON.stringify(files)}\n` +
          `sidecar restarts ${sidecarStatus?.restartCount}; its warnings and errors (reconnections left out):\n${notable.join('\n')}\nsummary: ${JSON.stringify(summary)}`,
      );

      expect(cond.type).toBe('Complete');
      expect(cut.reset, 'the cut broke the sidecar\'s connections (stream and watch)').toBeGreaterThanOrEqual(1);
      expect(cut.refused, 'the sidecar tried to reconnect during the cut').toBeGreaterThanOrEqual(1);
      expect(files.length, 'the kubelet rotated').toBeGreaterThan(1);
      expect(got.total, 'no line twice').toBe(got.distinct);
      expect(lost, 'the cut spanned a rotation: lines in rotated files were lost').toBeGreaterThan(0);
      // Whenever lines were lost, the summary says so, once per gap at least.
      expect({ outcome: summary?.outcome, exit: sidecarExit, warned: gapWarnings.length >= missing.length }).toEqual({ outcome: 'incomplete', exit: 3, warned: true });
      expect(summary?.resume_gaps).toBeGreaterThanOrEqual(missing.length);
      expect(summary?.resume_gaps, 'every gap counted is warned about').toBe(gapWarnings.length);
      // The other counters stay clean: the loss is the gap, not a delivery failure.
      expect({ unsent: summary?.lines_unsent, dead: summary?.lines_dead_lettered, shipped: summary?.lines_shipped }).toEqual({ unsent: 0, dead: 0, shipped: got.distinct });
      const rows = await vl.query(`${filter} | stats by (namespace, job, pod, pod_uid, container, restart_count, node) count() as n`);
      expect(rows).toEqual([{ namespace, job: 'cut', pod: pod.name, pod_uid: pod.uid, container: 'main', restart_count: '0', node: env.node.name, n: String(got.distinct) }]);
    } catch (err) {
      failed = true;
      throw err;
    }
  });
});
