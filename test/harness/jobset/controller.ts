/**
 * The JobSet controller manager (sigs.k8s.io/jobset, the release pinned in
 * `test/harness/servers/jobset/go.mod`) run out of cluster against the test
 * control plane, as its release installs it, less the parts that need a
 * Deployment:
 * - the CRD is the release's own `config/components/crd/bases/` file, read from
 *   the module cache (the module the binary was built from), never copied here;
 * - its webhooks are the release's `config/components/webhook/manifests.yaml`
 *   with the release's kustomize patches applied (the pod webhooks only see
 *   pods labelled `jobset.sigs.k8s.io/jobset-name`), `failurePolicy: Fail` as
 *   released; the Service reference becomes `https://127.0.0.1:<port>/<path>`
 *   with the cluster CA as caBundle, as the API server sees nothing but
 *   loopback here;
 * - its serving certificate is signed by the cluster CA for 127.0.0.1 and read
 *   from a cert dir, with the internal cert rotation off (it would write a
 *   Secret and patch the configurations for a Service that does not exist);
 * - leader election off; metrics off; health probes on a free loopback port.
 */
import {
  AdmissionregistrationV1Api,
  ApiextensionsV1Api,
  CustomObjectsApi,
  KubeConfig,
  loadYaml,
  type KubernetesObject,
  type V1CustomResourceDefinition,
  type V1MutatingWebhookConfiguration,
  type V1ValidatingWebhookConfiguration,
} from '@kubernetes/client-node';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { applyPatch, type Operation } from 'fast-json-patch';
import { parse, parseAllDocuments, stringify } from 'yaml';
import { generateServing } from '../../../src/tls/generate.ts';
import { freePorts } from '../../support/ports.ts';
import { startProcess, type ManagedProcess } from '../../support/process.ts';
import { waitFor } from '../../support/wait.ts';
import type { ClusterInfo } from '../cluster/harness.ts';
import { JOBSET, ensureGoProgram, moduleDir, pinnedVersion } from '../servers/go-build.ts';

export const JOBSET_GROUP = 'jobset.x-k8s.io';
export const JOBSET_VERSION = 'v1alpha2';
export const JOBSET_CRD = `jobsets.${JOBSET_GROUP}`;

/** The pinned JobSet release, e.g. v0.12.0. */
export function jobSetRelease(): string {
  return pinnedVersion(JOBSET, 'sigs.k8s.io/jobset');
}

/**
 * The folder of the pinned release in the Go module cache: downloaded (and
 * checked against go.sum) if a cleaned cache no longer has it, though the
 * binary is still cached.
 */
export function jobSetSourceDir(): string {
  const out = execFileSync('go', ['mod', 'download', '-json', 'sigs.k8s.io/jobset'], {
    cwd: moduleDir(JOBSET),
    encoding: 'utf8',
    env: { ...process.env, GOFLAGS: '-mod=readonly' },
  });
  const info = JSON.parse(out) as { Dir?: string; Error?: string };
  if (!info.Dir) throw new Error(`sigs.k8s.io/jobset ${jobSetRelease()} is not in the module cache: ${info.Error ?? out}`);
  return info.Dir;
}

type Webhook = NonNullable<V1MutatingWebhookConfiguration['webhooks']>[number];
type Configuration = { apiVersion: string; kind: string; metadata: { name: string }; webhooks: Webhook[] };

/**
 * The release's webhook configurations as its kustomization renders them
 * (manifests.yaml, then the JSON patches under patches/), renamed, each
 * entry pointed at `base` instead of the Service.
 */
