// The sink stage: at most maxInFlight batches are being delivered at once,
// each retried until it is stored, split, dead-lettered, or the drain deadline
// aborts it. A batch settles (moves its files' checkpoints) only when every
// record in it is either acknowledged or safely in the dead-letter file.
import { setTimeout as sleep } from 'node:timers/promises';
import { DEFAULT_BACKOFF, retryDelay, type BackoffOptions } from './backoff.ts';
import type { Batch } from './batcher.ts';
import type { DeadLetterEntry, DeadLetterSink } from './deadletter.ts';
import { log } from '../log.ts';
import type { LogRecord } from '../records/record.ts';
import { isRequestBuildError } from './request-error.ts';
import type { SendResult, Sink } from './sink.ts';
import type { Stats } from '../stats.ts';

export interface DeliveryOptions {
  readonly maxInFlight: number;
  readonly backoff?: BackoffOptions;
  readonly random?: () => number;
}

export const UNSENT_REASON = 'not acknowledged before the drain deadline';

export class Delivery {
  private readonly queue: Batch[] = [];
  private inFlight = 0;
  private readonly abort = new AbortController();
  private capacityWaiters: Array<() => void> = [];
  private idleWaiters: Array<() => void> = [];
  /** Batches being delivered, and after shutdown being dead-lettered. */
  private readonly running = new Set<Promise<void>>();

  constructor(
    private readonly sink: Sink,
    private readonly deadLetter: DeadLetterSink,
    private readonly stats: Stats,
    private readonly opts: DeliveryOptions,
  ) {}

  submit(b: Batch): void {
    if (this.abort.signal.aborted) {
      this.track(this.giveUp(b.records));
      return;
    }
    this.queue.push(b);
    this.pump();
  }

  /** True while a sealed batch waits for a free slot: reading should pause. */
  get saturated(): boolean {
    return this.queue.length > 0;
  }

  get inFlightCount(): number {
    return this.inFlight;
  }

  waitForCapacity(): Promise<void> {
    if (!this.saturated) return Promise.resolve();
    return new Promise((resolve) => this.capacityWaiters.push(resolve));
  }

