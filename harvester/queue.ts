// The harvester's work queue, in the shape of client-go's workqueue driven by
// controller-runtime's reconcile loop. Events about a Job only say "look at
// this Job again": many events for one Job while it waits collapse into one
// reconcile, and a Job is never reconciled by two workers at once, so the
// reconcile function may assume it alone acts on its key (at most one harvest
// per Job at a time).
import type { Log } from './log.ts';
import type { Runnable } from './runnable.ts';

export type ReconcileResult = { kind: 'done' } | { kind: 'requeue'; afterMs: number };


export interface WorkQueueOptions {
  /** Reconciles running at once, across all keys. */
  concurrency: number;
  /** Delay after a key's first failure; it doubles with each failure in a row. */
  baseDelayMs?: number;
  maxDelayMs?: number;
  /**
   * Fraction of a failure delay taken off at random, so that keys that failed
   * together (the log server went down) do not all come back in lockstep. 0
   * makes delays exact.
   */
  jitter?: number;
  random?: () => number;
  /** Monotonic clock, for when delayed keys fall due. */
  now?: () => number;
  /** Aborting it shuts the queue down, as shutdown() does. */
  signal?: AbortSignal;
  log?: Log;
}

type Reconcile<K> = (key: K, signal: AbortSignal) => Promise<ReconcileResult>;

interface Delayed {
  readonly at: number;
  readonly timer: NodeJS.Timeout;
}

export class WorkQueue<K extends string = string> implements Runnable {
  private readonly reconcile: Reconcile<K>;
  private readonly concurrency: number;
  private readonly baseDelayMs: number;
  private readonly maxDelayMs: number;
  private readonly jitter: number;
  private readonly random: () => number;
  private readonly now: () => number;
  private readonly log: Log;
  private readonly abort = new AbortController();

  /** Keys in the order they run; each at most once, and never one that is running. */
  private readonly order: K[] = [];
  /**
   * Keys that need a reconcile they have not had yet: those in `order`, and
   * those that changed while running, which go back in line when their run ends
   * rather than start a second run beside it.
   */
  private readonly dirty = new Set<K>();
  private readonly active = new Map<K, Promise<void>>();
  private readonly delayed = new Map<K, Delayed>();
  private readonly failures = new Map<K, number>();
  private idleWaiters: (() => void)[] = [];
  private started = false;
  private closing = false;
  private peak = 0;

  constructor(reconcile: Reconcile<K>, opts: WorkQueueOptions) {
    if (!Number.isInteger(opts.concurrency) || opts.concurrency < 1) throw new Error(`concurrency must be a whole number of at least 1, got ${opts.concurrency}`);
    this.reconcile = reconcile;
    this.concurrency = opts.concurrency;
    this.baseDelayMs = opts.baseDelayMs ?? 5;
    this.maxDelayMs = opts.maxDelayMs ?? 60_000;
    this.jitter = Math.min(1, Math.max(0, opts.jitter ?? 0.1));
    this.random = opts.random ?? Math.random;
    this.now = opts.now ?? (() => performance.now());
    this.log = opts.log ?? (() => {});
    if (opts.signal) {
      if (opts.signal.aborted) void this.shutdown();
      else opts.signal.addEventListener('abort', () => void this.shutdown(), { once: true });
    }
  }

  /** Keys waiting for a worker (not those running, nor those delayed). */
  get length(): number {
    return this.order.length;
  }

  get running(): number {
    return this.active.size;
  }

  /** The most reconciles that ever ran at once. */
  get peakRunning(): number {
    return this.peak;
  }

  add(key: K): void {
    if (this.closing) return;
    // The key runs now; a later run it was waiting for would find nothing new.
    this.cancelDelayed(key);
    if (this.dirty.has(key)) return;
    this.dirty.add(key);
    if (this.active.has(key)) return;
    this.order.push(key);
    this.pump();
  }

