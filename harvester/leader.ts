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
import { statusOf } from './api-errors.ts';
import { checkTimings, leaseAction, observe, type LeaseView, type Observed } from './lease.ts';
import type { Log } from './log.ts';
import type { Runnable } from './runnable.ts';

export type LeaseApi = Pick<CoordinationV1Api, 'readNamespacedLease' | 'createNamespacedLease' | 'replaceNamespacedLease'>;


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
  log?: Log;
  /**
   * Gives the Lease up when run()'s signal is aborted, so that another replica
   * takes over at once (client-go's ReleaseOnCancel); on unless false.
   */
  releaseOnStop?: boolean;
  /**
   * Called on becoming leader. The signal is aborted the moment leadership is
   * lost or run()'s signal is aborted; the work must stop then. If it returns
   * a promise, run() waits for it before giving the Lease up, and this replica
   * does not lead again until it has settled.
   */
  onStartedLeading(signal: AbortSignal): void | Promise<void>;
  onStoppedLeading(): void;
}

/** What one try at the Lease found: held by us, another's to follow, or a write lost to a concurrent one. */
type LeaseRound = { kind: 'held' } | { kind: 'follow'; holder: string | undefined } | { kind: 'conflict' };

/**
 * client-go's LeaderElector: run() acquires the Lease, runs the term's work,
 * renews until the Lease is lost, and campaigns again, until its signal is
 * aborted; then it waits for the work (renewing meanwhile, so that no one
 * else takes over while it winds down) and gives the Lease up.
 */
export class LeaderElector implements Runnable {
  private readonly api: LeaseApi;
  private readonly opts: LeaderOptions;
  private readonly ref: { namespace: string; name: string };
  private readonly now: () => number;
  private readonly wallClock: () => number;
  private readonly log: Log;

  /** The Lease as this candidate last saw it change, on its own clock. */
  private observed: Observed | undefined;
  private lastSeenHolder: string | undefined;
  /** Our last write succeeded within the renew deadline, as far as we know. */
  private holding = false;
  /** Monotonic time at which the round of our last successful write began. */
  private lastRenew = -Infinity;
  /** The current term's signal; undefined while not leading. */
  private leading: AbortController | undefined;
  /** The current or last term's work. */
  private work: Promise<void> = Promise.resolve();
  private workSettled = true;
  /** run()'s signal was aborted: no new term, no taking a Lease that is not ours. */
  private stopping = false;
  /** Aborted once stopping and the last term's work has ended: no more rounds. */
  private readonly ended = new AbortController();
  private roundStartedAt: number | undefined;
  private deadlineTimer: NodeJS.Timeout | undefined;
  /** The attempt in flight, so that the end of the rounds cuts it off. */
  private attempt: AbortController | undefined;
  private started = false;

  /** Throws at once if the timings could let two replicas lead together. */
  constructor(api: LeaseApi, opts: LeaderOptions) {
    checkTimings(opts);
    this.api = api;
    this.opts = opts;
    this.ref = { namespace: opts.namespace, name: opts.name };
    this.now = opts.now ?? (() => performance.now());
    this.wallClock = opts.wallClock ?? Date.now;
    this.log = opts.log ?? (() => {});
  }

  isLeader(): boolean {
    return this.leading !== undefined && this.holding && !this.deadlinePassed();
  }

  /** Campaigns until the signal is aborted; resolves once the work has ended and the Lease is given up. */
  async run(signal: AbortSignal): Promise<void> {
    if (this.started) throw new Error('a LeaderElector runs only once');
    this.started = true;
    if (signal.aborted) this.windDown();
    else signal.addEventListener('abort', () => this.windDown(), { once: true });
    let last: LeaseRound | undefined;
    while (await this.acquire(last)) {
      this.lead();
      last = await this.renew();
    }
    clearTimeout(this.deadlineTimer);
    const mine = this.holding || this.lastSeenHolder === this.opts.identity;
    this.holding = false;
    if (mine && this.opts.releaseOnStop !== false) await this.release();
  }

  /**
   * Rounds until one writes the Lease for us while the last term's work has
   * ended; false once the rounds have ended. `last` is the outcome of the
   * round that ended the previous term: it may have renewed already.
   */
  private async acquire(last: LeaseRound | undefined): Promise<boolean> {
    for (let outcome = last; !this.ended.signal.aborted; outcome = await this.nextRound()) {
      if (outcome?.kind !== 'held' || this.leading || this.stopping) continue;
      if (this.workSettled) return true;
      this.log('debug', 'holding the lease; waiting for the previous term’s work to end before leading again', { lease: this.opts.name });
    }
    return false;
  }

