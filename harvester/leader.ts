// Leader election on a coordination.k8s.io Lease, by client-go's rules
// (decisions in harvester/lease.ts). Every harvester replica campaigns; the
// one that holds the Lease harvests. Two must never harvest at once, so:
//   - a follower takes the Lease only after seeing it unchanged for a whole
//     lease duration on its own monotonic clock;
//   - a leader stops leading as soon as its last successful renewal is older
//     than the renew deadline, which is shorter than the lease duration, so it
//     has stopped before any follower may take over, whatever the API server
//     or the network does (calls that hang are cut off at the deadline);
//   - every write carries the resourceVersion read, so of two candidates that
//     race in one round, one loses with a 409.
import { Observable, V1MicroTime, type ConfigurationOptions, type CoordinationV1Api, type RequestContext, type ResponseContext, type V1Lease } from '@kubernetes/client-node';
import { checkTimings, leaseAction, observe, type LeaseView, type Observed } from './lease.ts';

export type LeaseApi = Pick<CoordinationV1Api, 'readNamespacedLease' | 'createNamespacedLease' | 'replaceNamespacedLease'>;

export type LeaderLog = (level: 'debug' | 'info' | 'warn' | 'error', msg: string, fields?: Record<string, unknown>) => void;

export interface LeaderOptions {
  namespace: string;
  name: string;
  identity: string;
  /** How long followers wait, after last seeing the Lease change, before taking it. */
  leaseDurationMs: number;
  /** How long a leader keeps leading without a successful renewal. */
  renewDeadlineMs: number;
  /** Time between attempts to acquire or renew; also the longest one attempt may take. */
  retryPeriodMs: number;
  /** Monotonic clock for every decision; performance.now by default. */
  now?: () => number;
  /**
   * Wall clock for the times written into the Lease, which are for people and
   * tools reading it; no decision here reads them back as times.
   */
  wallClock?: () => number;
  log?: LeaderLog;
  /**
   * Called on becoming leader. The signal is aborted the moment leadership is
   * lost or stop() is called; the work must stop then. If it returns a promise,
   * stop() waits for it before giving the Lease up, and this replica does not
   * lead again until it has settled.
   */
  onStartedLeading(signal: AbortSignal): void | Promise<void>;
  onStoppedLeading(): void;
}

export interface Leader {
  isLeader(): boolean;
  /**
   * Stops leading and campaigning: aborts the leader's signal, waits for the
   * work started by onStartedLeading (renewing meanwhile, so that no one else
   * takes over while it winds down), then gives the Lease up so another
   * replica takes over at once.
   */
  stop(): Promise<void>;
}

type Outcome = { kind: 'held' } | { kind: 'follow'; holder: string | undefined } | { kind: 'conflict' };

