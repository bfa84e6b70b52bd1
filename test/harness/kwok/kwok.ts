/**
 * A fleet of fake nodes on the test control plane: KWOK (test/harness/servers/
 * kwok, built from its Go module) runs out of cluster with the fleet's stages
 * (stages.ts), and kube-scheduler (built by test/harness/node) binds the
 * fleet's pods to its nodes. The scheduler answers only to its own
 * schedulerName, so pods of other tests in a shared cluster stay as they are.
 *
 * KWOK also serves the nodes' kubelet API: the API server reaches it at the
 * nodes' address for `pods/log`, over TLS with a serving certificate signed
 * by the cluster CA, and KWOK answers with the CRI log file that ClusterLogs
 * names for every pod of the fleet.
 */
import type { ChildProcess } from 'node:child_process';
import { createWriteStream, existsSync, type WriteStream } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CoreV1Api, PatchStrategy, setHeaderOptions, type V1Node } from '@kubernetes/client-node';
import { stringify } from 'yaml';
import { generateServing } from '../../../src/tls/generate.ts';
import { freePort } from '../../support/ports.ts';
import { spawnLogged, tailFile, terminate } from '../../support/process.ts';
import { waitFor } from '../../support/wait.ts';
import { kubeConfigFor, type ClusterInfo } from '../cluster/client.ts';
import { KWOK, ensureGoProgram } from '../servers/go-build.ts';
import { FAKE_NODE_ANNOTATION, fleetStages } from './stages.ts';

const HERE = fileURLToPath(new URL('.', import.meta.url));
/** kube-scheduler, as test/harness/node builds it (`npm run node:build`). */
export const SCHEDULER_BIN = resolve(HERE, '../node/bin/kube-scheduler');
/** The scheduler name the fleet's pods carry. */
export const FLEET_SCHEDULER = 'jobharvest-fleet';
/** Fake nodes carry this taint; the fleet's pods tolerate it, nobody else's do. */
export const FLEET_TAINT = { key: FAKE_NODE_ANNOTATION, value: 'fake', effect: 'NoSchedule' } as const;

export interface FleetOptions {
  /** Fake nodes, each with `podsPerNode` pods of capacity (a kubelet's default is 110). */
  nodes: number;
  podsPerNode?: number;
  /** A CRI log file every fleet pod's containers serve as `pods/log`. */
  logsFile: string;
  /** Node names are `<prefix>-<i>`. */
  prefix?: string;
  /** The scheduler's client rate limits (its defaults, 50 qps and burst 100, would be the bottleneck of a large fleet). */
  schedulerQps?: number;
}

export class Fleet {
  private constructor(
    private readonly dir: string,
    private readonly kwok: ChildProcess,
    private readonly scheduler: ChildProcess,
    private readonly logs: WriteStream[],
    readonly nodeNames: readonly string[],
    private readonly cluster: ClusterInfo,
  ) {}

  /** The pod-spec fields that put a pod on the fleet. */
  static podSpec(): { schedulerName: string; tolerations: Array<{ key: string; value: string; effect: string; operator: string }> } {
    return { schedulerName: FLEET_SCHEDULER, tolerations: [{ ...FLEET_TAINT, operator: 'Equal' }] };
  }

