import { parse as parseYaml } from 'yaml';
import { parseConfig, type Config } from '../../core/config.ts';
import { DELIVERY_ANNOTATION } from '../../contract/harvest.ts';
import { ERROR_CODES, JobharvestError } from '../../core/errors.ts';
import type { LogsOptions } from './options.ts';
import { chooseRelease, ownershipProblem, releasesOf, type ConfigMapLike, type WebhookConfigurationLike } from './release.ts';

/** What the cluster told the command. Every part may be missing: each read may fail on its own. */
export interface ClusterView {
  namespace: string;
  job?: { annotations: Record<string, string>; template: Record<string, string>; uid?: string; containers: string[]; createdMs?: number };
  jobFound: 'exists' | 'gone' | 'unreadable';
  namespaceAnnotations?: Record<string, string>;
  /** Read with the annotations: a tenant mapping may select the namespace by label. */
  namespaceLabels?: Record<string, string>;
  namespaceNote: string;
  config?: Config;
  configNote: string;
  /** Reads a Secret of the Job's namespace with the user's kubeconfig; undefined when it cannot. */
  secret: (name: string) => Promise<Record<string, string> | undefined>;
  /** Where the Job is now, for --follow; absent when there is no cluster to ask. */
  jobState?: () => Promise<JobState>;
  /** For cronjob/NAME: the Jobs the CronJob controls that still exist; undefined when they could not be listed. */
  cronJobRuns?: Array<{ job: string; createdMs?: number }>;
}

/**
 * A Job as --follow sees it: `running`; `finished` (Complete or Failed) with
 * no delivery record yet; `delivered`, the delivery report annotation written
 * once its pods are done; `gone` (deleted, or replaced by another Job of the
 * same name); `unknown` when it cannot be read.
 */
export type JobState = 'running' | 'finished' | 'delivered' | 'gone' | 'unknown';

