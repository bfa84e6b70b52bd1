/**
 * Everything a Job's life needs around the control plane, started as real
 * processes: VictoriaLogs as the log server, the webhook (the real CLI), the
 * harvester (its own program, sharing the webhook's signing key, with this
 * VictoriaLogs as its approved destination), and the test kubelet running the
 * real sidecar bundle. Used by the lifecycle
 * e2e tests and by `npm run demo`.
 */
import { BatchV1Api, CoreV1Api, KubeConfig, RbacAuthorizationV1Api, type V1Job, type V1Volume } from '@kubernetes/client-node';
import { randomBytes } from 'node:crypto';
import { NAMES } from '../../../src/contract/env.ts';
import type { ClusterInfo } from '../cluster/harness.ts';
import { summaryIn } from '../../support/summary.ts';
import { waitFor } from '../../support/wait.ts';
import { startWebhook, type WebhookProcess } from '../../support/webhook-process.ts';
import { destinationsFile, signingKeyFile, startHarvester, type HarvesterProcess } from '../../support/harvester-process.ts';
import { VictoriaLogs, exact } from '../servers/victorialogs.ts';
import { ensureSidecarBundle } from '../../support/sidecar.ts';
import { TestKubelet, type KubeletOptions } from './kubelet.ts';

export const LOG_READER_CLUSTERROLE = 'jobharvest-log-reader';

/** What the chart installs for api mode (the webhook binds it per namespace); created once per control plane. */
export async function createLogReaderClusterRole(kc: KubeConfig): Promise<void> {
  await kc
    .makeApiClient(RbacAuthorizationV1Api)
    .createClusterRole({
      body: {
        metadata: { name: LOG_READER_CLUSTERROLE },
        rules: [
          { apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch'] },
          { apiGroups: [''], resources: ['pods/log'], verbs: ['get'] },
        ],
      },
    })
    .catch((err: { code?: number }) => {
      if (err.code !== 409) throw err;
    });
}
/** The webhook's namespace (the default of its config, excluded from injection). */
export const WEBHOOK_NAMESPACE = 'jobharvest';
const JOB_NAME_LABEL = 'batch.kubernetes.io/job-name';

export function kubeConfigFor(info: Pick<ClusterInfo, 'server' | 'token' | 'caPem'>): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: info.server, caData: Buffer.from(info.caPem).toString('base64') }],
    users: [{ name: 'admin', token: info.token }],
    contexts: [{ name: 'c', cluster: 'c', user: 'admin' }],
    currentContext: 'c',
  });
  return kc;
}

export interface StackOptions {
  info: ClusterInfo;
  /** Names the webhook configuration and prefixes the namespaces this stack's kubelet schedules. */
  name: string;
  kubelet?: Partial<Omit<KubeletOptions, 'cluster' | 'namespaces'>>;
  /** Extra webhook flags. */
  webhookArgs?: string[];
  /** Extra harvester flags, e.g. a short --max-hold-seconds; false: no harvester. */
  harvesterArgs?: string[] | false;
}

export interface NamespaceOptions {
  /** jobharvest.io/mode; unset means auto. */
  mode?: 'node' | 'api';
  /** pod-security.kubernetes.io/enforce. */
  psa?: 'privileged' | 'baseline' | 'restricted';
  ttlSeconds?: number;
  drainSeconds?: number;
  /** The namespace's exact name (it must start with this stack's prefix); default: `<prefix><tag>-<random>`. */
  name?: string;
  /** More labels on the namespace. */
  labels?: Record<string, string>;
  /** Ship with the sink of the webhook's own configuration (its --config) instead of the loki sink to this stack's VictoriaLogs. */
  configSink?: boolean;
}

export class Stack {
  readonly core: CoreV1Api;
  readonly batch: BatchV1Api;
  private readonly prefix: string;
  private readonly namespaces: string[] = [];

  private constructor(
    readonly info: ClusterInfo,
    readonly name: string,
    readonly vl: VictoriaLogs,
    readonly webhook: WebhookProcess,
    readonly kubelet: TestKubelet,
    prefix: string,
    readonly harvester: HarvesterProcess | undefined,
    /** What a second harvester of this stack needs: the same key and destinations. */
    readonly harvesterFiles: { signingKeyFile: string; destinationsFile: string },
  ) {
    const kc = kubeConfigFor(info);
    this.core = kc.makeApiClient(CoreV1Api);
    this.batch = kc.makeApiClient(BatchV1Api);
    this.prefix = prefix;
  }