/** Campaigns for the Lease until stop(); throws at once if the timings could let two replicas lead together. */
export function startLeader(api: LeaseApi, opts: LeaderOptions): Leader {
  checkTimings(opts);
  const { namespace, name, identity, leaseDurationMs, renewDeadlineMs, retryPeriodMs } = opts;
  const now = opts.now ?? (() => performance.now());
  const wallClock = opts.wallClock ?? Date.now;
  const log = opts.log ?? (() => {});
  const ref = { namespace, name };

  let observed: Observed | undefined;
  let lastSeenHolder: string | undefined;
  /** Our last write succeeded within the renew deadline, as far as we know. */
  let holding = false;
  /** Monotonic time at which the round of our last successful write began. */
  let lastRenew = -Infinity;
  let leading: AbortController | undefined;
  let work: Promise<void> = Promise.resolve();
  let workSettled = true;
  let stopping = false;
  let stopped = false;
  let stopDone: Promise<void> | undefined;
  let roundTimer: NodeJS.Timeout | undefined;
  let deadlineTimer: NodeJS.Timeout | undefined;
  let attempt: AbortController | undefined;
  let round: Promise<void> = Promise.resolve();

  const deadlinePassed = (): boolean => now() - lastRenew >= renewDeadlineMs;

  function stopLeading(reason: string): void {
    const l = leading;
    if (!l) return;
    leading = undefined;
    log(stopping ? 'info' : 'warn', 'stopped leading', { lease: name, identity, reason });
    l.abort(new Error(`no longer leader: ${reason}`));
    try {
      opts.onStoppedLeading();
    } catch (err) {
      log('error', 'onStoppedLeading threw', { lease: name, error: messageOf(err) });
    }
  }

  function loseLease(reason: string): void {
    holding = false;
    clearTimeout(deadlineTimer);
    stopLeading(reason);
  }

  function startLeading(): void {
    const ac = new AbortController();
    leading = ac;
    workSettled = false;
    log('info', 'started leading', { lease: name, identity });
    // `work` is in place before the callback runs, so a stop() it calls
    // itself still waits for it.
    let settle!: () => void;
    work = new Promise<void>((r) => (settle = r));
    void (async () => {
      try {
        await opts.onStartedLeading(ac.signal);
      } catch (err) {
        log('error', 'leader work failed', { lease: name, error: messageOf(err) });
      } finally {
        workSettled = true;
        settle();
      }
    })();
  }

  // Steps down at the deadline even while a round is still waiting on the API
  // server, not at the end of that round.
  function armDeadline(): void {
    clearTimeout(deadlineTimer);
    const left = lastRenew + renewDeadlineMs - now();
    deadlineTimer = setTimeout(() => {
      if (!holding) return;
      if (deadlinePassed()) loseLease(`no successful renewal for ${renewDeadlineMs} ms`);
      else armDeadline();
    }, Math.max(0, left));
    deadlineTimer.unref();
  }

  async function tryAcquireOrRenew(signal: AbortSignal): Promise<Outcome> {
    const call = callOptions(signal);
    let cur: V1Lease | undefined;
    try {
      cur = await api.readNamespacedLease(ref, call);
    } catch (err) {
      if (statusOf(err) !== 404) throw err;
    }
    const view = cur ? viewOf(cur) : undefined;
    const t = now();
    observed = observe(observed, view, t);
    lastSeenHolder = view?.holder;
    const action = leaseAction(view, observed, identity, t, leaseDurationMs);
    if (action === 'follow' || (action === 'acquire' && stopping)) return { kind: 'follow', holder: view?.holder };
    const stamp = new V1MicroTime(wallClock());
    const spec = cur?.spec;
    const body: V1Lease = {
      ...cur,
      metadata: { ...cur?.metadata, name, namespace },
      spec: {
        ...spec,
        holderIdentity: identity,
        leaseDurationSeconds: Math.max(1, Math.ceil(leaseDurationMs / 1000)),
        renewTime: stamp,
        acquireTime: action === 'renew' && spec?.acquireTime ? spec.acquireTime : stamp,
        leaseTransitions: (spec?.leaseTransitions ?? 0) + (cur && spec?.holderIdentity !== identity ? 1 : 0),
      },
    };
    let written: V1Lease;
    try {
      written = cur ? await api.replaceNamespacedLease({ ...ref, body }, call) : await api.createNamespacedLease({ namespace, body }, call);
    } catch (err) {
      if (statusOf(err) === 409) return { kind: 'conflict' };
      throw err;
    }
    observed = observe(observed, viewOf(written), now());
    lastSeenHolder = identity;
    return { kind: 'held' };
  }

  async function once(): Promise<void> {
    const started = now();
    // Checked every round, not only after a failed renewal.
    if (holding && deadlinePassed()) loseLease(`no successful renewal for ${renewDeadlineMs} ms`);
    // An attempt never outlives the renew deadline, so a hung call cannot keep
    // this replica leading past it.
    const limit = holding ? Math.max(1, Math.min(retryPeriodMs, lastRenew + renewDeadlineMs - started)) : retryPeriodMs;
    let outcome: Outcome | undefined;
    try {
      outcome = await within(limit, (ac) => (attempt = ac), tryAcquireOrRenew);
    } catch (err) {
      log('warn', holding ? 'could not renew the lease' : 'could not read or take the lease', { lease: name, error: messageOf(err) });
    } finally {
      attempt = undefined;
    }
    if (outcome?.kind === 'held') {
      if (!holding) log('debug', 'holding the lease', { lease: name, identity });
      holding = true;
      lastRenew = started;
      armDeadline();
      if (!leading && !stopping) {
        if (workSettled) startLeading();
        else log('debug', 'holding the lease; waiting for the previous term’s work to end before leading again', { lease: name });
      }
    } else if (outcome?.kind === 'follow') {
      if (holding) loseLease(`${outcome.holder ?? 'another replica'} holds the lease`);
    } else if (outcome?.kind === 'conflict') {
      // Someone else wrote the Lease since we read it: we hold it no longer.
      if (holding) loseLease('another replica wrote the lease first');
    } else if (holding && deadlinePassed()) {
      loseLease(`no successful renewal for ${renewDeadlineMs} ms`);
    }
  }

  function tick(): void {
    const started = now();
    round = once()
      .catch((err: unknown) => log('error', 'leader election round failed', { lease: name, error: messageOf(err) }))
      .finally(() => {
        if (stopped) return;
        roundTimer = setTimeout(tick, Math.max(0, started + retryPeriodMs - now()));
        roundTimer.unref();
      });
  }

  async function release(): Promise<void> {
    try {
      await within(renewDeadlineMs, () => {}, async (signal) => {
        const call = callOptions(signal);
        const cur = await api.readNamespacedLease(ref, call);
        if (cur.spec?.holderIdentity !== identity) return;
        // Clearing the holder lets a follower take the Lease on its next round
        // instead of waiting out the lease duration.
        await api.replaceNamespacedLease({ ...ref, body: { ...cur, spec: { ...cur.spec, holderIdentity: undefined, renewTime: new V1MicroTime(wallClock()) } } }, call);
        log('info', 'released the lease', { lease: name, identity });
      });
    } catch (err) {
      log('warn', 'could not release the lease; another replica takes over once it expires', { lease: name, error: messageOf(err) });
    }
  }

  tick();

  return {
    isLeader: () => leading !== undefined && holding && !deadlinePassed(),
    stop() {
      stopDone ??= (async () => {
        stopping = true;
        stopLeading('stopping');
        await work;
        stopped = true;
        clearTimeout(roundTimer);
        attempt?.abort(new Error('stopping'));
        await round;
        clearTimeout(deadlineTimer);
        const mine = holding || lastSeenHolder === identity;
        holding = false;
        if (mine) await release();
      })();
      return stopDone;
    },
  };
}

