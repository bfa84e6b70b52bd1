// The harvester's Kubernetes edge: the calls reconcile makes, the watch that
// feeds the queue, and the API address and credentials the engine's pods/log
// reader uses. The Job watch keeps no objects: a Job becomes a key in the queue,
// and reconcile reads it fresh, so memory does not grow with the Jobs in the
// cluster, and only Jobs the webhook labelled at admission are listed at all.
import { BatchV1Api, CoreV1Api, PatchStrategy, setHeaderOptions, Watch, type KubeConfig, type V1Job, type V1Pod } from '@kubernetes/client-node';
import { INJECTED_LABEL } from '../src/contract/harvest.ts';
import type { HarvestApi, WriteResult } from './reconcile.ts';
import type { KubeAccess } from './ship.ts';
import type { Log } from './log.ts';

export const CONTROLLER_UID_LABEL = 'batch.kubernetes.io/controller-uid';
export const JOB_SELECTOR = `${INJECTED_LABEL}=true`;

export function statusOf(err: unknown): number | undefined {
  const e = err as { code?: unknown; statusCode?: unknown; response?: { statusCode?: unknown } } | undefined;
  const c = e?.code ?? e?.statusCode ?? e?.response?.statusCode;
  return typeof c === 'number' ? c : undefined;
}

export function harvestApi(kc: KubeConfig): HarvestApi {
  const batch = kc.makeApiClient(BatchV1Api);
  const core = kc.makeApiClient(CoreV1Api);
  const write = async (f: () => Promise<unknown>): Promise<WriteResult> => {
    try {
      await f();
      return 'ok';
    } catch (err) {
      const code = statusOf(err);
      if (code === 404) return 'gone';
      if (code === 409) return 'conflict';
      throw err;
    }
  };
  return {
    async readJob(namespace, name) {
      try {
        return await batch.readNamespacedJob({ name, namespace });
      } catch (err) {
        if (statusOf(err) === 404) return undefined;
        throw err;
      }
    },
    async listPods(namespace, jobUid) {
      return (await core.listNamespacedPod({ namespace, labelSelector: `${CONTROLLER_UID_LABEL}=${jobUid}` })).items;
    },
    patchJob: (namespace, name, body) => write(() => batch.patchNamespacedJob({ name, namespace, body }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch))),
    async createEvent(namespace, body) {
      await core.createNamespacedEvent({ namespace, body });
    },
    async listNodeNotReadyEvents(namespace) {
      return (await core.listNamespacedEvent({ namespace, fieldSelector: 'involvedObject.kind=Pod,reason=NodeNotReady', limit: 500 })).items;
    },
  };
}

/** The API server's address and this process's bearer token and CA, re-read on each call as client-node does. */
export function kubeAccess(kc: KubeConfig): KubeAccess {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error('no current cluster in the kubeconfig');
  return {
    apiUrl: new URL(cluster.server),
    credentials: async () => {
      const opts: { headers?: Record<string, string>; ca?: string | Buffer } = {};
      await kc.applyToHTTPSOptions(opts as never);
      const auth = opts.headers?.Authorization ?? opts.headers?.authorization;
      const token = auth?.replace(/^Bearer\s+/i, '');
      if (!token) throw new Error('the harvester needs a bearer token (its service account, or a token kubeconfig)');
      const ca = opts.ca ? Buffer.from(opts.ca) : undefined;
      return ca ? { token, ca } : { token };
    },
  };
}

export interface JobWatch {
  stop(): void;
}

interface Listed<T> {
  items: T[];
  metadata?: { resourceVersion?: string };
}

/**
 * List, then watch from the list's resourceVersion; on any end or error,
 * list again after a pause. Every object seen goes to `onObject`; none is kept.
 */
function listWatch<T>(kc: KubeConfig, what: string, o: { list: () => Promise<Listed<T>>; path: string; query: Record<string, string>; onObject: (type: string, obj: T) => void; log: Log; signal: AbortSignal; retryMs?: number }): JobWatch {
  const watch = new Watch(kc);
  const retryMs = o.retryMs ?? 2000;
  let req: { abort(): void } | undefined;
  let timer: NodeJS.Timeout | undefined;
  const again = (): void => {
    if (o.signal.aborted) return;
    timer = setTimeout(() => void cycle(), retryMs);
  };
  const cycle = async (): Promise<void> => {
    if (o.signal.aborted) return;
    try {
      const list = await o.list();
      for (const x of list.items) o.onObject('ADDED', x);
      if (o.signal.aborted) return;
      req = await watch.watch(
        o.path,
        { ...o.query, resourceVersion: list.metadata?.resourceVersion, allowWatchBookmarks: true },
        (type, obj: T) => {
          if (type === 'ADDED' || type === 'MODIFIED' || type === 'DELETED') o.onObject(type, obj);
        },
        (err) => {
          if (err && !o.signal.aborted) o.log('warn', `${what} watch ended; listing again`, { error: (err as Error).message });
          again();
        },
      );
    } catch (err) {
      o.log('warn', `${what} list failed; retrying`, { error: (err as Error).message });
      again();
    }
  };
  void cycle();
  return {
    stop() {
      if (timer) clearTimeout(timer);
      req?.abort();
    },
  };
}

/** Every injected Job, added or changed, becomes a call of `onJob`; the watch keeps no objects. */
export function watchJobs(kc: KubeConfig, opts: { log: Log; onJob: (job: V1Job) => void; signal: AbortSignal; retryMs?: number }): JobWatch {
  const batch = kc.makeApiClient(BatchV1Api);
  return listWatch<V1Job>(kc, 'job', {
    list: () => batch.listJobForAllNamespaces({ labelSelector: JOB_SELECTOR }),
    path: '/apis/batch/v1/jobs',
    query: { labelSelector: JOB_SELECTOR },
    onObject: (type, job) => {
      if (type !== 'DELETED') opts.onJob(job);
    },
    log: opts.log,
    signal: opts.signal,
    ...(opts.retryMs !== undefined ? { retryMs: opts.retryMs } : {}),
  });
}

/**
 * The Job pods of one namespace (every pod the Job controller made carries
 * the controller-uid label; the label is only a filter), through the log
 * reader the webhook binds to the harvester in each opted-in namespace.
 */
export function watchJobPods(kc: KubeConfig, namespace: string, opts: { log: Log; onPod: (pod: V1Pod) => void; signal: AbortSignal; retryMs?: number }): JobWatch {
  const core = kc.makeApiClient(CoreV1Api);
  return listWatch<V1Pod>(kc, `pod (${namespace})`, {
    list: () => core.listNamespacedPod({ namespace, labelSelector: CONTROLLER_UID_LABEL }),
    path: `/api/v1/namespaces/${encodeURIComponent(namespace)}/pods`,
    query: { labelSelector: CONTROLLER_UID_LABEL },
    onObject: (_type, pod) => opts.onPod(pod),
    log: opts.log,
    signal: opts.signal,
    ...(opts.retryMs !== undefined ? { retryMs: opts.retryMs } : {}),
  });
}