  addAfter(key: K, ms: number): void {
    if (this.closing) return;
    if (!(ms > 0)) {
      this.add(key);
      return;
    }
    // Already due to run: running it later as well would find nothing new.
    if (this.dirty.has(key)) return;
    const at = this.now() + ms;
    const prev = this.delayed.get(key);
    // The earlier of two requests wins, as in client-go's delaying queue.
    if (prev && prev.at <= at) return;
    if (prev) clearTimeout(prev.timer);
    const timer = setTimeout(() => {
      if (this.delayed.get(key)?.timer !== timer) return;
      this.delayed.delete(key);
      this.add(key);
    }, ms);
    timer.unref();
    this.delayed.set(key, { at, timer });
  }

  /** Works until the signal is aborted, then shuts down and waits for the running reconciles. */
  async run(signal: AbortSignal): Promise<void> {
    this.start();
    // Shut down within the abort itself, as the `signal` option does, so that
    // no reconcile resumes after it with its own signal not yet aborted.
    await new Promise<void>((resolve) => {
      const down = (): void => resolve(this.shutdown());
      if (signal.aborted) down();
      else signal.addEventListener('abort', down, { once: true });
    });
  }

  start(): void {
    if (this.started) return;
    this.started = true;
    this.pump();
  }

  /** Takes no more keys, aborts the running reconciles and waits for them to return. */
  async shutdown(): Promise<void> {
    if (!this.closing) {
      this.closing = true;
      this.abort.abort(new Error('work queue shut down'));
      for (const d of this.delayed.values()) clearTimeout(d.timer);
      this.delayed.clear();
      this.order.length = 0;
      this.dirty.clear();
    }
    await Promise.all(this.active.values());
    this.settleIdle();
  }

  /** Resolves once nothing is waiting for a worker and nothing runs; delayed keys do not count. */
  idle(): Promise<void> {
    if (this.isIdle()) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private isIdle(): boolean {
    return this.active.size === 0 && (this.order.length === 0 || this.closing);
  }

  private settleIdle(): void {
    if (!this.isIdle()) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }

  private cancelDelayed(key: K): void {
    const d = this.delayed.get(key);
    if (!d) return;
    clearTimeout(d.timer);
    this.delayed.delete(key);
  }

  private pump(): void {
    while (this.started && !this.closing && this.active.size < this.concurrency && this.order.length > 0) {
      const key = this.order.shift() as K;
      this.dirty.delete(key);
      this.active.set(key, this.runKey(key));
      this.peak = Math.max(this.peak, this.active.size);
    }
  }

  private async runKey(key: K): Promise<void> {
    // Let the caller's add() or pump() finish before the reconcile starts, so
    // that `active` already holds this run when it ends.
    await Promise.resolve();
    let result: ReconcileResult | undefined;
    let failure: unknown;
    try {
      result = await this.reconcile(key, this.abort.signal);
    } catch (err) {
      failure = err;
    }
    this.active.delete(key);
    if (!this.closing) this.settle(key, result, failure);
    this.pump();
    this.settleIdle();
  }

  private settle(key: K, result: ReconcileResult | undefined, failure: unknown): void {
    let after: number | undefined;
    if (result === undefined) {
      const n = this.failures.get(key) ?? 0;
      this.failures.set(key, n + 1);
      after = this.backoffMs(n);
      this.log('warn', 'reconcile failed; retrying', { key, failures: n + 1, retryInMs: Math.round(after), error: messageOf(failure) });
    } else {
      this.failures.delete(key);
      if (result.kind === 'requeue') after = Number.isFinite(result.afterMs) ? Math.max(0, result.afterMs) : this.baseDelayMs;
    }
    if (this.dirty.has(key)) {
      // It changed while running: run it again now, with what changed.
      this.order.push(key);
      return;
    }
    if (after !== undefined) this.addAfter(key, after);
  }

  /** client-go's per-item exponential backoff: base, 2×base, 4×base, … up to max. */
  private backoffMs(failuresBefore: number): number {
    const exact = Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** failuresBefore);
    return exact * (1 - this.jitter * this.random());
  }
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
