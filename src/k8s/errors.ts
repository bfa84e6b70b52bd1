/** HTTP status of a client-node ApiException (or undefined for network errors). */
export function statusOf(err: unknown): number | undefined {
  const c = (err as { code?: unknown })?.code;
  return typeof c === 'number' ? c : undefined;
}

export function messageOf(err: unknown): string {
  const e = err as { message?: string; body?: unknown };
  const body = typeof e?.body === 'string' ? e.body : e?.body ? JSON.stringify(e.body) : '';
  return `${e?.message ?? String(err)}${body && !e?.message?.includes(body.slice(0, 40)) ? ` ${body.slice(0, 200)}` : ''}`;
}

/** Jittered exponential backoff: attempt 0 → ~base, doubling up to max. */
export function backoffMs(attempt: number, baseMs = 100, maxMs = 5000): number {
  const exp = Math.min(maxMs, baseMs * 2 ** attempt);
  return exp / 2 + Math.random() * (exp / 2);
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