export function jobStateOf(job: { metadata?: { uid?: string; annotations?: Record<string, string> }; status?: { conditions?: Array<{ type: string; status: string }> } }, uid: string | undefined): JobState {
  if (uid !== undefined && job.metadata?.uid !== uid) return 'gone';
  if (job.metadata?.annotations?.[DELIVERY_ANNOTATION] !== undefined) return 'delivered';
  const finished = job.status?.conditions?.some((c) => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True');
  return finished ? 'finished' : 'running';
}

function why(e: unknown): string {
  const code = (e as { code?: number }).code;
  return code === 404 ? 'not found' : code === 403 ? 'forbidden' : code ? `HTTP ${code}` : ((e as NodeJS.ErrnoException).code ?? 'unreachable');
}

/**
 * The chart's configuration, found through the release's webhook
 * configuration (see release.ts). Unreadable parts only remove the chart's
 * level; more than one release to choose from is refused (JH_BAD_INPUT).
 */
export async function readChartConfig(
  list: () => Promise<{ items: WebhookConfigurationLike[] }>,
  read: (name: string, namespace: string) => Promise<ConfigMapLike>,
  o: Pick<LogsOptions, 'chartNamespace' | 'release'>,
): Promise<{ config?: Config; note: string }> {
  let items: WebhookConfigurationLike[];
  try {
    items = (await list()).items;
  } catch (e) {
    return { note: `MutatingWebhookConfigurations: ${why(e)}, so no release's configuration is used` };
  }
  const release = chooseRelease(releasesOf(items), { namespace: o.chartNamespace, release: o.release });
  if (!release) {
    const where = [o.chartNamespace !== undefined ? `in namespace ${o.chartNamespace}` : '', o.release !== undefined ? `named ${o.release}` : ''].filter(Boolean).join(' ');
    return { note: `no jobharvest release installed${where ? ` ${where}` : ''} (no webhook configuration names its Service)` };
  }
  const at = `ConfigMap ${release.namespace}/${release.service}`;
  let cm: ConfigMapLike;
  try {
    cm = await read(release.service, release.namespace);
  } catch (e) {
    return { note: `${at}: ${why(e)}` };
  }
  const problem = ownershipProblem(cm, release);
  if (problem) return { note: `${at} ignored: ${problem}` };
  const text = cm.data?.['config.yaml'];
  if (text === undefined) return { note: `${at} ignored: no config.yaml` };
  try {
    return { config: parseConfig(parseYaml(text) ?? {}), note: at };
  } catch (e) {
    return { note: `${at} ignored: ${(e as Error).message}` };
  }
}

/**
 * Reads what the cluster knows: the Job, its namespace and the installed
 * chart's ConfigMap. Every read may fail (gone, forbidden, no cluster at all);
 * each failure only removes one level of configuration. Secrets are read
 * later, and only those the resolution allows.
 */
export async function readCluster(o: Pick<LogsOptions, 'kubeconfig' | 'context' | 'namespace' | 'job' | 'chartNamespace' | 'release'> & { cronJob?: boolean }): Promise<ClusterView> {
  const k8s = await import('@kubernetes/client-node');
  const kc = new k8s.KubeConfig();
  try {
    if (o.kubeconfig) kc.loadFromFile(o.kubeconfig);
    else kc.loadFromDefault();
    if (o.context) kc.setCurrentContext(o.context);
  } catch (e) {
    if (o.kubeconfig) throw new JobharvestError(ERROR_CODES.BAD_INPUT, `--kubeconfig ${o.kubeconfig}: ${(e as Error).message}`);
  }
  const ctxNs = kc.getContextObject(kc.getCurrentContext())?.namespace;
  const ns = o.namespace ?? ctxNs ?? 'default';
  const view: ClusterView = { namespace: ns, jobFound: 'unreadable', namespaceNote: '', configNote: '', secret: async () => undefined };
  if (!kc.getCurrentCluster()) {
    view.namespaceNote = view.configNote = 'no cluster in the kubeconfig';
    return view;
  }
  const batch = kc.makeApiClient(k8s.BatchV1Api);
  const core = kc.makeApiClient(k8s.CoreV1Api);
  if (o.cronJob) {
    // Its runs that still exist; the newest one's annotations say where the logs went, as a Job's do.
    try {
      const jobs = await batch.listNamespacedJob({ namespace: ns });
      view.cronJobRuns = jobs.items
        .filter((j) => j.metadata?.ownerReferences?.some((r) => r.controller === true && r.kind === 'CronJob' && r.apiVersion.startsWith('batch/') && r.name === o.job))
        .map((j) => ({ job: j.metadata!.name!, ...(j.metadata?.creationTimestamp ? { createdMs: new Date(j.metadata.creationTimestamp).getTime() } : {}) }))
        .sort((a, b) => (b.createdMs ?? 0) - (a.createdMs ?? 0));
    } catch {
      // The log server may still list them.
    }
    o = { ...o, job: view.cronJobRuns?.[0]?.job ?? o.job };
  }
  const admission = kc.makeApiClient(k8s.AdmissionregistrationV1Api);
  // A read that fails only removes its level; an ambiguous release is refused (readChartConfig throws).
  const [[jobR, nsR], chart] = await Promise.all([
    Promise.allSettled([batch.readNamespacedJob({ name: o.job, namespace: ns }), core.readNamespace({ name: ns })] as const),
    readChartConfig(
      () => admission.listMutatingWebhookConfiguration() as Promise<{ items: WebhookConfigurationLike[] }>,
      (name, namespace) => core.readNamespacedConfigMap({ name, namespace }),
      o,
    ),
  ]);
  if (jobR.status === 'fulfilled') {
    const j = jobR.value;
    const uid = j.metadata?.uid;
    view.jobState = async () => {
      try {
        return jobStateOf(await batch.readNamespacedJob({ name: o.job, namespace: ns }), uid);
      } catch (e) {
        return (e as { code?: number }).code === 404 ? 'gone' : 'unknown';
      }
    };
    view.jobFound = 'exists';
    view.job = {
      annotations: j.metadata?.annotations ?? {},
      template: j.spec?.template.metadata?.annotations ?? {},
      uid: j.metadata?.uid,
      containers: (j.spec?.template.spec?.containers ?? []).map((c) => c.name),
      ...(j.metadata?.creationTimestamp ? { createdMs: new Date(j.metadata.creationTimestamp).getTime() } : {}),
    };
  } else {
    view.jobFound = (jobR.reason as { code?: number }).code === 404 ? 'gone' : 'unreadable';
  }
  if (nsR.status === 'fulfilled') {
    view.namespaceAnnotations = nsR.value.metadata?.annotations ?? {};
    view.namespaceLabels = nsR.value.metadata?.labels ?? {};
  } else view.namespaceNote = `namespace ${ns}: ${why(nsR.reason)}`;
  if (chart.config) view.config = chart.config;
  view.configNote = chart.note;
  view.secret = async (name) => {
    try {
      const s = await core.readNamespacedSecret({ name, namespace: ns });
      return Object.fromEntries(Object.entries(s.data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')]));
    } catch {
      return undefined;
    }
  };
  return view;
}
