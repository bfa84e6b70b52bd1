// The harvester's Kubernetes edge: the calls reconcile makes, the watch that
// feeds the queue, and the API address and credentials the engine's pods/log
// reader uses. The Job watch keeps no objects: a Job becomes a key in the queue,
// and reconcile reads it fresh, so memory does not grow with the Jobs in the
// cluster, and only Jobs the webhook labelled at admission are listed at all.
import { BatchV1Api, CoreV1Api, PatchStrategy, setHeaderOptions, Watch, type KubeConfig, type V1Job, type V1Namespace, type V1Pod } from '@kubernetes/client-node';
import { createHash } from 'node:crypto';
import { INJECTED_LABEL } from '../src/contract/harvest.ts';
import type { HarvestApi, WriteResult } from './reconcile.ts';
import type { KubeAccess } from './ship.ts';
import { REFUSED_GRACE_MS, statusOf } from './api-errors.ts';
import type { Log, LogLevel } from './log.ts';
import type { Resource, WatchStats } from './metrics.ts';
import { untilAborted, type Runnable } from './runnable.ts';

export { REFUSED_GRACE_MS, statusOf };

/**
 * client-node 2.0 builds a new undici Agent for every request it sends: a new
 * TLS connection, the CA parsed again, the idle socket left to time out. A
 * process opening and closing a pod watch per namespace kept growing that way
 * (three rounds of 200 namespaced list+watch pairs, opened then closed, against
 * the test API server: resident memory 191 → 280 → 326 → 357 MiB; with one
 * Agent: 167 → 197 → 222 → 223 MiB). This gives the KubeConfig one Agent per TLS
 * setting (a rotated client certificate gets a new one; the last few are
 * kept), so connections are kept alive and reused by every call.
 */
export function sharedConnections(kc: KubeConfig, keep = 4): KubeConfig {
  // A private method of client-node's KubeConfig (2.0.x): the dispatcher of each request.
  const k = kc as unknown as { createDispatcher?: (cluster: unknown, opts: Record<string, unknown>) => { close?: () => Promise<void> } | undefined };
  const original = k.createDispatcher;
  if (typeof original !== 'function') return kc;
  const agents = new Map<string, { close?: () => Promise<void> } | undefined>();
  k.createDispatcher = (cluster, opts) => {
    const c = (cluster ?? {}) as { name?: string; server?: string; proxyUrl?: string; skipTLSVerify?: boolean };
    const tls = ['ca', 'cert', 'key', 'pfx', 'passphrase', 'rejectUnauthorized', 'servername'].map((f) => {
      const v = opts?.[f];
      return Buffer.isBuffer(v) ? v.toString('base64') : v;
    });
    const key = createHash('sha256').update(JSON.stringify([c.name, c.server, c.proxyUrl, c.skipTLSVerify, tls])).digest('hex');
    if (agents.has(key)) return agents.get(key);
    const agent = original.call(kc, cluster, opts);
    agents.set(key, agent);
    if (agents.size > keep) {
      const [oldest, old] = agents.entries().next().value!;
      agents.delete(oldest);
      // Graceful: requests still running on it (a watch) finish first.
      void old?.close?.().catch(() => undefined);
    }
    return agent;
  };
  return kc;
}

export const CONTROLLER_UID_LABEL = 'batch.kubernetes.io/controller-uid';
export const JOB_SELECTOR = `${INJECTED_LABEL}=true`;
/** The Jobs the webhook did not label: among them, those that missed injection (harvester/missed.ts). */
export const UNINJECTED_JOB_SELECTOR = `!${INJECTED_LABEL}`;

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
      const pods: V1Pod[] = [];
      let cont: string | undefined;
      do {
        const page = await core.listNamespacedPod({ namespace, labelSelector: `${CONTROLLER_UID_LABEL}=${jobUid}`, limit: LIST_PAGE_LIMIT, ...(cont ? { _continue: cont } : {}) });
        pods.push(...page.items);
        cont = page.metadata?._continue || undefined;
      } while (cont);
      return pods;
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
  metadata?: { resourceVersion?: string; _continue?: string };
}

/**
 * Objects per list page. Every object listed here is a tenant's to write, up
 * to the API server's ~1.5 MiB each, and a page is parsed whole: 50 bound one
 * page to about 75 MiB in the worst case (a few hundred KiB for real Jobs and
 * pods), where an unpaged list of 300 inflated pods was 300 MiB at once.
 */
export const LIST_PAGE_LIMIT = 50;

/**
 * client-node's watch ends a request that has been silent this long (its own
 * default is 30 s). The API server sends a bookmark about once a minute on a
 * watch that asked for them, so a quiet watch, one namespace's pods above all,
 * would end every 30 s; this is long enough for two bookmarks, and a dead
 * connection is still noticed.
 */
