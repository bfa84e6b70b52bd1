/**
 * `jobharvest status`, the edge: the kubeconfig, the Jobs in pages, and the
 * signing key. Jobs are listed `limit` at a time with the continue token, as
 * kubectl lists, and each page is made rows before the next is asked for:
 * thousands of Jobs cost their rows, not their objects. No pod is read: the
 * Job's annotations hold everything the status prints.
 */
import { ERROR_CODES, JobharvestError } from '../../core/errors.ts';
import { keyFromText, type SigningKey } from '../../contract/signature.ts';
import { SIGNING_KEY_FIELD } from '../../k8s/signing-secret.ts';
import { chooseRelease, releasesOf, type WebhookConfigurationLike } from '../logs/release.ts';
import type { JobLike } from './rows.ts';
import type { StatusOptions } from './options.ts';

export interface JobPage {
  items: JobLike[];
  continue: string | undefined;
  resourceVersion: string | undefined;
}

export type WatchEvent = { type: 'ADDED' | 'MODIFIED' | 'DELETED'; job: JobLike } | { type: 'BOOKMARK'; resourceVersion: string | undefined };

/** The calls the status makes; readCluster makes them on a real API server, tests fake them. */
export interface StatusApi {
  /** The namespace of the kubeconfig's context, else `default`. */
  readonly namespace: string;
  /** One page of Jobs: of a namespace, or of all when namespace is undefined. */
  listJobs(o: { namespace: string | undefined; selector: string | undefined; fieldSelector?: string; limit: number; continue: string | undefined }): Promise<JobPage>;
  /** undefined: not found. */
  readJob(namespace: string, name: string): Promise<JobLike | undefined>;
  /** The CronJob's uid; undefined when it cannot be read (gone, forbidden): its runs are then matched by name. */
  cronJobUid(namespace: string, name: string): Promise<string | undefined>;
  /** The release's signing keys, or why there are none to check with. */
  signingKeys(): Promise<{ keys: SigningKey[] | undefined; note: string }>;
  /** Watches Jobs from a resourceVersion until the server ends the watch; resolves then, rejects on an error (410: that version is gone). */
  watchJobs(o: { namespace: string | undefined; selector: string | undefined; fieldSelector?: string; resourceVersion: string | undefined }, on: (e: WatchEvent) => void, signal: AbortSignal): Promise<void>;
}

function why(e: unknown): string {
  const code = (e as { code?: number }).code;
  return code === 404 ? 'not found' : code === 403 ? 'forbidden' : code ? `HTTP ${code}` : ((e as NodeJS.ErrnoException).code ?? (e as Error).message ?? 'unreachable');
}

/**
 * The release is found as `jobharvest logs` finds it: through the
 * MutatingWebhookConfiguration that names its Service (cluster-scoped, only
 * an administrator writes it). Its signing key is the Secret
 * `<release>-signing` in that namespace (the chart's name for it; the
 * Service has the release's full name), or the one --signing-secret names.
 * Any read that fails leaves the records unverified, with the reason.
 */
export async function readSigningKeys(
  list: () => Promise<{ items: WebhookConfigurationLike[] }>,
  readSecret: (name: string, namespace: string) => Promise<{ data?: Record<string, string> }>,
  o: Partial<Pick<StatusOptions, 'chartNamespace' | 'release' | 'signingSecret'>>,
): Promise<{ keys: SigningKey[] | undefined; note: string }> {
  let items: WebhookConfigurationLike[];
  try {
    items = (await list()).items;
  } catch (e) {
    return { keys: undefined, note: `MutatingWebhookConfigurations: ${why(e)}, so no release and no signing key` };
  }
  let release;
  try {
    release = chooseRelease(releasesOf(items), { namespace: o.chartNamespace, release: o.release });
  } catch (e) {
    if (e instanceof JobharvestError) return { keys: undefined, note: e.message };
    throw e;
  }
  if (!release) return { keys: undefined, note: 'no jobharvest release installed (no webhook configuration names its Service)' };
  const name = o.signingSecret ?? `${release.service}-signing`;
  const at = `Secret ${release.namespace}/${name}`;
  let secret;
  try {
    secret = await readSecret(name, release.namespace);
  } catch (e) {
    return { keys: undefined, note: `${at}: ${why(e)}` };
  }
  const b64 = secret.data?.[SIGNING_KEY_FIELD];
  if (!b64) return { keys: undefined, note: `${at} has no "${SIGNING_KEY_FIELD}"` };
  try {
    return { keys: [keyFromText(Buffer.from(b64, 'base64'))], note: at };
  } catch (e) {
    return { keys: undefined, note: `${at}: ${(e as Error).message}` };
  }
}

