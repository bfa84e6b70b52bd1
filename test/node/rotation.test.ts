import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { BUSYBOX_IMAGE } from '../harness/node/images.ts';
import { waitFor } from '../support/wait.ts';
import { createNamespace, startNodeEnv, waitForPodPhase, type NodeEnv } from '../support/node-env.ts';
import { describeRealNode } from './support.ts';

// Three bursts of 10000 lines (1.36 MB each with the CRI prefix, past
// containerLogMaxSize 1Mi), each followed by a pause longer than the kubelet's
// 10 s size check, then a short tail that stays in the current file.
const BURST = 10_000;
const TAIL = 10;
const burst = (b: number) =>
  `i=1; while [ $i -le ${BURST} ]; do printf 'burst ${b} line %08d %s\\n' $i xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; i=$((i+1)); done; sleep 15`;
const script = `${burst(1)}; ${burst(2)}; ${burst(3)}; i=1; while [ $i -le ${TAIL} ]; do echo "tail line $i"; i=$((i+1)); done; sleep 3600`;

describeRealNode('the real kubelet rotates and compresses container logs', () => {
  let env: NodeEnv;
  let failed = false;

  beforeAll(async () => {
    env = await startNodeEnv();
  });
  afterAll(async () => {
    await env?.stop(failed);
  });

  it('keeps containerLogMaxFiles (3) files, compresses the older rotated one, deletes the oldest, and pods/log serves only the current file', async () => {
    try {
      const namespace = await createNamespace(env.core, 'rotation');
      await env.core.createNamespacedPod({
        namespace,
        body: {
          metadata: { name: 'writer' },
          spec: {
            restartPolicy: 'Never',
            terminationGracePeriodSeconds: 1,
            containers: [{ name: 'main', image: BUSYBOX_IMAGE.replace('docker.io/library/', ''), command: ['sh', '-c', script] }],
          },
        },
      });
      const pod = await waitForPodPhase(env.core, namespace, 'writer', ['Running']);
      const dir = join(env.node.podLogsDir, `${namespace}_writer_${pod.metadata!.uid!}`, 'main');
      const served = await waitFor(
        'the tail, and nothing else, in pods/log',
        async () => {
          const log = await env.core.readNamespacedPodLog({ name: 'writer', namespace, container: 'main' });
          const lines = log.split('\n').filter((l) => l !== '');
          return lines.at(-1) === `tail line ${TAIL}` && !lines.some((l) => l.startsWith('burst 3')) ? lines : undefined;
        },
        { timeoutMs: 120_000, intervalMs: 1_000 },
      );
      const files = readdirSync(dir).sort();
      const described = files.map((n) => ({ name: n.replace(/\d{8}-\d{6}/, '<time>'), bytes: statSync(join(dir, n)).size }));
      console.log(JSON.stringify(described));
      // Burst 1 was rotated, compressed and then deleted; burst 2 is the
      // compressed file, burst 3 the newest rotated one; the tail is current.
      expect(described.map((f) => f.name).sort()).toEqual(['0.log', '0.log.<time>', '0.log.<time>.gz']);
      expect(served).toEqual(Array.from({ length: TAIL }, (_, i) => `tail line ${i + 1}`));
    } catch (err) {
      failed = true;
      throw err;
    }
  });
});