export const WATCH_IDLE_MS = 150_000;

/** client-go's reflector: each watch asks the server to end it after 5 to 10 minutes, then resumes. */
const WATCH_TIMEOUT_SECONDS = [300, 600] as const;

/** A watch shorter than this that ended by itself counts as a failure (no hot loop against a server or proxy that closes at once). */
const SHORTEST_WATCH_MS = 1000;

export interface ListWatchOptions<T> {
  /** One page of the list: `limit` objects from `cont` (undefined: the first page). */
  list: (page: { limit: number; cont: string | undefined }) => Promise<Listed<T>>;
  path: string;
  query: Record<string, string>;
  onObject: (type: 'ADDED' | 'MODIFIED' | 'DELETED', obj: T) => void;
  /** After every list, all of its pages gone to onObject as ADDED: the uids listed, so that what is not among them is known to be gone. */
  onList?: (uids: ReadonlySet<string>) => void;
  /** The level a failed list or watch is logged at (warn unless this says otherwise). */
  failureLevel?: (err: unknown) => LogLevel;
  log: Log;
  /** Ends it as stop() does; a ListWatch run as a Runnable takes run()'s signal instead. */
  signal?: AbortSignal;
  /** Pause after a failure; it doubles with each failure in a row, up to maxRetryMs. */
  retryMs?: number;
  maxRetryMs?: number;
  stats?: WatchStats;
  resource?: Resource;
  random?: () => number;
}

/** One watch request's own state, from its start to its end. */
interface WatchRound {
  readonly started: number;
  /** Any event arrived, bookmarks included. */
  seen: boolean;
  /** The stream's ERROR event, if it sent one: the watch ends after it. */
  streamError: { code?: number; message?: string } | undefined;
}

/**
 * List, then watch from the list's resourceVersion, by client-go's reflector:
 * a watch that ends (the server's timeout, a quiet connection) is resumed from
 * the last resourceVersion seen, bookmarks included, without a list; only a
 * 410 (that version is too old) or a failed list lists again. Failures pause
 * with a doubling backoff. Every object seen goes to `onObject`; none is kept.
 * Runs from start() until stop() or its options' signal, or as a Runnable.
 */
export class ListWatch<T extends { metadata?: { resourceVersion?: string; uid?: string } }> implements JobWatch, Runnable {
  private readonly watch: Watch;
  private readonly retryMs: number;
  private readonly maxRetryMs: number;
  private readonly random: () => number;
  private readonly levelOf: (err: unknown) => LogLevel;
  private req: { abort(): void } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** Where the next watch starts; undefined: list first. */
  private rv: string | undefined;
  private failures = 0;

  constructor(
    kc: KubeConfig,
    private readonly what: string,
    private readonly o: ListWatchOptions<T>,
  ) {
    this.watch = new Watch(kc);
    // A private field of client-node's Watch (2.0.x): the inactivity timeout.
    const w = this.watch as unknown as { requestTimeoutMs?: unknown };
    if (typeof w.requestTimeoutMs === 'number') w.requestTimeoutMs = WATCH_IDLE_MS;
    this.retryMs = o.retryMs ?? 2000;
    this.maxRetryMs = Math.max(this.retryMs, o.maxRetryMs ?? 30_000);
    this.random = o.random ?? Math.random;
    this.levelOf = o.failureLevel ?? (() => 'warn' as const);
  }

  start(): this {
    void this.cycle();
    return this;
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.req?.abort();
  }

  /** Lists and watches until the signal is aborted, then ends the watch in flight and any retry. */
  async run(signal: AbortSignal): Promise<void> {
    this.start();
    await untilAborted(signal);
    this.stop();
  }

  private done(): boolean {
    return this.stopped || this.o.signal?.aborted === true;
  }

  private later(ms: number): void {
    if (this.done()) return;
    this.timer = setTimeout(() => void this.cycle(), ms);
  }

  private failed(msg: string, err: unknown): void {
    if (this.done()) return;
    const pause = Math.min(this.maxRetryMs, this.retryMs * 2 ** this.failures);
    this.failures++;
    this.o.log(this.levelOf(err), msg, { error: (err as Error)?.message ?? String(err), status: statusOf(err), failures: this.failures, retryInMs: pause });
    this.later(pause);
  }

  private async cycle(): Promise<void> {
    this.timer = undefined;
    if (this.done()) return;
    if (this.rv === undefined && !(await this.listAll())) return;
    if (this.done()) return;
    await this.watchFrom(this.rv ?? '');
  }