/** The StatusApi of the user's kubeconfig. */
export async function connect(o: Pick<StatusOptions, 'kubeconfig' | 'context' | 'chartNamespace' | 'release' | 'signingSecret'>): Promise<StatusApi> {
  const k8s = await import('@kubernetes/client-node');
  const kc = new k8s.KubeConfig();
  try {
    if (o.kubeconfig) kc.loadFromFile(o.kubeconfig);
    else kc.loadFromDefault();
    if (o.context) kc.setCurrentContext(o.context);
  } catch (e) {
    throw new JobharvestError(ERROR_CODES.BAD_INPUT, `${o.kubeconfig ? `--kubeconfig ${o.kubeconfig}` : 'kubeconfig'}: ${(e as Error).message}`);
  }
  if (!kc.getCurrentCluster()) throw new JobharvestError(ERROR_CODES.BAD_INPUT, 'no cluster in the kubeconfig');
  const batch = kc.makeApiClient(k8s.BatchV1Api);
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const admission = kc.makeApiClient(k8s.AdmissionregistrationV1Api);
  const page = (r: { items: unknown[]; metadata?: { _continue?: string; resourceVersion?: string } }): JobPage => ({
    items: r.items as JobLike[],
    continue: r.metadata?._continue || undefined,
    resourceVersion: r.metadata?.resourceVersion,
  });
  return {
    namespace: kc.getContextObject(kc.getCurrentContext())?.namespace ?? 'default',
    async listJobs({ namespace, selector, fieldSelector, limit, continue: cont }) {
      const q = { limit, ...(selector ? { labelSelector: selector } : {}), ...(fieldSelector ? { fieldSelector } : {}), ...(cont ? { _continue: cont } : {}) };
      return page(namespace === undefined ? await batch.listJobForAllNamespaces(q) : await batch.listNamespacedJob({ namespace, ...q }));
    },
    async readJob(namespace, name) {
      try {
        return (await batch.readNamespacedJob({ namespace, name })) as JobLike;
      } catch (e) {
        if ((e as { code?: number }).code === 404) return undefined;
        throw e;
      }
    },
    async cronJobUid(namespace, name) {
      try {
        return (await batch.readNamespacedCronJob({ namespace, name })).metadata?.uid;
      } catch {
        return undefined;
      }
    },
    signingKeys: () =>
      readSigningKeys(
        () => admission.listMutatingWebhookConfiguration() as Promise<{ items: WebhookConfigurationLike[] }>,
        (name, namespace) => core.readNamespacedSecret({ name, namespace }),
        o,
      ),
    async watchJobs({ namespace, selector, fieldSelector, resourceVersion }, on, signal) {
      const path = namespace === undefined ? '/apis/batch/v1/jobs' : `/apis/batch/v1/namespaces/${encodeURIComponent(namespace)}/jobs`;
      const query = { allowWatchBookmarks: true, ...(selector ? { labelSelector: selector } : {}), ...(fieldSelector ? { fieldSelector } : {}), ...(resourceVersion ? { resourceVersion } : {}) };
      await new Promise<void>((resolve, reject) => {
        let req: { abort(): void } | undefined;
        const stop = () => req?.abort();
        signal.addEventListener('abort', stop, { once: true });
        new k8s.Watch(kc)
          .watch(
            path,
            query,
            (type: string, obj: JobLike & { metadata?: { resourceVersion?: string } }) => {
              if (type === 'BOOKMARK') on({ type, resourceVersion: obj.metadata?.resourceVersion });
              else if (type === 'ADDED' || type === 'MODIFIED' || type === 'DELETED') on({ type, job: obj });
              else if (type === 'ERROR') reject(Object.assign(new Error((obj as { message?: string }).message ?? 'watch error'), { code: (obj as { code?: number }).code }));
            },
            (err) => {
              signal.removeEventListener('abort', stop);
              if (err && !signal.aborted) reject(err as Error);
              else resolve();
            },
          )
          .then((r) => {
            req = r;
            if (signal.aborted) r.abort();
          }, reject);
      });
    },
  };
}