  /** Rounds while this term leads; the outcome of the round that ended it. */
  private async renew(): Promise<LeaseRound | undefined> {
    let outcome: LeaseRound | undefined;
    while (this.leading && !this.ended.signal.aborted) outcome = await this.nextRound();
    return outcome;
  }

  /** Starts a term: onStartedLeading with a signal of its own. */
  private lead(): void {
    const ac = new AbortController();
    this.leading = ac;
    this.workSettled = false;
    this.log('info', 'started leading', { lease: this.opts.name, identity: this.opts.identity });
    // `work` is in place before the callback runs, so an abort of run()'s
    // signal from inside it still waits for it.
    let settle!: () => void;
    this.work = new Promise<void>((r) => (settle = r));
    void (async () => {
      try {
        await this.opts.onStartedLeading(ac.signal);
      } catch (err) {
        this.log('error', 'leader work failed', { lease: this.opts.name, error: messageOf(err) });
      } finally {
        this.workSettled = true;
        settle();
      }
    })();
  }

  /** run()'s signal: end the term now, and the rounds once its work has ended. */
  private windDown(): void {
    this.stopping = true;
    this.stopLeading('stopping');
    void this.work.then(() => {
      this.ended.abort();
      this.attempt?.abort(new Error('stopping'));
    });
  }

  private stopLeading(reason: string): void {
    const l = this.leading;
    if (!l) return;
    this.leading = undefined;
    this.log(this.stopping ? 'info' : 'warn', 'stopped leading', { lease: this.opts.name, identity: this.opts.identity, reason });
    l.abort(new Error(`no longer leader: ${reason}`));
    try {
      this.opts.onStoppedLeading();
    } catch (err) {
      this.log('error', 'onStoppedLeading threw', { lease: this.opts.name, error: messageOf(err) });
    }
  }

  private loseLease(reason: string): void {
    this.holding = false;
    clearTimeout(this.deadlineTimer);
    this.stopLeading(reason);
  }

  private deadlinePassed(): boolean {
    return this.now() - this.lastRenew >= this.opts.renewDeadlineMs;
  }

  private loseIfDeadlinePassed(): void {
    if (this.holding && this.deadlinePassed()) this.loseLease(`no successful renewal for ${this.opts.renewDeadlineMs} ms`);
  }

  // Steps down at the deadline even while a round is still waiting on the API
  // server, not at the end of that round.
  private armDeadline(): void {
    clearTimeout(this.deadlineTimer);
    const left = this.lastRenew + this.opts.renewDeadlineMs - this.now();
    this.deadlineTimer = setTimeout(() => {
      if (!this.holding) return;
      if (this.deadlinePassed()) this.loseLease(`no successful renewal for ${this.opts.renewDeadlineMs} ms`);
      else this.armDeadline();
    }, Math.max(0, left));
    this.deadlineTimer.unref();
  }

  /** One round a retry period after the last one began; undefined if it failed or the rounds ended first. */
  private async nextRound(): Promise<LeaseRound | undefined> {
    if (this.roundStartedAt !== undefined) await pause(this.roundStartedAt + this.opts.retryPeriodMs - this.now(), this.ended.signal);
    if (this.ended.signal.aborted) return undefined;
    this.roundStartedAt = this.now();
    try {
      return await this.round(this.roundStartedAt);
    } catch (err) {
      this.log('error', 'leader election round failed', { lease: this.opts.name, error: messageOf(err) });
      return undefined;
    }
  }

