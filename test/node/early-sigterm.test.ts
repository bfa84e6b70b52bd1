/**
 * Jobs done within milliseconds: the kubelet starts the main container as
 * soon as the sidecar's container has started (nothing holds the start
 * back), and stops the sidecar as soon as it has seen the main container
 * exit. A SIGTERM that came before the sidecar's handler was in place would be
 * discarded (the sidecar is PID 1 of its container) and the sidecar would run
 * until the grace period's SIGKILL: exit 137, no summary line. The sidecar's
 * preStop hook holds the kubelet's SIGTERM back until the handler is in. So
 * every sidecar here must have caught its SIGTERM, drained and exited 0, and
 * every line must be at the sink exactly once. Jobs created all at once load
 * the node's two cores, which slows the sidecar's boot more than the
 * kubelet's sync; one at a time is the kubelet's fastest path. A pod sharing
 * its PID namespace, where an early SIGTERM would kill the sidecar, has the
 * same hook and must drain the same way. (Pods stopped while the sidecar
 * boots: early-delete.test.ts.)
 */
import { type V1Job, type V1Pod } from '@kubernetes/client-node';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { NAMES } from '../../src/contract/env.ts';
import { numberedLines } from '../harness/kubelet/stack.ts';
import { BUSYBOX_IMAGE } from '../harness/node/images.ts';
import { exact, VictoriaLogs } from '../harness/servers/victorialogs.ts';
import { waitFor } from '../support/wait.ts';
import { createNamespace, startProductOnNode, type NodeEnv, type ProductOnNode } from '../support/node-env.ts';
import { describeRealNode } from './support.ts';

const IMAGE = BUSYBOX_IMAGE.replace('docker.io/library/', '');
const LINES = 50;

interface Outcome {
  job: string;
  hook: boolean;
  sidecarExit: number | undefined;
  signalled: boolean;
  /** When the SIGTERM arrived and when the handler had gone in, in ms since the sidecar's process started. */
  signalMs: number | undefined;
  handlerMs: number | undefined;
  unsent: number | string;
  received: { total: number; distinct: number };
}

