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
