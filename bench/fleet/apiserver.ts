// The API server's own view of the webhook: its admission histogram, read from
// /metrics, so the webhook's latency is measured where the Job's create waits.

/** The API server's calls of the jobharvest webhook, as its histogram counts them (cumulative). */
export interface WebhookCalls {
  count: number;
  sum: number;
  /** le (seconds) -> cumulative count */
  buckets: Map<number, number>;
}

export function webhookCalls(metrics: string): WebhookCalls {
  const out: WebhookCalls = { count: 0, sum: 0, buckets: new Map() };
  const name = 'apiserver_admission_webhook_admission_duration_seconds';
  for (const line of metrics.split('\n')) {
    if (!line.startsWith(name) || !line.includes('name="jobs.jobharvest.io"')) continue;
    const value = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (line.startsWith(`${name}_count`)) out.count += value;
    else if (line.startsWith(`${name}_sum`)) out.sum += value;
    else {
      const le = /le="([^"]+)"/.exec(line)?.[1];
      if (le !== undefined) out.buckets.set(le === '+Inf' ? Infinity : Number(le), (out.buckets.get(le === '+Inf' ? Infinity : Number(le)) ?? 0) + value);
    }
  }
  return out;
}

/** The calls between two readings: how many, their mean, and the bucket bound under which 99 % fell. */
export function callsBetween(a: WebhookCalls, b: WebhookCalls): { count: number; meanMs: number; p99UpperMs: number } {
  const count = b.count - a.count;
  const bounds = [...b.buckets.keys()].sort((x, y) => x - y);
  const p99 = bounds.find((le) => (b.buckets.get(le) ?? 0) - (a.buckets.get(le) ?? 0) >= 0.99 * count);
  return { count, meanMs: count > 0 ? ((b.sum - a.sum) / count) * 1000 : NaN, p99UpperMs: (p99 ?? NaN) * 1000 };
}
