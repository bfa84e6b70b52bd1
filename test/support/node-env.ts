/**
 * A real node to run the product on, for the real-node suite (test/node/) and
 * its benchmark (bench/node/): one control plane (with the node-lifecycle
 * controller, which lifts the not-ready taint once the kubelet reports Ready,
 * and the API server's default admission plugins, Pod Security included) and
 * one real node.
 */
import { BatchV1Api, CoreV1Api, type V1Pod } from '@kubernetes/client-node';
import { randomBytes } from 'node:crypto';
import { DEFAULT_CONTROLLERS, startCluster, type Cluster } from '../harness/cluster/harness.ts';
import { createLogReaderClusterRole, kubeConfigFor, LOG_READER_CLUSTERROLE } from '../harness/kubelet/stack.ts';
import { nodeUnavailableReason, startNode, type RealNode } from '../harness/node/node.ts';
import { VictoriaLogs } from '../harness/servers/victorialogs.ts';
import { waitFor } from './wait.ts';
import { startWebhook, type WebhookProcess } from './webhook-process.ts';

/** Why a real node cannot run here (not root, binaries not built), or undefined. */
export const unavailable = nodeUnavailableReason();

export interface NodeEnv {
  cluster: Cluster;
  node: RealNode;
  core: CoreV1Api;
  batch: BatchV1Api;
  stop(failed: boolean): Promise<void>;
}

export async function startNodeEnv(): Promise<NodeEnv> {
  const cluster = await startCluster({ controllers: [...DEFAULT_CONTROLLERS, 'node-lifecycle-controller'] });
  let node: RealNode;
  try {
    node = await startNode({ cluster });
  } catch (err) {
    await cluster.stop({ failed: true });
    throw err;
  }
  const kc = kubeConfigFor(cluster);
  return {
    cluster,
    node,
    core: kc.makeApiClient(CoreV1Api),
    batch: kc.makeApiClient(BatchV1Api),
    async stop(failed) {
      await node.stop({ failed });
      await cluster.stop({ failed });
    },
  };
}

export interface ProductOnNode {
  env: NodeEnv;
  vl: VictoriaLogs;
  webhook: WebhookProcess;
  stop(failed: boolean): Promise<void>;
}

/**
 * What every real-node scenario runs on: the control plane and the node, the
 * log-reader ClusterRole the chart would install, VictoriaLogs, and the
 * webhook out of cluster with `webhookArgs` added to its own.
 */
export async function startProductOnNode(name: string, webhookArgs: string[] = []): Promise<ProductOnNode> {
  const env = await startNodeEnv();
  let vl: VictoriaLogs | undefined;
  try {
    await createLogReaderClusterRole(kubeConfigFor(env.cluster));
    vl = await VictoriaLogs.start();
    const webhook = await startWebhook(env.cluster, { name, args: ['--log-reader-clusterrole', LOG_READER_CLUSTERROLE, ...webhookArgs] });
    const started = vl;
    return {
      env,
      vl: started,
      webhook,
      async stop(failed) {
        await env.stop(failed);
        await webhook.stop();
        await started.dispose();
      },
    };
  } catch (err) {
    await vl?.dispose();
    await env.stop(true);
    throw err;
  }
}

export async function createNamespace(core: CoreV1Api, tag: string, annotations: Record<string, string> = {}, labels: Record<string, string> = {}): Promise<string> {
  const name = `${tag}-${randomBytes(3).toString('hex')}`;
  await core.createNamespace({ body: { metadata: { name, annotations, labels } } });
  await waitFor(`the default ServiceAccount in ${name}`, () => core.readNamespacedServiceAccount({ name: 'default', namespace: name }), { timeoutMs: 30_000 });
  return name;
}

export async function waitForPodPhase(core: CoreV1Api, namespace: string, name: string, phases: string[], timeoutMs = 120_000): Promise<V1Pod> {
  return waitFor(
    `pod ${namespace}/${name} in ${phases.join(' or ')}`,
    async () => {
      const pod = await core.readNamespacedPod({ name, namespace });
      return phases.includes(pod.status?.phase ?? '') ? pod : undefined;
    },
    { timeoutMs, intervalMs: 500 },
  );
}
