import type { NamespaceMeta } from '../core/kube.ts';
import type { Log } from '../contract/log.ts';

/**
 * How long after a namespace was created, or after the cache last saw it
 * change, a "not opted in" from the cache is checked against the API server.
 * A controller that annotates new namespaces as they appear does so within
 * milliseconds, and the cache learns of it through a watch that may lag by as
 * much; a Job created in between would be let through untouched.
 */
export const LIVE_READ_WINDOW_MS = 5_000;
/** Longest an admission waits on a live read: far inside the webhook's timeout (10 s at most). */
export const LIVE_READ_TIMEOUT_MS = 2_000;

/** Why a namespace is read live: the cache has not seen it, or it is new or changed a moment ago. */
export type LiveReadTrigger = 'unseen' | 'recent';
export type LiveReadResult = 'opted-in' | 'not-opted-in' | 'not-found' | 'error' | 'timeout' | 'throttled';

/**
 * Reads of namespaces the cache has not seen, per second, and the burst above
 * that. A genuine review names a namespace that exists (the API server's
 * NamespaceLifecycle admission runs before webhooks), which the watch learns of
 * within milliseconds; only a namespace created that moment is unseen. A
 * forged review can name any string, and each would cost the API server a GET.
 */
export const UNSEEN_READS_PER_SECOND = 10;
export const UNSEEN_READ_BURST = 20;
/** Names found absent are remembered this long (the cache drops the memory once it sees the namespace), up to this many. */
export const NOT_FOUND_TTL_MS = LIVE_READ_WINDOW_MS;
export const NOT_FOUND_ENTRIES = 1024;

export type LiveRead = { kind: 'found'; meta: NamespaceMeta } | { kind: 'not-found' } | { kind: 'error'; error: string } | { kind: 'timeout' };

export interface CachedNamespace {
  meta: NamespaceMeta;
  /** Epoch ms of its creation or of the last change the cache saw, whichever is later. */
  changedAt: number | undefined;
}

/**
 * The later of a namespace's creationTimestamp (the API server's clock; a
 * Date, or a string as a watch event carries it) and the local time the cache
 * last saw it change.
 */
export function changedAt(creationTimestamp: Date | string | undefined, seenChangingAt: number | undefined): number | undefined {
  const created = creationTimestamp === undefined ? NaN : new Date(creationTimestamp).getTime();
  const stamps = [created, seenChangingAt ?? NaN].filter((t) => Number.isFinite(t));
  return stamps.length === 0 ? undefined : Math.max(...stamps);
}

/**
 * Whether an admission must read the namespace live before deciding. Only a
 * "not opted in" can be the stale answer that costs a Job its sidecar; an
 * opted-in namespace, or one that has not changed for longer than the window,
 * is decided from the cache. A change stamped in the future (clocks apart)
 * counts as recent.
 */
export function liveReadTrigger(
  cached: CachedNamespace | undefined,
  optedIn: (ns: NamespaceMeta) => boolean,
  now: number,
  windowMs: number = LIVE_READ_WINDOW_MS,
): LiveReadTrigger | undefined {
  if (!cached) return 'unseen';
  if (optedIn(cached.meta)) return undefined;
  if (cached.changedAt === undefined) return undefined;
  return now - cached.changedAt < windowMs ? 'recent' : undefined;
}

export interface LiveSource {
  peek(name: string): CachedNamespace | undefined;
  /** One GET of the namespace; never rejects. */
  readLive(name: string): Promise<LiveRead>;
}

export interface NamespaceLookupOptions {
  optedIn: (ns: NamespaceMeta) => boolean;
  log: Log;
  now?: () => number;
  windowMs?: number;
  timeoutMs?: number;
  onLiveRead?: (trigger: LiveReadTrigger, result: LiveReadResult) => void;
  unseenReadsPerSecond?: number;
  unseenReadBurst?: number;
}

function within(p: Promise<LiveRead>, ms: number): Promise<LiveRead> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<LiveRead>((resolve) => {
    timer = setTimeout(() => resolve({ kind: 'timeout' }), ms);
  });
  return Promise.race([p, deadline]).finally(() => clearTimeout(timer));
}