  static async start(cluster: ClusterInfo, opts: FleetOptions): Promise<Fleet> {
    if (!existsSync(SCHEDULER_BIN)) throw new Error(`${SCHEDULER_BIN} is missing: run \`npm run node:build\``);
    const bin = ensureGoProgram(KWOK);
    const dir = await mkdtemp(join(tmpdir(), 'jobharvest-fleet-'));
    const prefix = opts.prefix ?? 'fleet';
    const port = await freePort();
    const [caCert, caKey] = await Promise.all([readFile(join(cluster.certsDir, 'ca.crt'), 'utf8'), readFile(join(cluster.certsDir, 'ca.key'), 'utf8')]);
    const serving = await generateServing({ cert: caCert, key: caKey }, { dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'], leafDays: 2 });
    await writeFile(join(dir, 'kwok.crt'), serving.cert);
    await writeFile(join(dir, 'kwok.key'), serving.key, { mode: 0o600 });
    const clusterLogs = {
      apiVersion: 'kwok.x-k8s.io/v1alpha1',
      kind: 'ClusterLogs',
      metadata: { name: 'fleet' },
      spec: { logs: [{ logsFile: opts.logsFile, follow: false }] },
    };
    await writeFile(join(dir, 'kwok.yaml'), [...fleetStages(), clusterLogs].map((d) => stringify(d)).join('---\n'));
    await writeFile(
      join(dir, 'scheduler.yaml'),
      stringify({
        apiVersion: 'kubescheduler.config.k8s.io/v1',
        kind: 'KubeSchedulerConfiguration',
        clientConnection: { kubeconfig: cluster.kubeconfigPath, qps: opts.schedulerQps ?? 500, burst: (opts.schedulerQps ?? 500) * 2 },
        leaderElection: { leaderElect: false },
        profiles: [{ schedulerName: FLEET_SCHEDULER }],
      }),
    );

    const core = kubeConfigFor(cluster).makeApiClient(CoreV1Api);
    const names = Array.from({ length: opts.nodes }, (_, i) => `${prefix}-${i}`);
    const pods = String(opts.podsPerNode ?? 110);
    for (const name of names) {
      const node: V1Node = {
        metadata: { name, annotations: { [FAKE_NODE_ANNOTATION]: 'fake' }, labels: { 'kubernetes.io/hostname': name, type: 'kwok', 'kubernetes.io/os': 'linux' } },
        spec: { taints: [{ ...FLEET_TAINT }] },
        status: { allocatable: { cpu: '32', memory: '256Gi', pods }, capacity: { cpu: '32', memory: '256Gi', pods } },
      };
      await core.createNode({ body: node });
    }

    const kwokLog = createWriteStream(join(dir, 'kwok.log'));
    const kwok = spawnLogged(bin, [
      `--config=${join(dir, 'kwok.yaml')}`,
      `--kubeconfig=${cluster.kubeconfigPath}`,
      `--manage-nodes-with-annotation-selector=${FAKE_NODE_ANNOTATION}=fake`,
      '--node-ip=127.0.0.1',
      `--node-port=${port}`,
      `--server-address=127.0.0.1:${port}`,
      `--tls-cert-file=${join(dir, 'kwok.crt')}`,
      `--tls-private-key-file=${join(dir, 'kwok.key')}`,
      '--cidr=10.128.0.0/12',
      '--node-lease-duration-seconds=0',
    ], kwokLog);
    const schedLog = createWriteStream(join(dir, 'scheduler.log'));
    const scheduler = spawnLogged(SCHEDULER_BIN, [`--config=${join(dir, 'scheduler.yaml')}`, '--secure-port=0', '-v=1'], schedLog);
    const fleet = new Fleet(dir, kwok, scheduler, [kwokLog, schedLog], names, cluster);
    try {
      await waitFor(
        `${names.length} fake nodes Ready`,
        async () => {
          const list = await core.listNode({ labelSelector: 'type=kwok' });
          const mine = list.items.filter((n) => n.metadata?.name?.startsWith(`${prefix}-`));
          return mine.length === names.length && mine.every((n) => n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')) ? true : undefined;
        },
        {
          timeoutMs: 60_000,
          abortIf: () =>
            kwok.exitCode !== null ? `kwok exited:\n${fleet.kwokLog()}` : scheduler.exitCode !== null ? `kube-scheduler exited:\n${tailFile(join(dir, 'scheduler.log'))}` : undefined,
        },
      );
      // The API server taints a new node not-ready (TaintNodesByCondition) and
      // the node lifecycle controller, which the test control plane does not
      // run, would take it off once the node is Ready: do that here.
      for (const name of names) {
        await core.patchNode({ name, body: [{ op: 'replace', path: '/spec/taints', value: [{ ...FLEET_TAINT }] }] }, setHeaderOptions('Content-Type', PatchStrategy.JsonPatch));
      }
    } catch (err) {
      await fleet.stop();
      throw err;
    }
    return fleet;
  }

  kwokLog(lines = 40): string {
    return tailFile(join(this.dir, 'kwok.log'), lines);
  }

  /** Stops KWOK and the scheduler and deletes the fake nodes (their pods go with them through the garbage collector). */
  async stop(): Promise<void> {
    await Promise.all([terminate(this.kwok), terminate(this.scheduler)]);
    for (const l of this.logs) l.end();
    const core = kubeConfigFor(this.cluster).makeApiClient(CoreV1Api);
    for (const name of this.nodeNames) await core.deleteNode({ name }).catch(() => undefined);
    if (process.env.JOBHARVEST_KEEP_CLUSTER !== '1') await rm(this.dir, { recursive: true, force: true });
  }
}
