import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import type { Batch } from '../delivery/batcher.ts';
import type { DeadLetter, DeadLetterEntry } from '../delivery/deadletter.ts';
import { Delivery, UNSENT_REASON } from '../delivery/delivery.ts';
import type { Sink } from '../delivery/sink.ts';
import { newStats } from '../stats.ts';
import { makeRecord } from '../../test/support/sidecar-helpers.ts';

/** Never answers; gives up only when its request is aborted. */
const hangingSink: Sink = {
  send: (_records, signal) =>
    new Promise((_resolve, reject) => {
      signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true });
    }),
};

function batch(seq: number, ...messages: string[]): Batch {
  return { seq, records: messages.map((m) => makeRecord(m)), bytes: 0, tickets: [] };
}

describe('Delivery lifecycle', () => {
  it('shutdown dead-letters what is in flight or queued, and flush waits for batches submitted after it', async () => {
    // A slow disk: each write lands 50 ms after it was asked for.
    const written: DeadLetterEntry[] = [];
    const deadLetter = {
      async write(entries: readonly DeadLetterEntry[]) {
        await sleep(50);
        written.push(...entries);
      },
    } as unknown as DeadLetter;
    const stats = newStats();
    const delivery = new Delivery(hangingSink, deadLetter, stats, { maxInFlight: 1 });
    delivery.submit(batch(1, 'in flight'));
    delivery.submit(batch(2, 'queued'));
    expect(delivery.saturated).toBe(true);

    await delivery.shutdown();
    expect(delivery.saturated).toBe(false);
    delivery.submit(batch(3, 'late one', 'late two'));
    await delivery.flush();

    expect(written.map((e) => e.record.message).sort()).toEqual(['in flight', 'late one', 'late two', 'queued']);
    expect(new Set(written.map((e) => e.reason))).toEqual(new Set([UNSENT_REASON]));
    expect(stats.linesUnsent).toBe(4);
  });
});