  static async start(o: StackOptions): Promise<Stack> {
    ensureSidecarBundle();
    const prefix = `${o.name}-`;
    const kc = kubeConfigFor(o.info);
    await createLogReaderClusterRole(kc);
    // The webhook's own namespace, where its leader-election Lease lives.
    await kc
      .makeApiClient(CoreV1Api)
      .createNamespace({ body: { metadata: { name: WEBHOOK_NAMESPACE } } })
      .catch((err: { code?: number }) => {
        if (err.code !== 409) throw err;
      });
    const vl = await VictoriaLogs.start();
    const files = {
      signingKeyFile: signingKeyFile(o.info, o.name),
      destinationsFile: destinationsFile(o.info, o.name, Stack.destinations(vl)),
    };
    let webhook: WebhookProcess | undefined;
    let harvester: HarvesterProcess | undefined;
    try {
      webhook = await startWebhook(o.info, { name: `jobharvest-${o.name}`, args: [...Stack.webhookArgs(o), '--signing-key-file', files.signingKeyFile] });
      if (o.harvesterArgs !== false) harvester = startHarvester(o.info, { name: `jobharvest-${o.name}`, ...files, args: o.harvesterArgs ?? [] });
      const kubelet = await TestKubelet.start({ ...o.kubelet, cluster: o.info, namespaces: (ns) => ns.startsWith(prefix) });
      return new Stack(o.info, o.name, vl, webhook, kubelet, prefix, harvester, files);
    } catch (err) {
      await harvester?.stop();
      await webhook?.stop();
      await vl.dispose();
      throw err;
    }
  }

  /** This stack's VictoriaLogs, approved for every sink it ingests; loopback allowed, as it runs on this machine. */
  static destinations(vl: VictoriaLogs): Array<{ name: string; sink: string; endpoint: string; allow: string[] }> {
    const e = vl.endpoints;
    return [
      { name: 'vl-loki', sink: 'loki', endpoint: e.loki, allow: ['loopback'] },
      { name: 'vl-http', sink: 'http', endpoint: e.jsonline, allow: ['loopback'] },
      { name: 'vl-es', sink: 'elasticsearch', endpoint: e.elasticsearchBase, allow: ['loopback'] },
      { name: 'vl-otlp', sink: 'otlp', endpoint: e.otlp, allow: ['loopback'] },
    ];
  }

  /**
   * The flags of this stack's webhook. The service name names its Lease, so
   * stacks sharing a control plane each elect their own leader.
   */
  static webhookArgs(o: Pick<StackOptions, 'name' | 'webhookArgs'>): string[] {
    return ['--log-reader-clusterrole', LOG_READER_CLUSTERROLE, '--namespace', WEBHOOK_NAMESPACE, '--service-name', `jobharvest-${o.name}`, ...(o.webhookArgs ?? [])];
  }

  /** A fresh name for a namespace of the stack named `stack`, for a configuration that must name it before the stack starts. */
  static namespaceName(stack: string, tag: string): string {
    return `${stack}-${tag}-${randomBytes(2).toString('hex')}`;
  }