  private async round(started: number): Promise<LeaseRound | undefined> {
    // Checked every round, not only after a failed renewal.
    this.loseIfDeadlinePassed();
    // An attempt never outlives the renew deadline, so a hung call cannot keep
    // this replica leading past it.
    const { retryPeriodMs, renewDeadlineMs } = this.opts;
    const limit = this.holding ? Math.max(1, Math.min(retryPeriodMs, this.lastRenew + renewDeadlineMs - started)) : retryPeriodMs;
    let outcome: LeaseRound | undefined;
    try {
      outcome = await within(limit, (ac) => (this.attempt = ac), (signal) => this.tryAcquireOrRenew(signal));
    } catch (err) {
      this.log('warn', this.holding ? 'could not renew the lease' : 'could not read or take the lease', { lease: this.opts.name, error: messageOf(err) });
    } finally {
      this.attempt = undefined;
    }
    if (outcome?.kind === 'held') {
      if (!this.holding) this.log('debug', 'holding the lease', { lease: this.opts.name, identity: this.opts.identity });
      this.holding = true;
      this.lastRenew = started;
      this.armDeadline();
    } else if (outcome?.kind === 'follow') {
      if (this.holding) this.loseLease(`${outcome.holder ?? 'another replica'} holds the lease`);
    } else if (outcome?.kind === 'conflict') {
      // Someone else wrote the Lease since we read it: we hold it no longer.
      if (this.holding) this.loseLease('another replica wrote the lease first');
    } else this.loseIfDeadlinePassed();
    return outcome;
  }

  private async tryAcquireOrRenew(signal: AbortSignal): Promise<LeaseRound> {
    const call = callOptions(signal);
    let cur: V1Lease | undefined;
    try {
      cur = await this.api.readNamespacedLease(this.ref, call);
    } catch (err) {
      if (statusOf(err) !== 404) throw err;
    }
    const view = cur ? viewOf(cur) : undefined;
    const t = this.now();
    this.observed = observe(this.observed, view, t);
    this.lastSeenHolder = view?.holder;
    const action = leaseAction(view, this.observed, this.opts.identity, t, this.opts.leaseDurationMs);
    if (action === 'follow' || (action === 'acquire' && this.stopping)) return { kind: 'follow', holder: view?.holder };
    const body = this.leaseBody(cur, action);
    let written: V1Lease;
    try {
      written = cur ? await this.api.replaceNamespacedLease({ ...this.ref, body }, call) : await this.api.createNamespacedLease({ namespace: this.ref.namespace, body }, call);
    } catch (err) {
      if (statusOf(err) === 409) return { kind: 'conflict' };
      throw err;
    }
    this.observed = observe(this.observed, viewOf(written), this.now());
    this.lastSeenHolder = this.opts.identity;
    return { kind: 'held' };
  }

  /** The Lease as we write it: `cur` (as read, with its resourceVersion) held by us. */
  private leaseBody(cur: V1Lease | undefined, action: 'acquire' | 'renew'): V1Lease {
    const { identity, leaseDurationMs } = this.opts;
    const stamp = new V1MicroTime(this.wallClock());
    const spec = cur?.spec;
    return {
      ...cur,
      metadata: { ...cur?.metadata, ...this.ref },
      spec: {
        ...spec,
        holderIdentity: identity,
        leaseDurationSeconds: Math.max(1, Math.ceil(leaseDurationMs / 1000)),
        renewTime: stamp,
        acquireTime: action === 'renew' && spec?.acquireTime ? spec.acquireTime : stamp,
        leaseTransitions: (spec?.leaseTransitions ?? 0) + (cur && spec?.holderIdentity !== identity ? 1 : 0),
      },
    };
  }

  private async release(): Promise<void> {
    const { identity, name } = this.opts;
    try {
      await within(this.opts.renewDeadlineMs, () => {}, async (signal) => {
        const call = callOptions(signal);
        const cur = await this.api.readNamespacedLease(this.ref, call);
        if (cur.spec?.holderIdentity !== identity) return;
        // Clearing the holder lets a follower take the Lease on its next round
        // instead of waiting out the lease duration.
        await this.api.replaceNamespacedLease({ ...this.ref, body: { ...cur, spec: { ...cur.spec, holderIdentity: undefined, renewTime: new V1MicroTime(this.wallClock()) } } }, call);
        this.log('info', 'released the lease', { lease: name, identity });
      });
    } catch (err) {
      this.log('warn', 'could not release the lease; another replica takes over once it expires', { lease: name, error: messageOf(err) });
    }
  }
}

/** Resolves after ms, or at once when the signal is aborted; its timer keeps the process alive meanwhile. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, Math.max(0, ms));
    signal.addEventListener('abort', done, { once: true });
  });
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
    // Not unref'd: with the pause between rounds, it is what keeps a follower's
    // process alive while run() campaigns.
    timer = setTimeout(() => ac.abort(new Error(`no answer from the API server within ${Math.round(ms)} ms`)), ms);
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
function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