  /**
   * Paged, each page handed on and let go before the next is asked for;
   * every page is of the first page's snapshot. A continue token that
   * expired (410) fails the list, which starts again from the first page.
   * False when it failed or was stopped.
   */
  private async listAll(): Promise<boolean> {
    const o = this.o;
    const uids = new Set<string>();
    let cont: string | undefined;
    let last: Listed<T>;
    do {
      try {
        o.stats?.count(o.resource ?? 'jobs', 'list');
        last = await o.list({ limit: LIST_PAGE_LIMIT, cont });
      } catch (err) {
        this.failed(`${this.what} list failed; retrying`, err);
        return false;
      }
      if (this.done()) return false;
      for (const x of last.items) {
        if (o.onList && x.metadata?.uid) uids.add(x.metadata.uid);
        o.onObject('ADDED', x);
      }
      cont = last.metadata?._continue || undefined;
    } while (cont);
    o.onList?.(uids);
    this.rv = last.metadata?.resourceVersion ?? '';
    return true;
  }

  private async watchFrom(rv: string): Promise<void> {
    const round: WatchRound = { started: performance.now(), seen: false, streamError: undefined };
    const [lo, hi] = WATCH_TIMEOUT_SECONDS;
    this.o.stats?.count(this.o.resource ?? 'jobs', 'watch');
    try {
      const r = await this.watch.watch(
        this.o.path,
        { ...this.o.query, resourceVersion: rv || undefined, allowWatchBookmarks: true, timeoutSeconds: Math.floor(lo + this.random() * (hi - lo)) },
        (type: string, obj: T) => this.event(round, type, obj),
        (err: unknown) => this.ended(round, err),
      );
      // Stopped while the request was being made: it must not stay open.
      if (this.done()) r.abort();
      else this.req = r;
    } catch (err) {
      this.failed(`${this.what} watch failed; retrying`, err);
    }
  }

  private event(round: WatchRound, type: string, obj: T): void {
    if (type === 'ERROR') {
      round.streamError = obj as { code?: number; message?: string };
      return;
    }
    const v = obj?.metadata?.resourceVersion;
    if (v) this.rv = v;
    round.seen = true;
    if (type === 'ADDED' || type === 'MODIFIED' || type === 'DELETED') this.o.onObject(type, obj);
  }

  private ended(round: WatchRound, err: unknown): void {
    this.req = undefined;
    if (this.done()) return;
    if (round.seen) this.failures = 0;
    const what = this.what;
    if (round.streamError) {
      const e = Object.assign(new Error(round.streamError.message ?? 'watch error'), { code: round.streamError.code });
      if (round.streamError.code === 410) {
        // Compacted past our version: the events in between are gone, list again.
        this.rv = undefined;
        this.o.log('debug', `${what} watch expired; listing again`, { error: e.message });
        this.later(0);
      } else this.failed(`${what} watch failed; retrying`, e);
      return;
    }
    if (err === null || err === undefined || (err as Error).name === 'TimeoutError') {
      // The server's timeout, or a connection silent for WATCH_IDLE_MS: resume where it was.
      if (performance.now() - round.started >= SHORTEST_WATCH_MS || round.seen) {
        this.failures = 0;
        this.o.log('debug', `${what} watch ended; resuming`, { resourceVersion: this.rv });
        this.later(0);
      } else this.failed(`${what} watch ended at once; retrying`, err ?? new Error('closed by the server'));
      return;
    }
    if (statusOf(err) === 410) {
      this.rv = undefined;
      this.later(0);
      return;
    }
    this.failed(`${what} watch failed; retrying`, err);
  }
}

/** A ListWatch, started: it runs until stop() or its options' signal. */
export function listWatch<T extends { metadata?: { resourceVersion?: string; uid?: string } }>(kc: KubeConfig, what: string, o: ListWatchOptions<T>): JobWatch {
  return new ListWatch(kc, what, o).start();
}

export interface JobWatchOptions {
  log: Log;
  /** An injected Job, added or changed. */
  onJob: (job: V1Job) => void;
  /** An injected Job deleted (its last state). */
  onDeleted?: (job: V1Job) => void;
  /** After every list of the injected Jobs and their onJob calls: the uids of the Jobs that exist. */
  onList?: (uids: ReadonlySet<string>) => void;
  signal: AbortSignal;
  retryMs?: number;
  stats?: WatchStats;
}

/**
 * Every injected Job (or, with UNINJECTED_JOB_SELECTOR, every Job without the
 * label) becomes a call of `onJob` (or `onDeleted`); the watch keeps no objects.
 */
