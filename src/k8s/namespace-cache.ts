import { CoreV1Api, makeInformer, type KubeConfig, type V1Namespace } from '@kubernetes/client-node';
import type { NamespaceMeta } from '../core/kube.ts';
import { statusOf } from './errors.ts';
import type { Log } from '../contract/log.ts';
import { changedAt, type CachedNamespace, type LiveRead, type LiveSource } from './namespace-live.ts';

export interface NamespaceCacheOptions {
  /** Longest an admission waits on a cache miss before deciding on what is known. */
  lookupTimeoutMs?: number;
  /** Delay before re-listing after the watch fails. */
  restartDelayMs?: number;
  log?: Log;
  /** Registered before the first list, so they see every existing namespace too. */
  listeners?: Array<(ns: NamespaceMeta, deleted: boolean) => void>;
}

export interface NamespaceCache extends LiveSource {
  get(name: string): Promise<NamespaceMeta | undefined>;
  /** True once the first list has completed. */
  synced(): boolean;
  onChange(cb: (ns: NamespaceMeta, deleted: boolean) => void): void;
  stop(): Promise<void>;
}

export function toMeta(ns: V1Namespace): NamespaceMeta {
  return {
    name: ns.metadata?.name ?? '',
    labels: { ...(ns.metadata?.labels ?? {}) },
    annotations: { ...(ns.metadata?.annotations ?? {}) },
    ...(ns.metadata?.deletionTimestamp !== undefined || ns.status?.phase === 'Terminating' ? { terminating: true } : {}),
  };
}

/**
 * An informer-backed view of namespace labels and annotations. A namespace
 * annotated after start-up is seen as soon as the watch delivers it; a watch
 * failure re-lists after a short delay. On a miss (a brand-new namespace, or
 * before the first sync) get() asks the API server directly, but never for
 * longer than lookupTimeoutMs: admission latency matters more than a perfect
 * answer. Admission itself goes through namespaceLookup (namespace-live.ts),
 * which uses peek() and readLive() to also check a recent "not opted in".
 */
export async function startNamespaceCache(kc: KubeConfig, opts: NamespaceCacheOptions = {}): Promise<NamespaceCache> {
  const api = kc.makeApiClient(CoreV1Api);
  const timeout = opts.lookupTimeoutMs ?? 2000;
  const restartDelay = opts.restartDelayMs ?? 1000;
  const log = opts.log ?? (() => {});
  const informer = makeInformer<V1Namespace>(kc, '/api/v1/namespaces', () => api.listNamespace());
  const listeners: Array<(ns: NamespaceMeta, deleted: boolean) => void> = [...(opts.listeners ?? [])];
  let isSynced = false;
  let listedOnce = false;
  let stopped = false;
  // Local time the cache last saw each namespace appear or change, after the
  // first list (which only tells what already was).
  const seenChangingAt = new Map<string, number>();

  const emit = (ns: V1Namespace, deleted: boolean) => {
    const meta = toMeta(ns);
    if (deleted) seenChangingAt.delete(meta.name);
    else if (listedOnce) seenChangingAt.set(meta.name, Date.now());
    for (const l of listeners) l(meta, deleted);
  };
  informer.on('add', (ns) => emit(ns, false));
  informer.on('update', (ns) => emit(ns, false));
  informer.on('delete', (ns) => emit(ns, true));
  informer.on('error', (err) => {
    isSynced = false;
    if (stopped) return;
    log('warn', 'namespace watch failed; re-listing', { error: String((err as Error)?.message ?? err) });
    setTimeout(() => {
      if (!stopped) informer.start().then(() => (isSynced = true), () => {});
    }, restartDelay).unref();
  });
  try {
    await informer.start();
    isSynced = true;
  } catch (err) {
    log('warn', 'namespace list failed; will retry', { error: String((err as Error)?.message ?? err) });
    informer.on('connect', () => (isSynced = true));
  }
  listedOnce = true;

  async function direct(name: string): Promise<NamespaceMeta | undefined> {
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), timeout);
    });
    try {
      const got = api.readNamespace({ name }).then(toMeta, (err: unknown) => {
        log('warn', 'namespace lookup failed', { namespace: name, error: String((err as Error)?.message ?? err) });
        return undefined;
      });
      return await Promise.race([got, deadline]);
    } finally {
      clearTimeout(timer);
    }
  }

  return {
    async get(name) {
      const hit = informer.get(name);
      if (hit) return toMeta(hit);
      return direct(name);
    },
    peek(name): CachedNamespace | undefined {
      const hit = informer.get(name);
      return hit ? { meta: toMeta(hit), changedAt: changedAt(hit.metadata?.creationTimestamp, seenChangingAt.get(name)) } : undefined;
    },
    async readLive(name): Promise<LiveRead> {
      try {
        return { kind: 'found', meta: toMeta(await api.readNamespace({ name })) };
      } catch (err) {
        return statusOf(err) === 404 ? { kind: 'not-found' } : { kind: 'error', error: String((err as Error)?.message ?? err) };
      }
    },
    synced: () => isSynced,
    onChange(cb) {
      listeners.push(cb);
    },
    async stop() {
      stopped = true;
      await informer.stop();
    },
  };
}