function viewOf(l: V1Lease): LeaseView {
  const s = l.spec;
  return {
    holder: s?.holderIdentity || undefined,
    renewTime: s?.renewTime === undefined ? undefined : JSON.stringify(s.renewTime),
    resourceVersion: l.metadata?.resourceVersion,
    durationSeconds: s?.leaseDurationSeconds,
  };
}

/**
 * Runs f with a signal aborted after ms, and gives up waiting at that moment
 * even if f ignores the signal.
 */
async function within<T>(ms: number, expose: (ac: AbortController) => void, f: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const ac = new AbortController();
  expose(ac);
  let timer: NodeJS.Timeout | undefined;
  const gaveUp = new Promise<never>((_, reject) => {
    const fail = () => reject(ac.signal.reason instanceof Error ? ac.signal.reason : new Error(String(ac.signal.reason)));
    ac.signal.addEventListener('abort', fail, { once: true });
    timer = setTimeout(() => ac.abort(new Error(`no answer from the API server within ${Math.round(ms)} ms`)), ms);
    timer.unref();
  });
  try {
    return await Promise.race([f(ac.signal), gaveUp]);
  } finally {
    clearTimeout(timer);
  }
}

/** Per-call options that make client-node's fetch honour the signal. */
function callOptions(signal: AbortSignal): ConfigurationOptions {
  return {
    middleware: [
      {
        pre: (ctx: RequestContext) => {
          ctx.setSignal(signal);
          return new Observable(Promise.resolve(ctx));
        },
        post: (rsp: ResponseContext) => new Observable(Promise.resolve(rsp)),
      },
    ],
    middlewareMergeStrategy: 'append',
  };
}

/** HTTP status of a client-node ApiException (undefined for network errors). */
function statusOf(err: unknown): number | undefined {
  const c = (err as { code?: unknown })?.code;
  return typeof c === 'number' ? c : undefined;
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
