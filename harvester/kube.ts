// The harvester's Kubernetes edge: the calls reconcile makes, the watch that
// feeds the queue, and the API address and credentials the engine's pods/log
// reader uses. The watch keeps no objects: a Job becomes a key in the queue,
// and reconcile reads it fresh, so memory does not grow with the Jobs in the
// cluster, and only Jobs the webhook labelled at admission are listed at all.
import { BatchV1Api, CoreV1Api, PatchStrategy, setHeaderOptions, Watch, type KubeConfig, type V1Job } from '@kubernetes/client-node';
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

/**
 * List, then watch from the list's resourceVersion; on any end or error,
 * list again after a pause. Every finished Job seen becomes a key.
 */
export function watchJobs(kc: KubeConfig, opts: { log: Log; onJob: (job: V1Job) => void; signal: AbortSignal; retryMs?: number }): JobWatch {
  const batch = kc.makeApiClient(BatchV1Api);
  const watch = new Watch(kc);
  const retryMs = opts.retryMs ?? 2000;
  let req: { abort(): void } | undefined;
  let timer: NodeJS.Timeout | undefined;
  const again = (): void => {
    if (opts.signal.aborted) return;
    timer = setTimeout(() => void cycle(), retryMs);
  };
  const cycle = async (): Promise<void> => {
    if (opts.signal.aborted) return;
    try {
      const list = await batch.listJobForAllNamespaces({ labelSelector: JOB_SELECTOR });
      for (const j of list.items) opts.onJob(j);
      if (opts.signal.aborted) return;
      req = await watch.watch(
        '/apis/batch/v1/jobs',
        { labelSelector: JOB_SELECTOR, resourceVersion: list.metadata?.resourceVersion, allowWatchBookmarks: true },
        (type, obj: V1Job) => {
          if (type === 'ADDED' || type === 'MODIFIED') opts.onJob(obj);
        },
        (err) => {
          if (err && !opts.signal.aborted) opts.log('warn', 'job watch ended; listing again', { error: (err as Error).message });
          again();
        },
      );
    } catch (err) {
      opts.log('warn', 'job list failed; retrying', { error: (err as Error).message });
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