interface Flight {
  running: Promise<LiveRead>;
  queued?: Promise<LiveRead> | undefined;
}

/**
 * The namespace as an admission should see it: from the cache, or live when
 * liveReadTrigger says so. A live read never takes longer than timeoutMs and
 * never fails the admission: on a timeout or an error the cached copy decides
 * (no copy: undefined, which admits the Job untouched with a warning), and a
 * warning is logged.
 *
 * Admissions of one namespace share reads, but never one that went out before
 * they arrived (it may predate the annotation they depend on): they wait for
 * the next, so a burst costs at most two reads in flight per namespace.
 */
export function namespaceLookup(source: LiveSource, opts: NamespaceLookupOptions): (name: string) => Promise<NamespaceMeta | undefined> {
  const now = opts.now ?? Date.now;
  const timeoutMs = opts.timeoutMs ?? LIVE_READ_TIMEOUT_MS;
  const flights = new Map<string, Flight>();
  const rate = (opts.unseenReadsPerSecond ?? UNSEEN_READS_PER_SECOND) / 1000;
  const burst = opts.unseenReadBurst ?? UNSEEN_READ_BURST;
  let tokens = burst;
  let refilledAt = now();
  let throttleLoggedAt = -Infinity;
  const takeToken = (): boolean => {
    const t = now();
    tokens = Math.min(burst, tokens + Math.max(0, t - refilledAt) * rate);
    refilledAt = t;
    if (tokens < 1) return false;
    tokens -= 1;
    return true;
  };
  // Insertion-ordered: the oldest entry goes first when full.
  const absent = new Map<string, number>();
  const rememberAbsent = (name: string) => {
    absent.delete(name);
    if (absent.size >= NOT_FOUND_ENTRIES) absent.delete(absent.keys().next().value!);
    absent.set(name, now() + NOT_FOUND_TTL_MS);
  };

  const start = (name: string, flight?: Flight): Promise<LiveRead> => {
    const running = within(source.readLive(name), timeoutMs);
    const f: Flight = flight ?? { running };
    f.running = running;
    flights.set(name, f);
    void running.then(() => {
      if (flights.get(name) === f && f.running === running && !f.queued) flights.delete(name);
    });
    return running;
  };
  const read = (name: string): Promise<LiveRead> => {
    const f = flights.get(name);
    if (!f) return start(name);
    f.queued ??= f.running.then(() => {
      f.queued = undefined;
      return start(name, f);
    });
    return f.queued;
  };

  return async (name) => {
    const cached = source.peek(name);
    const trigger = liveReadTrigger(cached, opts.optedIn, now(), opts.windowMs);
    if (!trigger) return cached?.meta;
    if (trigger === 'unseen') {
      const until = absent.get(name);
      if (until !== undefined && until > now()) return undefined;
      absent.delete(name);
      if (!flights.has(name) && !takeToken()) {
        opts.onLiveRead?.(trigger, 'throttled');
        if (now() - throttleLoggedAt >= 1000) {
          throttleLoggedAt = now();
          opts.log('warn', 'too many reads of namespaces the cache has not seen; admitting without reading', { ratePerSecond: rate * 1000, burst });
        }
        return undefined;
      }
    }
    const got = await within(read(name), timeoutMs);
    if (trigger === 'unseen' && got.kind === 'not-found') rememberAbsent(name);
    const result: LiveReadResult = got.kind === 'found' ? (opts.optedIn(got.meta) ? 'opted-in' : 'not-opted-in') : got.kind;
    opts.onLiveRead?.(trigger, result);
    if (got.kind === 'found') return got.meta;
    if (got.kind !== 'not-found') {
      opts.log('warn', cached ? 'cannot read the namespace live; deciding on the cached copy' : 'cannot read the namespace', {
        namespace: name,
        trigger,
        result,
        ...(got.kind === 'error' ? { error: got.error } : { timeoutMs }),
      });
    }
    return cached?.meta;
  };
}