export function watchJobs(kc: KubeConfig, opts: JobWatchOptions & { selector?: string; namespace?: string }): JobWatch {
  const batch = kc.makeApiClient(BatchV1Api);
  const labelSelector = opts.selector ?? JOB_SELECTOR;
  const { namespace } = opts;
  return listWatch<V1Job>(kc, `${labelSelector === JOB_SELECTOR ? 'job' : 'uninjected job'}${namespace ? ` (${namespace})` : ''}`, {
    list: ({ limit, cont }) =>
      namespace
        ? batch.listNamespacedJob({ namespace, labelSelector, limit, ...(cont ? { _continue: cont } : {}) })
        : batch.listJobForAllNamespaces({ labelSelector, limit, ...(cont ? { _continue: cont } : {}) }),
    path: namespace ? `/apis/batch/v1/namespaces/${encodeURIComponent(namespace)}/jobs` : '/apis/batch/v1/jobs',
    query: { labelSelector },
    onObject: (type, job) => {
      if (type === 'DELETED') opts.onDeleted?.(job);
      else opts.onJob(job);
    },
    ...(opts.onList ? { onList: opts.onList } : {}),
    log: opts.log,
    signal: opts.signal,
    resource: 'jobs',
    ...(opts.stats ? { stats: opts.stats } : {}),
    ...(opts.retryMs !== undefined ? { retryMs: opts.retryMs } : {}),
  });
}


/**
 * The Job pods of one namespace (every pod the Job controller made carries
 * the controller-uid label; the label is only a filter), through the log
 * reader the webhook binds to the harvester in each opted-in namespace.
 */
export function watchJobPods(kc: KubeConfig, namespace: string, opts: { log: Log; onPod: (pod: V1Pod) => void; signal: AbortSignal; retryMs?: number; maxRetryMs?: number; stats?: WatchStats; now?: () => number }): JobWatch {
  const core = kc.makeApiClient(CoreV1Api);
  const now = opts.now ?? (() => performance.now());
  let refusedSince: number | undefined;
  let warned = false;
  return listWatch<V1Pod>(kc, `pod (${namespace})`, {
    list: async ({ limit, cont }) => {
      const list = await core.listNamespacedPod({ namespace, labelSelector: CONTROLLER_UID_LABEL, limit, ...(cont ? { _continue: cont } : {}) });
      refusedSince = undefined;
      return list;
    },
    path: `/api/v1/namespaces/${encodeURIComponent(namespace)}/pods`,
    query: { labelSelector: CONTROLLER_UID_LABEL },
    onObject: (_type, pod) => opts.onPod(pod),
    failureLevel: (err) => {
      const code = statusOf(err);
      if (code !== 403 && code !== 404) return 'warn';
      refusedSince ??= now();
      if (warned || now() - refusedSince < REFUSED_GRACE_MS) return 'debug';
      warned = true;
      return 'warn';
    },
    log: (level, msg, fields) => opts.log(level, msg, { namespace, ...fields }),
    signal: opts.signal,
    resource: 'pods',
    ...(opts.stats ? { stats: opts.stats } : {}),
    ...(opts.retryMs !== undefined ? { retryMs: opts.retryMs } : {}),
    maxRetryMs: opts.maxRetryMs ?? 60_000,
  });
}

/**
 * Every namespace, added, changed or deleted, as the webhook's namespace cache
 * sees them; `onList` after each list with the names listed. The watch keeps
 * nothing: the caller keeps what it needs (harvester/term.ts: the labels and
 * annotations of the namespaces that inject, nothing of the others).
 */
export function watchNamespaces(kc: KubeConfig, opts: { log: Log; signal: AbortSignal; onNamespace: (ns: V1Namespace, deleted: boolean) => void; onList: (names: ReadonlySet<string>) => void; stats?: WatchStats; retryMs?: number }): JobWatch {
  const core = kc.makeApiClient(CoreV1Api);
  let names = new Set<string>();
  return listWatch<V1Namespace>(kc, 'namespace', {
    list: async ({ limit, cont }) => {
      if (!cont) names = new Set();
      const page = await core.listNamespace({ limit, ...(cont ? { _continue: cont } : {}) });
      for (const ns of page.items) if (ns.metadata?.name) names.add(ns.metadata.name);
      return page;
    },
    path: '/api/v1/namespaces',
    query: {},
    onObject: (type, ns) => opts.onNamespace(ns, type === 'DELETED'),
    onList: () => opts.onList(names),
    log: opts.log,
    signal: opts.signal,
    resource: 'namespaces',
    ...(opts.stats ? { stats: opts.stats } : {}),
    ...(opts.retryMs !== undefined ? { retryMs: opts.retryMs } : {}),
  });
}