  /**
   * Resolves once every batch submitted so far is settled: acknowledged,
   * rejected or, after shutdown, in the dead-letter file.
   */
  flush(): Promise<void> {
    if (this.idle) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /**
   * Drain deadline: abort requests and backoff waits. Records not yet
   * acknowledged go to the dead-letter file and are counted as unsent, and so
   * do those of any batch submitted afterwards. Resolves once the batches
   * that were queued or in flight are written there.
   */
  async shutdown(): Promise<void> {
    this.abort.abort(new Error('drain deadline'));
    const queued = this.queue.splice(0);
    for (const b of queued) await this.giveUp(b.records);
    await Promise.allSettled([...this.running]);
    this.notify();
  }

  private get idle(): boolean {
    return this.queue.length === 0 && this.running.size === 0;
  }

  private track(p: Promise<void>): void {
    const tracked = p.finally(() => {
      this.running.delete(tracked);
      this.notify();
    });
    this.running.add(tracked);
  }

  private pump(): void {
    while (this.inFlight < this.opts.maxInFlight && this.queue.length > 0) {
      const b = this.queue.shift()!;
      this.inFlight++;
      this.track(
        this.run(b).finally(() => {
          this.inFlight--;
          this.pump();
        }),
      );
    }
    this.notify();
  }

  private notify(): void {
    if (!this.saturated && this.capacityWaiters.length > 0) {
      const w = this.capacityWaiters;
      this.capacityWaiters = [];
      for (const f of w) f();
    }
    if (this.idle && this.idleWaiters.length > 0) {
      const w = this.idleWaiters;
      this.idleWaiters = [];
      for (const f of w) f();
    }
  }

  private async run(b: Batch): Promise<void> {
    let unsent: readonly LogRecord[];
    try {
      unsent = await this.deliver(b.records);
    } catch (err) {
      // Only the dead-letter write can throw here; without it the records are not safe.
      log.error('delivery failed unexpectedly', { error: err, records: b.records.length });
      unsent = b.records;
    }
    if (unsent.length > 0) {
      await this.giveUp(unsent);
      return;
    }
    for (const t of b.tickets) t.progress.settle(t);
  }

  private async giveUp(records: readonly LogRecord[]): Promise<void> {
    this.stats.linesUnsent += lineCount(records);
    try {
      await this.deadLetter.write(records.map((record) => ({ record, reason: UNSENT_REASON })));
    } catch (err) {
      log.error('could not write unsent records to the dead-letter file', { error: err, records: records.length });
    }
  }

  /** Returns the records that could not be settled because delivery was aborted. */
  private async deliver(records: readonly LogRecord[]): Promise<readonly LogRecord[]> {
    const signal = this.abort.signal;
    let pending = records;
    let attempt = 0;
    for (;;) {
      if (signal.aborted) return pending;
      let res: SendResult;
      this.stats.requests++;
      try {
        res = await this.sink.send(pending, signal);
      } catch (err) {
        res = isRequestBuildError(err) ? { kind: 'fail', reason: err.message } : { kind: 'retry', reason: err instanceof Error ? err.message : String(err) };
      }
      if (signal.aborted && res.kind !== 'ok') return pending;
      switch (res.kind) {
        case 'ok':
          this.shipped(pending);
          return [];
        case 'fail':
          log.warn('batch rejected, dead-lettering it', { reason: res.reason, status: res.status, records: pending.length });
          await this.reject(pending.map((record) => ({ record, reason: res.reason, status: res.status })));
          return [];
        case 'split': {
          if (pending.length === 1) {
            await this.reject([{ record: pending[0]!, reason: `too large for the server even alone: ${res.reason}`, status: 413 }]);
            return [];
          }
          const mid = Math.ceil(pending.length / 2);
          log.debug('splitting batch', { records: pending.length });
          const left = await this.deliver(pending.slice(0, mid));
          const right = await this.deliver(pending.slice(mid));
          return left.length + right.length === 0 ? [] : [...left, ...right];
        }
        case 'partial': {
          const done = pending.length - res.retry.length - res.failed.length;
          if (done > 0) {
            const retrySet = new Set(res.retry);
            const failedSet = new Set(res.failed.map((f) => f.record));
            this.shipped(pending.filter((r) => !retrySet.has(r) && !failedSet.has(r)));
          }
          if (res.failed.length > 0) {
            log.warn('server rejected some records, dead-lettering them', { rejected: res.failed.length, reason: res.failed[0]!.reason });
            await this.reject(res.failed);
          }
          if (res.retry.length === 0) return [];
          pending = res.retry;
          if (!(await this.backoff(++attempt, res.afterMs, `${res.retry.length} records to retry`))) return pending;
          continue;
        }
        case 'retry':
          if (!(await this.backoff(++attempt, res.afterMs, res.reason, res.status))) return pending;
          continue;
      }
    }
  }

  private async backoff(attempt: number, afterMs: number | undefined, reason: string, status?: number): Promise<boolean> {
    this.stats.retries++;
    const delay = retryDelay(attempt, afterMs, this.opts.backoff ?? DEFAULT_BACKOFF, this.opts.random);
    if (attempt === 1 || attempt % 10 === 0) log.warn('retrying batch', { attempt, delayMs: delay, reason, status });
    try {
      await sleep(delay, undefined, { signal: this.abort.signal });
      return true;
    } catch {
      return false;
    }
  }

  private shipped(records: readonly LogRecord[]): void {
    let bytes = 0;
    let lines = 0;
    // Lines, not records: a joined multiline record carries several, and lines_read counts them one by one.
    for (const r of records) {
      bytes += r.size;
      lines += r.lines ?? 1;
    }
    this.stats.linesShipped += lines;
    this.stats.bytesShipped += bytes;
  }

  private async reject(entries: readonly DeadLetterEntry[]): Promise<void> {
    await this.deadLetter.write(entries);
    this.stats.linesDeadLettered += lineCount(entries.map((e) => e.record));
  }
}

/** Log lines in these records: a joined multiline record holds several. */
function lineCount(records: readonly LogRecord[]): number {
  let n = 0;
  for (const r of records) n += r.lines ?? 1;
  return n;
}
