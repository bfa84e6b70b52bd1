/**
 * Kueue's controller-manager run out of cluster against the test control
 * plane, as its own process: the module's CRDs applied first, the manager
 * started with a configuration file (no leader election, no internal
 * certificate management, only the batch/job integration, every port on
 * 127.0.0.1), and its webhook configurations registered as URL-based copies
 * of the module's manifests that point at the manager's webhook server.
 *
 * Two things of an in-cluster install need a stand-in here:
 * - The webhook server's certificate is signed by the cluster CA for
 *   127.0.0.1, and the CA goes into every caBundle.
 * - With internal certificate management off, the manager reads its metrics
 *   certificate from the fixed path /etc/kueue/metrics/certs (a Secret mount
 *   in a pod) and exits if it is missing. The manager runs in a mount
 *   namespace of its own (`unshare`), where an overlay over /etc adds that
 *   folder; nothing on the machine's /etc changes.
 *
 * Only the webhooks for `batch` Jobs and Kueue's own kinds are registered
 * (the others are for integrations this configuration does not enable), and
 * the Job webhooks only for namespaces with this instance's label, so the
 * other tests sharing the control plane never meet Kueue.
 */
import { ApiextensionsV1Api, CustomObjectsApi, KubeConfig, type V1CustomResourceDefinition, type V1MutatingWebhook, type V1ValidatingWebhook } from '@kubernetes/client-node';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { get } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseAllDocuments, stringify } from 'yaml';
import { generateServing } from '../../../src/tls/generate.ts';
import type { ClusterInfo } from '../cluster/harness.ts';
import { httpCall } from '../cluster/http.ts';
import { freePorts } from '../../support/ports.ts';
import { startProcess, type ManagedProcess } from '../../support/process.ts';
import { waitFor } from '../../support/wait.ts';
import { ensureKueue, kueueManifests, kueueVersion } from './binary.ts';

export const KUEUE_GROUP = 'kueue.x-k8s.io';
export const KUEUE_API = 'v1beta2';
export const QUEUE_LABEL = 'kueue.x-k8s.io/queue-name';
export const PRIORITY_LABEL = 'kueue.x-k8s.io/priority-class';
/** The groups whose webhooks are registered: Jobs, and Kueue's own kinds. */
const GROUPS = new Set(['batch', KUEUE_GROUP]);

export interface KueueOptions {
  info: ClusterInfo;
  /** Names this instance's webhook configurations and its namespace label. */
  name: string;
  /** Extra configuration, merged over the harness's (top-level keys). */
  config?: Record<string, unknown>;
}

type Obj = Record<string, unknown>;

function kubeConfig(info: ClusterInfo): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromFile(info.kubeconfigPath);
  return kc;
}

function httpStatus(port: number, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = get({ host: '127.0.0.1', port, path, agent: false }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
  });
}

/** The module's CRDs, as files. */
export function kueueCrds(): Array<V1CustomResourceDefinition & Obj> {
  const dir = kueueManifests().crds;
  return readdirSync(dir)
    .filter((f) => f.endsWith('.yaml'))
    .sort()
    .map((f) => parseAllDocuments(readFileSync(join(dir, f), 'utf8'))[0]!.toJSON() as V1CustomResourceDefinition & Obj);
}

export class Kueue {
  /** The label a namespace needs for Kueue's Job webhooks to see it. */
  readonly namespaceLabel: Record<string, string>;
  readonly crds: string[] = [];
  private mutatingName: string;
  private readonly custom: CustomObjectsApi;
  private readonly created: Array<{ plural: string; name: string }> = [];

  private constructor(
    readonly info: ClusterInfo,
    readonly name: string,
    readonly process: ManagedProcess,
    readonly dir: string,
    readonly ports: { webhook: number; health: number; metrics: number },
    private readonly caPem: string,
    private readonly kc: KubeConfig,
  ) {
    this.namespaceLabel = { 'jobharvest.test/kueue': name };
    this.mutatingName = `kueue-${name}-mutating`;
    this.custom = kc.makeApiClient(CustomObjectsApi);
  }

