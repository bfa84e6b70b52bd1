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
import { createLogReaderClusterRole, kubeConfigFor, LOG_READER_CLUSTERROLE, WEBHOOK_NAMESPACE } from '../harness/kubelet/stack.ts';
import { nodeUnavailableReason, startNode, type RealNode } from '../harness/node/node.ts';
import { VictoriaLogs } from '../harness/servers/victorialogs.ts';
import { destinationsFile, signingKeyFile, startHarvester, type DestinationSpec, type HarvesterProcess } from './harvester-process.ts';
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

export async function startNodeEnv(o: { controllers?: string[]; controllerManagerFlags?: string[] } = {}): Promise<NodeEnv> {
  const cluster = await startCluster({
    controllers: [...DEFAULT_CONTROLLERS, 'node-lifecycle-controller', ...(o.controllers ?? [])],
    ...(o.controllerManagerFlags ? { controllerManagerFlags: o.controllerManagerFlags } : {}),
  });
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
  /** The harvester, its own process sharing the webhook's signing key; undefined when started without. */
  harvester: HarvesterProcess | undefined;
  /** Its Lease, in the webhook's namespace. */
  harvesterLease: string;
  /** VictoriaLogs as the node's pods reach it (`host:port`), the harvester's approved destination. */
  sinkHost: string;
  stop(failed: boolean): Promise<void>;
}

export interface ProductOptions {
  /** Extra harvester flags, e.g. a short --max-hold-seconds; false: no harvester. */
  harvesterArgs?: string[] | false;
  /** Extra kube-controller-manager controllers and flags (the pod GC, the node controller's timings). */
  controllers?: string[];
  controllerManagerFlags?: string[];
}

/**
 * VictoriaLogs' ingestion endpoints at the address the node's pods reach it
 * by, which is the endpoint a pod's sidecar (and so the harvester) ships to.
 * The host side of the node's veth is a private address.
 */
export function nodeDestinations(sinkHost: string): DestinationSpec[] {
  const base = `http://${sinkHost}/insert`;
  return [
    { name: 'vl-loki', sink: 'loki', endpoint: `${base}/loki/api/v1/push`, allow: ['private', 'loopback'] },
    { name: 'vl-http', sink: 'http', endpoint: `${base}/jsonline`, allow: ['private', 'loopback'] },
    { name: 'vl-es', sink: 'elasticsearch', endpoint: `${base}/elasticsearch`, allow: ['private', 'loopback'] },
    { name: 'vl-otlp', sink: 'otlp', endpoint: `${base}/opentelemetry/v1/logs`, allow: ['private', 'loopback'] },
  ];
}

/**
 * What every real-node scenario runs on: the control plane and the node, the
 * log-reader ClusterRole the chart would install, the webhook's namespace,
 * VictoriaLogs, the webhook out of cluster with `webhookArgs` added to its
 * own, and the harvester as its own process, sharing the webhook's signing
 * key, with VictoriaLogs (as the node reaches it) as its approved destination.
 */
export async function startProductOnNode(name: string, webhookArgs: string[] = [], o: ProductOptions = {}): Promise<ProductOnNode> {
  const env = await startNodeEnv({ ...(o.controllers ? { controllers: o.controllers } : {}), ...(o.controllerManagerFlags ? { controllerManagerFlags: o.controllerManagerFlags } : {}) });
  let vl: VictoriaLogs | undefined;
  let webhook: WebhookProcess | undefined;
  let harvester: HarvesterProcess | undefined;
  try {
    const kc = kubeConfigFor(env.cluster);
    await createLogReaderClusterRole(kc);
    // Where the webhook's and the harvester's Leases live.
    await env.core.createNamespace({ body: { metadata: { name: WEBHOOK_NAMESPACE } } }).catch((err: { code?: number }) => {
      if (err.code !== 409) throw err;
    });
    vl = await VictoriaLogs.start();
    const sinkHost = await env.node.expose(vl.port);
    const key = signingKeyFile(env.cluster, name);
    webhook = await startWebhook(env.cluster, { name, args: ['--log-reader-clusterrole', LOG_READER_CLUSTERROLE, '--signing-key-file', key, ...webhookArgs] });
    if (o.harvesterArgs !== false) {
      harvester = startHarvester(env.cluster, { name, signingKeyFile: key, destinationsFile: destinationsFile(env.cluster, name, nodeDestinations(sinkHost)), args: o.harvesterArgs ?? [] });
    }
    const started = { vl, webhook, harvester };
    return {
      env,
      ...started,
      harvesterLease: `${name}-harvester`,
      sinkHost,
      async stop(failed) {
        await started.harvester?.stop();
        await env.stop(failed);
        await started.webhook.stop();
        await started.vl.dispose();
      },
    };
  } catch (err) {
    await harvester?.stop();
    await webhook?.stop();
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