describeRealNode('Jobs done within milliseconds', () => {
  let env: NodeEnv;
  let vl: VictoriaLogs;
  let product: ProductOnNode | undefined;
  let sinkHost: string;
  let failed = false;
  const outcomes: Outcome[] = [];

  beforeAll(async () => {
    // The sidecar's own guarantee, without the harvester making good a lost line later.
    product = await startProductOnNode('jobharvest-node-early-sigterm');
    ({ env, vl } = product);
    sinkHost = await env.node.expose(vl.port);
  });
  afterAll(async () => {
    console.log('job: hook, sidecar exit, SIGTERM at / handler at (ms since the sidecar started), unsent, received/distinct');
    for (const o of outcomes) console.log(`  ${o.job}: ${o.hook ? 'preStop hook' : 'no hook'}, exit ${o.sidecarExit}, ${o.signalMs} / ${o.handlerMs}, ${o.unsent}, ${o.received.total}/${o.received.distinct}`);
    const margins = outcomes.filter((o) => o.signalMs !== undefined && o.handlerMs !== undefined).map((o) => o.signalMs! - o.handlerMs!);
    if (margins.length > 0) console.log(`SIGTERM after the handler: min ${Math.min(...margins)} ms, max ${Math.max(...margins)} ms`);
    await product?.stop(failed);
  });

  function scenario(title: string, body: () => Promise<void>): void {
    it(title, async () => {
      try {
        await body();
      } catch (err) {
        failed = true;
        throw err;
      }
    });
  }

  async function namespaceFor(tag: string, mode: 'node' | 'api'): Promise<string> {
    return createNamespace(env.core, tag, {
      'jobharvest.io/inject': 'enabled',
      'jobharvest.io/mode': mode,
      'jobharvest.io/sink': 'loki',
      'jobharvest.io/endpoint': `http://${sinkHost}/insert/loki/api/v1/push`,
      'jobharvest.io/ttl-seconds-after-finished': '600',
      'jobharvest.io/drain-seconds': '10',
    });
  }

  function fastJob(name: string, sharePids = false): V1Job {
    return {
      metadata: { name },
      spec: {
        backoffLimit: 0,
        template: {
          spec: {
            restartPolicy: 'Never',
            ...(sharePids ? { shareProcessNamespace: true } : {}),
            containers: [{ name: 'main', image: IMAGE, command: ['sh', '-c', numberedLines(name, LINES)] }],
          },
        },
      },
    };
  }

  async function create(namespace: string, job: V1Job): Promise<void> {
    const stored = await env.batch.createNamespacedJob({ namespace, body: job });
    expect(stored.spec?.template.spec?.initContainers?.[0]?.name, 'the webhook injected the sidecar').toBe(NAMES.container);
  }

  /** The Job's pod once the Job has finished (Complete), the sidecar's container terminated. */
  async function finishedPod(namespace: string, job: string): Promise<V1Pod> {
    const cond = await waitFor(
      `${namespace}/${job} to finish`,
      async () => {
        const j = await env.batch.readNamespacedJob({ name: job, namespace });
        return j.status?.conditions?.find((c) => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True');
      },
      { timeoutMs: 150_000, intervalMs: 250 },
    );
    expect(cond.type, `${namespace}/${job}`).toBe('Complete');
    return (await env.core.listNamespacedPod({ namespace, labelSelector: `batch.kubernetes.io/job-name=${job}` })).items[0]!;
  }

  async function outcomeOf(namespace: string, job: string): Promise<Outcome> {
    const pod = await finishedPod(namespace, job);
    const sidecar = pod.spec?.initContainers?.find((c) => c.name === NAMES.container);
    const status = pod.status?.initContainerStatuses?.find((s) => s.name === NAMES.container);
    const log = await env.core.readNamespacedPodLog({ name: pod.metadata!.name!, namespace, container: NAMES.container });
    const entries = log
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const signal = entries.find((e) => e.msg === 'signal received, draining');
    const summary = entries.find((e) => e.msg === 'summary');
    await vl.flush();
    const o: Outcome = {
      job,
      hook: sidecar?.lifecycle?.preStop !== undefined && sidecar.lifecycle.postStart === undefined,
      sidecarExit: status?.state?.terminated?.exitCode,
      signalled: signal?.signal === 'SIGTERM',
      signalMs: typeof signal?.sinceStartMs === 'number' ? signal.sinceStartMs : undefined,
      handlerMs: typeof signal?.handlerSinceStartMs === 'number' ? signal.handlerSinceStartMs : undefined,
      unsent: summary === undefined ? 'no summary' : typeof summary.lines_unsent === 'number' ? summary.lines_unsent : 'no count',
      received: await vl.countWithDistinct(`${exact('namespace', namespace)} ${exact('job', job)} ${exact('container', 'main')}`, '_msg'),
    };
    outcomes.push(o);
    return o;
  }

  function expectDrained(o: Outcome): void {
    expect({ job: o.job, hook: o.hook, sidecarExit: o.sidecarExit, signalled: o.signalled, unsent: o.unsent, received: o.received }).toEqual({
      job: o.job,
      hook: true,
      sidecarExit: 0,
      signalled: true,
      unsent: 0,
      received: { total: LINES, distinct: LINES },
    });
  }

  scenario('12 node-mode Jobs created at once: every sidecar caught its SIGTERM and drained, every line arrived once', async () => {
    const ns = await namespaceFor('burst', 'node');
    const jobs = Array.from({ length: 12 }, (_, i) => `burst-${i}`);
    await Promise.all(jobs.map((j) => create(ns, fastJob(j))));
    for (const j of jobs) expectDrained(await outcomeOf(ns, j));
  });

  scenario('6 node-mode Jobs one at a time, the kubelet at its fastest', async () => {
    const ns = await namespaceFor('serial', 'node');
    for (let i = 0; i < 6; i++) {
      await create(ns, fastJob(`serial-${i}`));
      expectDrained(await outcomeOf(ns, `serial-${i}`));
    }
  });

  scenario('4 api-mode Jobs created at once', async () => {
    const ns = await namespaceFor('api', 'api');
    const jobs = Array.from({ length: 4 }, (_, i) => `api-${i}`);
    await Promise.all(jobs.map((j) => create(ns, fastJob(j))));
    for (const j of jobs) expectDrained(await outcomeOf(ns, j));
  });

  scenario('a pod sharing its PID namespace has the same hook and drains the same way', async () => {
    const ns = await namespaceFor('shared', 'node');
    await create(ns, fastJob('shared-0', true));
    expectDrained(await outcomeOf(ns, 'shared-0'));
  });
});