  get version(): string {
    return kueueVersion();
  }

  get logPath(): string {
    return this.process.logPath;
  }

  static async start(o: KueueOptions): Promise<Kueue> {
    const bin = ensureKueue((m) => console.log(`[kueue] ${m}`));
    const kc = kubeConfig(o.info);
    const crds = await Kueue.installCrds(o.info, kc);
    const dir = mkdtempSync(join(tmpdir(), `jh-kueue-${o.name}-`));
    const [webhook, health, metrics] = (await freePorts(3)) as [number, number, number];
    const [caCert, caKey] = await Promise.all([readFile(join(o.info.certsDir, 'ca.crt'), 'utf8'), readFile(join(o.info.certsDir, 'ca.key'), 'utf8')]);
    const serving = await generateServing({ cert: caCert, key: caKey }, { dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'], leafDays: 2 });
    const certDir = join(dir, 'webhook-certs');
    // What the overlay adds to /etc in the manager's mount namespace.
    const metricsCerts = join(dir, 'etc-upper/kueue/metrics/certs');
    for (const d of [certDir, metricsCerts, join(dir, 'etc-work')]) mkdirSync(d, { recursive: true });
    for (const d of [certDir, metricsCerts]) {
      writeFileSync(join(d, 'tls.crt'), serving.cert);
      writeFileSync(join(d, 'tls.key'), serving.key, { mode: 0o600 });
    }
    const config = {
      apiVersion: 'config.kueue.x-k8s.io/v1beta2',
      kind: 'Configuration',
      namespace: 'kueue-system',
      health: { healthProbeBindAddress: `127.0.0.1:${health}` },
      metrics: { bindAddress: `127.0.0.1:${metrics}` },
      webhook: { host: '127.0.0.1', port: webhook, certDir },
      leaderElection: { leaderElect: false },
      internalCertManagement: { enable: false },
      integrations: { frameworks: ['batch/job'] },
      clientConnection: { qps: 50, burst: 100 },
      ...o.config,
    };
    writeFileSync(join(dir, 'config.yaml'), stringify(config));
    const args = [
      `--config=${join(dir, 'config.yaml')}`,
      `--kubeconfig=${o.info.kubeconfigPath}`,
      // The visibility API server would listen on every interface; the tests read Workloads instead.
      '--feature-gates=VisibilityOnDemand=false',
      '--zap-log-level=3',
    ];
    const overlay = `lowerdir=/etc,upperdir=${join(dir, 'etc-upper')},workdir=${join(dir, 'etc-work')}`;
    // Root needs only a mount namespace; anyone else also a user namespace in which they are root.
    const ns = process.getuid?.() === 0 ? ['--mount'] : ['--user', '--map-root-user', '--mount'];
    const script = `mount -t overlay overlay -o "$1" /etc && shift && exec "$@"`;
    const proc = startProcess(`kueue-${o.name}`, 'unshare', [...ns, '--propagation', 'private', 'sh', '-c', script, 'kueue-mounts', overlay, bin, ...args], join(o.info.logsDir, `kueue-${o.name}.log`));
    const k = new Kueue(o.info, o.name, proc, dir, { webhook, health, metrics }, caCert, kc);
    k.crds.push(...crds);
    try {
      await waitFor(`Kueue ${kueueVersion()} ready on 127.0.0.1:${health}`, async () => ((await httpStatus(health, '/readyz')) === 200 ? true : undefined), {
        timeoutMs: 90_000,
        intervalMs: 250,
        abortIf: () => (proc.exit ? `Kueue exited (${JSON.stringify(proc.exit)}):\n${proc.logTail(30)}` : undefined),
      });
      await k.registerWebhooks();
    } catch (err) {
      await k.stop();
      throw err;
    }
    return k;
  }

  /**
   * Applies the module's CRDs with server-side apply, byte for byte as the
   * module has them (a typed client would drop the `x-kubernetes-*` schema
   * fields it has no model for), and waits until they are served. A second
   * instance finds them in place.
   */
  private static async installCrds(info: ClusterInfo, kc: KubeConfig): Promise<string[]> {
    const api = kc.makeApiClient(ApiextensionsV1Api);
    const names: string[] = [];
    for (const crd of kueueCrds()) {
      const name = crd.metadata!.name!;
      names.push(name);
      const res = await httpCall(`${info.server}/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}?fieldManager=jobharvest-tests&force=true`, {
        method: 'PATCH',
        caPem: info.caPem,
        token: info.token,
        contentType: 'application/apply-patch+yaml',
        body: JSON.stringify(crd),
        timeoutMs: 30_000,
      });
      if (res.status !== 200 && res.status !== 201) throw new Error(`applying CRD ${name}: ${res.status} ${res.body.slice(0, 500)}`);
    }
    for (const name of names) {
      await waitFor(`CRD ${name} established`, async () => {
        const c = await api.readCustomResourceDefinition({ name });
        return c.status?.conditions?.some((x) => x.type === 'Established' && x.status === 'True') ? true : undefined;
      });
    }
    return names;
  }

  /** The module's webhook configurations, pointed at this manager. */
  webhookConfigurations(mutatingName = this.mutatingName): { mutating: Obj; validating: Obj } {
    const docs = parseAllDocuments(readFileSync(kueueManifests().webhooks, 'utf8')).map((d) => d.toJSON() as Obj | null);
    const caBundle = Buffer.from(this.caPem).toString('base64');
    const adapt = <W extends V1MutatingWebhook | V1ValidatingWebhook>(w: W): W => {
      const path = w.clientConfig.service?.path ?? '/';
      const jobs = w.rules?.some((r) => r.apiGroups?.includes('batch'));
      return {
        ...w,
        clientConfig: { url: `https://127.0.0.1:${this.ports.webhook}${path}`, caBundle },
        ...(jobs ? { namespaceSelector: { matchLabels: this.namespaceLabel } } : {}),
      };
    };
    const pick = (kind: string, name: string): Obj => {
      const doc = docs.find((d) => d?.kind === kind)!;
      const webhooks = (doc.webhooks as Array<V1MutatingWebhook & V1ValidatingWebhook>).filter((w) => w.rules?.every((r) => r.apiGroups?.every((g) => GROUPS.has(g)))).map(adapt);
      return { apiVersion: 'admissionregistration.k8s.io/v1', kind, metadata: { name, labels: { 'app.kubernetes.io/name': 'kueue', 'jobharvest.test/kueue': this.name } }, webhooks };
    };
    return { mutating: pick('MutatingWebhookConfiguration', mutatingName), validating: pick('ValidatingWebhookConfiguration', `kueue-${this.name}-validating`) };
  }

  /**
   * Registers the webhook configurations. The API server calls mutating
   * webhooks in the order of their configurations' names: `mutatingName`
   * decides whether Kueue's Job webhook comes before or after jobharvest's.
   */
  async registerWebhooks(mutatingName = this.mutatingName): Promise<void> {
    const adm = (await import('@kubernetes/client-node')).AdmissionregistrationV1Api;
    const api = this.kc.makeApiClient(adm);
    if (mutatingName !== this.mutatingName) await api.deleteMutatingWebhookConfiguration({ name: this.mutatingName }).catch(() => undefined);
    this.mutatingName = mutatingName;
    const { mutating, validating } = this.webhookConfigurations(mutatingName);
    for (const [body, read, create, replace] of [
      [mutating, api.readMutatingWebhookConfiguration.bind(api), api.createMutatingWebhookConfiguration.bind(api), api.replaceMutatingWebhookConfiguration.bind(api)],
      [validating, api.readValidatingWebhookConfiguration.bind(api), api.createValidatingWebhookConfiguration.bind(api), api.replaceValidatingWebhookConfiguration.bind(api)],
    ] as const) {
      const name = (body.metadata as { name: string }).name;
      try {
        const cur = await read({ name });
        await replace({ name, body: { ...body, metadata: { ...(body.metadata as Obj), resourceVersion: cur.metadata?.resourceVersion } } as never });
      } catch (err) {
        if ((err as { code?: number }).code !== 404) throw err;
        await create({ body: body as never });
      }
    }
  }

  get mutatingConfigurationName(): string {
    return this.mutatingName;
  }

  /** Creates a cluster-scoped Kueue object (ClusterQueue, ResourceFlavor, Topology, WorkloadPriorityClass); deleted at stop(). */
  async createClusterObject(plural: string, body: Obj): Promise<Obj> {
    const o = (await this.custom.createClusterCustomObject({ group: KUEUE_GROUP, version: KUEUE_API, plural, body })) as Obj;
    this.created.push({ plural, name: (body.metadata as { name: string }).name });
    return o;
  }

  async readClusterObject(plural: string, name: string): Promise<Obj> {
    return (await this.custom.getClusterCustomObject({ group: KUEUE_GROUP, version: KUEUE_API, plural, name })) as Obj;
  }

  async createNamespaced(namespace: string, plural: string, body: Obj): Promise<Obj> {
    return (await this.custom.createNamespacedCustomObject({ group: KUEUE_GROUP, version: KUEUE_API, namespace, plural, body })) as Obj;
  }

  async listNamespaced(namespace: string, plural: string): Promise<Obj[]> {
    const l = (await this.custom.listNamespacedCustomObject({ group: KUEUE_GROUP, version: KUEUE_API, namespace, plural })) as { items: Obj[] };
    return l.items;
  }

  /** The Workload of a Job (Kueue names it after the Job and owns it by the Job). */
  async workloadOf(namespace: string, jobUid: string): Promise<Obj | undefined> {
    const items = await this.listNamespaced(namespace, 'workloads');
    return items.find((w) => ((w.metadata as { ownerReferences?: Array<{ uid: string }> }).ownerReferences ?? []).some((r) => r.uid === jobUid));
  }

  /**
   * Stops the manager and removes what start() and createClusterObject()
   * added: the objects (while the manager still runs, so it can release
   * their finalizers), then the webhook configurations. The CRDs stay for
   * the rest of the run: nothing serves a conversion for them, and a later
   * instance applies them again.
   */
  async stop(): Promise<void> {
    const adm = this.kc.makeApiClient((await import('@kubernetes/client-node')).AdmissionregistrationV1Api);
    for (const { plural, name } of [...this.created].reverse()) {
      await this.custom.deleteClusterCustomObject({ group: KUEUE_GROUP, version: KUEUE_API, plural, name }).catch(() => undefined);
    }
    for (const { plural, name } of this.created) {
      await waitFor(`${plural}/${name} deleted`, async () => {
        try {
          await this.readClusterObject(plural, name);
          return undefined;
        } catch (err) {
          return (err as { code?: number }).code === 404 ? true : undefined;
        }
      }, { timeoutMs: 20_000 }).catch(() => this.dropFinalizers(plural, name));
    }
    await this.process.stop();
    await adm.deleteMutatingWebhookConfiguration({ name: this.mutatingName }).catch(() => undefined);
    await adm.deleteValidatingWebhookConfiguration({ name: `kueue-${this.name}-validating` }).catch(() => undefined);
    rmSync(this.dir, { recursive: true, force: true });
  }

  private async dropFinalizers(plural: string, name: string): Promise<void> {
    await this.custom
      .patchClusterCustomObject({ group: KUEUE_GROUP, version: KUEUE_API, plural, name, body: [{ op: 'replace', path: '/metadata/finalizers', value: [] }] })
      .catch(() => undefined);
  }

  /** A fresh suffix for object names of one test run. */
  static suffix(): string {
    return randomBytes(2).toString('hex');
  }
}