  /** An opted-in namespace whose Jobs ship to this stack's VictoriaLogs through the loki sink (or, with `configSink`, as the webhook's configuration says). */
  async namespace(tag: string, o: NamespaceOptions = {}): Promise<string> {
    const name = o.name ?? Stack.namespaceName(this.name, tag);
    if (!name.startsWith(this.prefix)) throw new Error(`namespace ${name} does not start with ${this.prefix}: this stack's kubelet would not run its pods`);
    const annotations: Record<string, string> = {
      'jobharvest.io/inject': 'enabled',
      ...(o.configSink ? {} : { 'jobharvest.io/sink': 'loki', 'jobharvest.io/endpoint': this.vl.endpoints.loki }),
      'jobharvest.io/ttl-seconds-after-finished': String(o.ttlSeconds ?? 3),
      'jobharvest.io/drain-seconds': String(o.drainSeconds ?? 10),
    };
    if (o.mode) annotations['jobharvest.io/mode'] = o.mode;
    const labels: Record<string, string> = { ...(o.labels ?? {}), ...(o.psa ? { 'pod-security.kubernetes.io/enforce': o.psa } : {}) };
    await this.core.createNamespace({ body: { metadata: { name, annotations, labels } } });
    this.namespaces.push(name);
    if (o.mode === 'api' || (o.psa !== undefined && o.psa !== 'privileged')) {
      // The webhook binds the log reader when it sees an api-mode namespace.
      const rbac = kubeConfigFor(this.info).makeApiClient(RbacAuthorizationV1Api);
      await waitFor(`the log-reader RoleBinding in ${name}`, () => rbac.readNamespacedRoleBinding({ name: 'jobharvest-log-reader', namespace: name }), { timeoutMs: 20_000 });
    }
    await waitFor(`the default ServiceAccount in ${name}`, () => this.core.readNamespacedServiceAccount({ name: 'default', namespace: name }), { timeoutMs: 20_000 });
    return name;
  }

  async stop(): Promise<void> {
    await this.kubelet.stop();
    await this.harvester?.stop();
    await this.webhook.stop();
    await kubeConfigFor(this.info)
      .makeApiClient((await import('@kubernetes/client-node')).AdmissionregistrationV1Api)
      .deleteMutatingWebhookConfiguration({ name: `jobharvest-${this.name}` })
      .catch(() => undefined);
    for (const name of this.namespaces) await this.core.deleteNamespace({ name }).catch(() => undefined);
    await this.vl.dispose();
  }

  /** Pods of a Job that ran on the kubelet, in start order. */
  jobWorkers(namespace: string, job: string) {
    return this.kubelet.allWorkers().filter((w) => w.namespace === namespace && w.labels[JOB_NAME_LABEL] === job);
  }

  /** The sidecar's final summary line of a pod (its own log, which the kubelet keeps after the pod is gone). */
  sidecarSummary(uid: string): Record<string, unknown> | undefined {
    return summaryIn(this.kubelet.worker(uid)?.output(NAMES.container) ?? []);
  }

  /** LogsQL filter for the main containers' lines of a namespace (the loki sink's labels). */
  filter(namespace: string, container = 'main'): string {
    return `${exact('namespace', namespace)} ${exact('container', container)}`;
  }
}

/** A shell loop printing `n` numbered lines `<tag> line <i>`; each line is unique across a run. */
export function numberedLines(tag: string, n: number, from = 1): string {
  return `i=${from}; while [ $i -le ${from + n - 1} ]; do echo "${tag} line $i"; i=$((i+1)); done`;
}

export interface JobOptions {
  script: string;
  restartPolicy?: 'Never' | 'OnFailure';
  backoffLimit?: number;
  completions?: number;
  parallelism?: number;
  indexed?: boolean;
  env?: Array<{ name: string; value: string }>;
  volumes?: V1Volume[];
  volumeMounts?: Array<{ name: string; mountPath: string }>;
  /** The restricted Pod Security profile for the main container. */
  restricted?: boolean;
  terminationGracePeriodSeconds?: number;
}

export function shellJob(name: string, o: JobOptions): V1Job {
  const restricted = o.restricted
    ? {
        securityContext: {
          runAsNonRoot: true,
          runAsUser: 1000,
          allowPrivilegeEscalation: false,
          capabilities: { drop: ['ALL'] },
          seccompProfile: { type: 'RuntimeDefault' },
        },
      }
    : {};
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: { name },
    spec: {
      backoffLimit: o.backoffLimit ?? 0,
      completions: o.completions,
      parallelism: o.parallelism,
      completionMode: o.indexed ? 'Indexed' : undefined,
      template: {
        spec: {
          restartPolicy: o.restartPolicy ?? 'Never',
          terminationGracePeriodSeconds: o.terminationGracePeriodSeconds,
          containers: [{ name: 'main', image: 'busybox:1.36', command: ['sh', '-c', o.script], env: o.env, volumeMounts: o.volumeMounts, ...restricted }],
          volumes: o.volumes,
        },
      },
    },
  };
}
