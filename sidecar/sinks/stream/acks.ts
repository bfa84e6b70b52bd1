// The acknowledgement bookkeeping the two acknowledged stream protocols share:
// forward waits for {"ack": chunk} per message, RELP for `rsp` per
// transaction number. Both pipeline a batch on one connection, settle each
// message by its key as the receiver answers, fail every unanswered one when
// the connection breaks, and give up after a timeout. What a failure does to
// the session differs (forward drops the connection on any failure, RELP keeps
// it after a refusal), so that stays with each session.
import type { Link } from './client.ts';

export type Answer = { readonly ok: true } | { readonly ok: false; readonly reason: string };

/** Messages written and not answered yet, by the key the receiver answers with. */
export class PendingAnswers<K> {
  private readonly waiting = new Map<K, (a: Answer) => void>();

  expect(key: K): Promise<Answer> {
    return new Promise<Answer>((resolve) => this.waiting.set(key, resolve));
  }

  /** Settles the message the receiver answered; an answer nobody waits for is ignored. */
  settle(key: K, answer: () => Answer): void {
    const settle = this.waiting.get(key);
    if (!settle) return;
    this.waiting.delete(key);
    settle(answer());
  }

  /** Every unanswered message fails with `why` (the connection is gone). */
  failAll(why: string): void {
    const w = [...this.waiting.values()];
    this.waiting.clear();
    for (const settle of w) settle({ ok: false, reason: why });
  }
}

/**
 * Writes a batch's frames and waits for their answers: the first failure, or
 * ok once every one came back. A write that fails calls `broken` (the
 * connection cannot be trusted any more); answers that do not all come within
 * `timeoutMs` give `late` as the reason.
 */
export async function writeAndAwait(link: Link, bytes: Buffer, answers: readonly Promise<Answer>[], timeoutMs: number, late: string, broken: (why: string) => void): Promise<Answer> {
  const failed = await link.write(bytes, timeoutMs);
  if (failed !== undefined) {
    broken(failed);
    return { ok: false, reason: failed };
  }
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<Answer>((resolve) => {
    timer = setTimeout(() => resolve({ ok: false, reason: late }), timeoutMs);
  });
  const all = Promise.all(answers).then((as) => as.find((a) => !a.ok) ?? ({ ok: true } as const));
  return Promise.race([all, timeout]).finally(() => clearTimeout(timer));
}