export function releasedWebhooks(src: string, base: string, caPem: string, prefix: string): { mutating: V1MutatingWebhookConfiguration; validating: V1ValidatingWebhookConfiguration } {
  const dir = join(src, 'config/components/webhook');
  const docs = parseAllDocuments(readFileSync(join(dir, 'manifests.yaml'), 'utf8')).map((d) => d.toJS() as Configuration);
  const patchFor: Record<string, string> = { MutatingWebhookConfiguration: 'mutating-patch.yaml', ValidatingWebhookConfiguration: 'validating-patch.yaml' };
  const out: Partial<Record<'mutating' | 'validating', Configuration>> = {};
  for (const doc of docs) {
    const file = patchFor[doc.kind];
    if (!file) throw new Error(`unexpected ${doc.kind} in the release's webhook manifests`);
    const ops = parse(readFileSync(join(dir, 'patches', file), 'utf8')) as Operation[];
    const patched = applyPatch(doc, ops, true, false).newDocument;
    patched.metadata = { name: `${prefix}-${doc.kind === 'MutatingWebhookConfiguration' ? 'mutating' : 'validating'}` };
    for (const w of patched.webhooks) {
      const path = w.clientConfig.service?.path;
      if (!path) throw new Error(`webhook ${w.name} has no service path`);
      w.clientConfig = { url: `${base}${path}`, caBundle: Buffer.from(caPem).toString('base64') };
    }
    out[doc.kind === 'MutatingWebhookConfiguration' ? 'mutating' : 'validating'] = patched;
  }
  if (!out.mutating || !out.validating) throw new Error('the release has no mutating or no validating webhook configuration');
  return { mutating: loadYaml<V1MutatingWebhookConfiguration>(stringify(out.mutating)), validating: loadYaml<V1ValidatingWebhookConfiguration>(stringify(out.validating)) };
}

export interface JobSetControllerOptions {
  info: ClusterInfo;
  /** Names the webhook configurations and the log file. */
  name: string;
  log?: (msg: string) => void;
}

export class JobSetController {
  private constructor(
    readonly process: ManagedProcess,
    readonly release: string,
    readonly webhookPort: number,
    private readonly info: ClusterInfo,
    private readonly configNames: { mutating: string; validating: string },
    private readonly dir: string,
  ) {}

  /** Builds (or takes from the cache) the pinned manager, installs the CRD, starts it and registers its webhooks. */
  static async start(o: JobSetControllerOptions): Promise<JobSetController> {
    const log = o.log ?? (() => {});
    const bin = ensureGoProgram(JOBSET, log);
    const release = jobSetRelease();
    const src = jobSetSourceDir();
    const kc = kubeConfig(o.info);
    // loadYaml maps the manifest's field names (x-kubernetes-list-type, …) to the client's; a plain parse would lose them.
    await installCrd(kc.makeApiClient(ApiextensionsV1Api), loadYaml<V1CustomResourceDefinition>(readFileSync(join(src, 'config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml'), 'utf8')));

    const dir = mkdtempSync(join(o.info.logsDir, `jobset-${o.name}-`));
    const certDir = join(dir, 'certs');
    mkdirSync(certDir);
    const ca = { cert: readFileSync(join(o.info.certsDir, 'ca.crt'), 'utf8'), key: readFileSync(join(o.info.certsDir, 'ca.key'), 'utf8') };
    const serving = await generateServing(ca, { dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'], leafDays: 2 });
    writeFileSync(join(certDir, 'tls.crt'), serving.cert);
    writeFileSync(join(certDir, 'tls.key'), serving.key, { mode: 0o600 });

    const [webhookPort, healthPort] = await freePorts(2);
    const config = {
      apiVersion: 'config.jobset.x-k8s.io/v1alpha1',
      kind: 'Configuration',
      leaderElection: { leaderElect: false },
      internalCertManagement: { enable: false },
      webhook: { host: '127.0.0.1', port: webhookPort, certDir },
      metrics: { bindAddress: '0' },
      health: { healthProbeBindAddress: `127.0.0.1:${healthPort}` },
    };
    const configPath = join(dir, 'config.yaml');
    writeFileSync(configPath, stringify(config));
    const proc = startProcess(`jobset-${o.name}`, bin, ['--config', configPath, '--kubeconfig', o.info.kubeconfigPath, '--metrics-bind-address', '0', '--zap-log-level', 'info'], join(o.info.logsDir, `jobset-${o.name}.log`));
    const names = { mutating: `${o.name}-mutating`, validating: `${o.name}-validating` };
    const controller = new JobSetController(proc, release, webhookPort!, o.info, names, dir);
    try {
      await waitFor(`the JobSet manager ready on ${healthPort}`, async () => ((await fetch(`http://127.0.0.1:${healthPort}/readyz`, { signal: AbortSignal.timeout(1000) })).ok ? true : undefined), {
        timeoutMs: 60_000,
        abortIf: () => (proc.exit ? `it exited:\n${proc.logTail()}` : undefined),
      });
      const hooks = releasedWebhooks(src, `https://127.0.0.1:${webhookPort}`, ca.cert, o.name);
      const admission = kc.makeApiClient(AdmissionregistrationV1Api);
      await admission.createMutatingWebhookConfiguration({ body: hooks.mutating });
      await admission.createValidatingWebhookConfiguration({ body: hooks.validating });
      // The API server picks configurations up from its informer: wait until a JobSet is defaulted by the webhook.
      await controller.waitForWebhooks();
      log(`JobSet ${release} manager on 127.0.0.1:${webhookPort} (pid ${proc.pid})`);
      return controller;
    } catch (err) {
      await controller.stop();
      throw err;
    }
  }

  /**
   * The API server picks webhook configurations up from its informer: polls
   * dry-run creates until a JobSet comes back defaulted by the mutating
   * webhook (spec.network, which the CRD does not default) and one whose
   * child Job names would pass 63 characters is refused by the validating one.
   */
  private async waitForWebhooks(): Promise<void> {
    const objects = kubeConfig(this.info).makeApiClient(CustomObjectsApi);
    const probe = (name: string) => ({
      apiVersion: `${JOBSET_GROUP}/${JOBSET_VERSION}`,
      kind: 'JobSet',
      metadata: { name },
      spec: { replicatedJobs: [{ name: 'r', replicas: 1, template: { spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'busybox:1.36' }] } } } } }] },
    });
    const dryRun = (body: unknown) => objects.createNamespacedCustomObject({ group: JOBSET_GROUP, version: JOBSET_VERSION, namespace: 'default', plural: 'jobsets', body, dryRun: 'All' }) as Promise<JobSetObject>;
    await waitFor(
      'the JobSet webhooks at the API server',
      async () => {
        const defaulted = await dryRun(probe('webhook-probe'));
        if ((defaulted.spec.network as { enableDNSHostnames?: boolean } | undefined)?.enableDNSHostnames !== true) return undefined;
        try {
          await dryRun(probe('x'.repeat(60)));
          return undefined;
        } catch (err) {
          const text = String((err as { body?: unknown }).body ?? err);
          return text.includes('vjobset.kb.io') && text.includes('denied the request') ? true : undefined;
        }
      },
      { timeoutMs: 30_000, intervalMs: 250, abortIf: () => (this.process.exit ? `the manager exited:\n${this.process.logTail()}` : undefined) },
    );
  }

  /** What the manager logged so far. */
  log(): string {
    return readFileSync(this.process.logPath, 'utf8');
  }

  /** Webhook configurations first (they fail closed), then the manager, then the CRD (and with it every JobSet left). */
  async stop(): Promise<void> {
    const kc = kubeConfig(this.info);
    const admission = kc.makeApiClient(AdmissionregistrationV1Api);
    await admission.deleteMutatingWebhookConfiguration({ name: this.configNames.mutating }).catch(() => undefined);
    await admission.deleteValidatingWebhookConfiguration({ name: this.configNames.validating }).catch(() => undefined);
    await this.process.stop();
    await kc.makeApiClient(ApiextensionsV1Api).deleteCustomResourceDefinition({ name: JOBSET_CRD }).catch(() => undefined);
    rmSync(join(this.dir, 'certs'), { recursive: true, force: true });
  }
}

