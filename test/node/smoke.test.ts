import { statSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { BUSYBOX_IMAGE } from '../harness/node/images.ts';
import { createNamespace, startNodeEnv, waitForPodPhase, type NodeEnv } from '../support/node-env.ts';
import { describeRealNode } from './support.ts';

describeRealNode('a real node', () => {
  let env: NodeEnv;
  let failed = false;

  beforeAll(async () => {
    env = await startNodeEnv();
  });
  afterAll(async () => {
    await env?.stop(failed);
  });
  const track = <T>(p: Promise<T>): Promise<T> =>
    p.catch((err: unknown) => {
      failed = true;
      throw err;
    });

  it('runs a plain pod to completion, serves its log through pods/log and writes it root-owned 0640', () =>
    track(
      (async () => {
        const namespace = await createNamespace(env.core, 'plain');
        // The `kubernetes` Service leads, through kube-proxy's rules in the
        // node's namespace, to the API server (an address no Service has
        // times out instead). busybox's TLS cannot talk to the API server's EC
        // certificate, so a connect is what a busybox pod can prove.
        const script = 'for i in 1 2 3; do echo "plain line $i"; done; nc -w 5 10.0.0.1 443 </dev/null && echo "connected to the kubernetes Service"';
        await env.core.createNamespacedPod({
          namespace,
          body: {
            metadata: { name: 'plain' },
            spec: {
              restartPolicy: 'Never',
              containers: [{ name: 'main', image: BUSYBOX_IMAGE.replace('docker.io/library/', ''), command: ['sh', '-c', script] }],
            },
          },
        });
        const pod = await waitForPodPhase(env.core, namespace, 'plain', ['Succeeded', 'Failed']);
        const log = await env.core.readNamespacedPodLog({ name: 'plain', namespace, container: 'main' });
        expect({ phase: pod.status?.phase, log }).toEqual({
          phase: 'Succeeded',
          log: 'plain line 1\nplain line 2\nplain line 3\nconnected to the kubernetes Service\n',
        });
        expect(pod.spec?.nodeName).toBe(env.node.name);
        expect(pod.status?.podIP?.startsWith(env.node.podCidr.split('.').slice(0, 3).join('.') + '.')).toBe(true);

        // What containerd writes for the kubelet, for a container of any user.
        const podDir = join(env.node.podLogsDir, `${namespace}_plain_${pod.metadata!.uid!}`);
        const file = statSync(join(podDir, 'main', '0.log'));
        expect({ uid: file.uid, gid: file.gid, mode: (file.mode & 0o777).toString(8) }).toEqual({ uid: 0, gid: 0, mode: '640' });
        expect((statSync(join(podDir, 'main')).mode & 0o777).toString(8)).toBe('755');
        expect(readdirSync(podDir)).toEqual(['main']);
      })(),
    ));
});
