/**
 * The test kubelet itself, against the real API server: what the lifecycle
 * scenarios rely on it for (ordering, sidecar termination, env and volumes,
 * CRI logs, status, pods/log) is checked here once, without the webhook.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestNamespace, useCluster, waitFor } from '../harness/cluster/client.ts';
import { TestKubelet, type KubeletEvent } from '../harness/kubelet/kubelet.ts';

const cluster = useCluster();
let ns = '';
let kubelet: TestKubelet;

beforeAll(async () => {
  ns = await createTestNamespace(cluster.core, 'kubelet');
  kubelet = await TestKubelet.start({ cluster: cluster.info, namespaces: [ns], restartBackoffMs: 200, logMaxSizeBytes: 64 * 1024 });
}, 60_000);

afterAll(async () => {
  await kubelet?.stop();
  await cluster.core.deleteNamespace({ name: ns }).catch(() => undefined);
});

function pod(name: string, spec: V1Pod['spec']): V1Pod {
  return { metadata: { name, labels: { app: name, 'team.example/owner': 'qa' } }, spec: { restartPolicy: 'Never', terminationGracePeriodSeconds: 5, ...spec! } };
}

async function run(p: V1Pod): Promise<{ uid: string; events: KubeletEvent[]; final: V1Pod }> {
  const created = await cluster.core.createNamespacedPod({ namespace: ns, body: p });
  const uid = created.metadata!.uid!;
  await kubelet.waitForEvent((e) => e.uid === uid && e.type === 'phase', 60_000);
  const final = await waitFor(`pod ${p.metadata!.name} terminal in the API`, async () => {
    const got = await cluster.core.readNamespacedPod({ name: p.metadata!.name!, namespace: ns });
    return got.status?.phase === 'Succeeded' || got.status?.phase === 'Failed' ? got : undefined;
  });
  return { uid, events: kubelet.events.filter((e) => e.uid === uid), final };
}

const sh = (script: string) => ({ command: ['sh', '-c', script] });
const order = (events: KubeletEvent[]) => events.map((e) => (e.type === 'phase' ? `phase:${e.phase}` : e.type === 'removed' ? 'removed' : `${e.type}:${e.container}${e.type === 'signal' ? `:${e.signal}` : ''}`));

describe('test kubelet', () => {
  it('stops a running pod that is deleted: SIGTERM to the container, then the sidecar, then the final delete', async () => {
    const created = await cluster.core.createNamespacedPod({
      namespace: ns,
      body: pod('deleted', {
        terminationGracePeriodSeconds: 20,
        initContainers: [{ name: 'side', image: 'busybox', restartPolicy: 'Always', ...sh('trap "exit 0" TERM; while true; do sleep 0.05; done') }],
        containers: [{ name: 'main', image: 'busybox', ...sh('trap "exit 7" TERM; while true; do sleep 0.05; done') }],
      }),
    });
    const uid = created.metadata!.uid!;
    await kubelet.waitForEvent((e) => e.uid === uid && e.type === 'start' && e.container === 'main');
    await cluster.core.deleteNamespacedPod({ name: 'deleted', namespace: ns, gracePeriodSeconds: 10 });
    await kubelet.waitForEvent((e) => e.uid === uid && e.type === 'removed', 30_000);
    await expect(cluster.core.readNamespacedPod({ name: 'deleted', namespace: ns })).rejects.toMatchObject({ code: 404 });
    const events = kubelet.events.filter((e) => e.uid === uid);
    expect(order(events)).toEqual(['start:side', 'start:main', 'signal:main:SIGTERM', 'exit:main', 'signal:side:SIGTERM', 'exit:side', 'phase:Failed', 'removed']);
    expect(events.find((e) => e.type === 'exit' && e.container === 'main')).toMatchObject({ exitCode: 7 });
  });

  it('runs init containers, sidecars and containers in order, stops sidecars in reverse order after the main container, then reports Succeeded', async () => {
    const { uid, events, final } = await run(
      pod('order', {
        initContainers: [
          { name: 'init', image: 'busybox', ...sh('echo init') },
          { name: 'side-a', image: 'busybox', restartPolicy: 'Always', ...sh('trap "echo a-term; exit 0" TERM; while true; do sleep 0.05; done') },
          { name: 'side-b', image: 'busybox', restartPolicy: 'Always', ...sh('trap "echo b-term; exit 0" TERM; while true; do sleep 0.05; done') },
        ],
        containers: [{ name: 'main', image: 'busybox', ...sh('sleep 0.3; echo main-done') }],
      }),
    );
    expect(order(events)).toEqual([
      'start:init',
      'exit:init',
      'start:side-a',
      'start:side-b',
      'start:main',
      'exit:main',
      'signal:side-b:SIGTERM',
      'exit:side-b',
      'signal:side-a:SIGTERM',
      'exit:side-a',
      'phase:Succeeded',
    ]);
    expect(final.status?.phase).toBe('Succeeded');
    const sides = final.status!.initContainerStatuses!.filter((s) => s.name.startsWith('side'));
    for (const s of sides) expect(s.state?.terminated?.exitCode, s.name).toBe(0);
    expect(final.status!.containerStatuses![0]!.state?.terminated?.reason).toBe('Completed');
    // Terminal pods are deleted at once; the kubelet then deletes the pod's logs.
    await cluster.core.deleteNamespacedPod({ name: 'order', namespace: ns });
    await kubelet.waitForEvent((e) => e.uid === uid && e.type === 'removed', 30_000);
  });

  it('restarts a crashed sidecar under restartPolicy Never, and SIGKILLs one that ignores SIGTERM at the end of the grace period', async () => {
    const { events, final } = await run(
      pod('restart', {
        terminationGracePeriodSeconds: 2,
        initContainers: [
          { name: 'stubborn', image: 'busybox', restartPolicy: 'Always', ...sh('trap "" TERM; while true; do sleep 0.05; done') },
          // Crashes on its first two runs (the emptyDir keeps count), then stays up.
          { name: 'crashy', image: 'busybox', restartPolicy: 'Always', ...sh('n=$(cat $STATE/n 2>/dev/null || echo 0); echo $((n+1)) > $STATE/n; [ $n -ge 2 ] || exit 3; trap "exit 0" TERM; while true; do sleep 0.05; done'), env: [{ name: 'STATE', value: '/state' }], volumeMounts: [{ name: 'state', mountPath: '/state' }] },
        ],
        containers: [{ name: 'main', image: 'busybox', ...sh('sleep 1.5') }],
        volumes: [{ name: 'state', emptyDir: {} }],
      }),
    );
    const crashy = final.status!.initContainerStatuses!.find((s) => s.name === 'crashy')!;
    expect(crashy.restartCount).toBe(2);
    const stubborn = final.status!.initContainerStatuses!.find((s) => s.name === 'stubborn')!;
    expect(stubborn.state?.terminated?.exitCode).toBe(137);
    const term = events.find((e) => e.type === 'signal' && e.container === 'stubborn' && e.signal === 'SIGTERM')!;
    const kill = events.find((e) => e.type === 'signal' && e.container === 'stubborn' && e.signal === 'SIGKILL')!;
    // The grace period counts from the end of the main container; crashy stopped first.
    const mainExit = events.find((e) => e.type === 'exit' && e.container === 'main')!;
    expect(kill.t - mainExit.t).toBeGreaterThanOrEqual(1900);
    expect(kill.t - mainExit.t).toBeLessThan(4000);
    expect(term.t).toBeLessThan(kill.t);
    expect(final.status?.phase).toBe('Succeeded');
  });

  it('builds env from fieldRefs and secretKeyRefs, maps volumes, writes CRI logs with P/F and rotation', async () => {
    await cluster.core.createNamespacedSecret({ namespace: ns, body: { metadata: { name: 'creds' }, stringData: { token: 's3cr3t' } } });
    const created = await cluster.core.createNamespacedPod({
      namespace: ns,
      body: pod('env', {
        containers: [
          {
            name: 'main',
            image: 'busybox',
            ...sh('echo "$POD/$NS/$UID/$NODE/$OWNER/$TOKEN/$(cat $DATA/x)"; head -c 40000 /dev/zero | tr "\\0" y; echo; i=0; while [ $i -lt 300 ]; do echo "line $i padding-padding-padding-padding-padding-padding-padding-padding-padding-padding-padding-padding-padding-padding-padding-padding-padding-padding"; i=$((i+1)); done; echo err >&2'),
            env: [
              { name: 'POD', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
              { name: 'NS', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
              { name: 'UID', valueFrom: { fieldRef: { fieldPath: 'metadata.uid' } } },
              { name: 'NODE', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
              { name: 'OWNER', valueFrom: { fieldRef: { fieldPath: "metadata.labels['team.example/owner']" } } },
              { name: 'TOKEN', valueFrom: { secretKeyRef: { name: 'creds', key: 'token' } } },
              { name: 'DATA', value: '/data/$(NS)' },
            ],
            volumeMounts: [{ name: 'data', mountPath: '/data' }],
          },
        ],
        initContainers: [{ name: 'prep', image: 'busybox', ...sh('mkdir -p $D/$NS && echo from-init > $D/$NS/x'), env: [{ name: 'NS', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } }, { name: 'D', value: '/mnt' }], volumeMounts: [{ name: 'data', mountPath: '/mnt' }] }],
        volumes: [{ name: 'data', emptyDir: {} }],
      }),
    });
    const uid = created.metadata!.uid!;
    await kubelet.waitForEvent((e) => e.uid === uid && e.type === 'phase');
    const dir = join(kubelet.podLogDir(ns, 'env', uid), 'main');
    const files = readdirSync(dir).sort();
    expect(files.some((f) => f.startsWith('0.log.')), `rotated files in ${files.join(', ')}`).toBe(true);
    const live = readFileSync(join(dir, '0.log'), 'utf8').trimEnd().split('\n');
    expect(live.at(-1)).toMatch(/^\d{4}-\d\d-\d\dT[\d:.]+Z stderr F err$/);
    const all = files.map((f) => (f.endsWith('.gz') ? gunzipSync(readFileSync(join(dir, f))) : readFileSync(join(dir, f))).toString('utf8')).join('');
    expect(all).toContain(` stdout F env/${ns}/${uid}/${kubelet.nodeName}/qa/s3cr3t/from-init\n`);
    // 40000 bytes: two 16 KiB P fragments and an F.
    expect(all.match(/ stdout P y{16384}\n/g)?.length).toBe(2);
    expect(all).toMatch(/ stdout F y{7232}\n/);
    expect(all.match(/ stdout F line \d+ /g)?.length).toBe(300);
  });

  it('serves pods/log through the API server: follow, timestamps and previous', async () => {
    const created = await cluster.core.createNamespacedPod({
      namespace: ns,
      body: pod('logs', {
        restartPolicy: 'OnFailure',
        containers: [{ name: 'main', image: 'busybox', ...sh('n=$(cat $S/n 2>/dev/null || echo 0); echo $((n+1)) > $S/n; echo "run $n"; head -c 20000 /dev/zero | tr "\\0" z; echo; [ $n -ge 1 ] || exit 1; sleep 1; echo bye'), env: [{ name: 'S', value: '/s' }], volumeMounts: [{ name: 's', mountPath: '/s' }] }],
        volumes: [{ name: 's', emptyDir: {} }],
      }),
    });
    const uid = created.metadata!.uid!;
    await kubelet.waitForEvent((e) => e.uid === uid && e.type === 'start' && e.restart === 1);
    const base = `${cluster.info.server}/api/v1/namespaces/${ns}/pods/logs/log?container=main`;
    const get = async (q: string) => {
      const { request } = await import('node:https');
      return new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = request(`${base}${q}`, { ca: cluster.info.caPem, headers: { Authorization: `Bearer ${cluster.info.token}` } }, (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (body += c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        });
        req.on('error', reject);
        req.end();
      });
    };
    const followed = await get('&follow=true&timestamps=true');
    expect(followed.status).toBe(200);
    const lines = followed.body.trimEnd().split('\n');
    expect(lines.map((l) => l.replace(/^\S+ /, ''))).toEqual(['run 1', 'z'.repeat(20000), 'bye']);
    for (const l of lines) expect(l).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z /);
    const previous = await get('&previous=true');
    expect(previous.body).toBe(`run 0\n${'z'.repeat(20000)}\n`);
    expect((await get('&previous=true&tailLines=1')).body).toBe(`${'z'.repeat(20000)}\n`);
    expect((await get('&previous=true&limitBytes=3')).body).toBe('run');
    // sinceTime: only lines stamped at or after it (the API passes whole seconds).
    const stamped = (await get('&previous=true&timestamps=true')).body.split('\n')[0]!.split(' ')[0]!;
    const later = new Date(Math.floor(Date.parse(stamped) / 1000) * 1000 + 1000).toISOString().replace(/\.\d+Z$/, 'Z');
    expect((await get(`&previous=true&sinceTime=${later}`)).body).toBe('');
    const final = await waitFor('pod logs Succeeded', async () => {
      const p = await cluster.core.readNamespacedPod({ name: 'logs', namespace: ns });
      return p.status?.phase === 'Succeeded' ? p : undefined;
    });
    expect(final.status!.containerStatuses![0]!.restartCount).toBe(1);
    expect(final.status!.containerStatuses![0]!.lastState?.terminated?.exitCode).toBe(1);
  });
});