function kubeConfig(info: ClusterInfo): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromFile(info.kubeconfigPath);
  return kc;
}

async function installCrd(api: ApiextensionsV1Api, crd: V1CustomResourceDefinition): Promise<void> {
  const name = crd.metadata!.name!;
  try {
    await api.createCustomResourceDefinition({ body: crd });
  } catch (err) {
    if ((err as { code?: number }).code !== 409) throw err;
    // Left by an earlier run (or being deleted): replace it with the release's.
    const existing = await api.readCustomResourceDefinition({ name });
    if (existing.metadata?.deletionTimestamp) {
      await waitFor(`${name} deleted`, async () => api.readCustomResourceDefinition({ name }).then(() => undefined, () => true), { timeoutMs: 60_000 });
      await api.createCustomResourceDefinition({ body: crd });
    } else {
      await api.replaceCustomResourceDefinition({ name, body: { ...crd, metadata: { ...crd.metadata, resourceVersion: existing.metadata?.resourceVersion } } });
    }
  }
  await waitFor(
    `${name} established`,
    async () => {
      const got = await api.readCustomResourceDefinition({ name });
      return got.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True') ? true : undefined;
    },
    { timeoutMs: 30_000 },
  );
}

export type JobSetObject = KubernetesObject & { spec: Record<string, unknown>; status?: { conditions?: Array<{ type: string; status: string; lastTransitionTime?: string; reason?: string; message?: string }>; replicatedJobsStatus?: unknown[] } };
