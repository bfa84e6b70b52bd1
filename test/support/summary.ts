/**
 * The sidecar's closing summary: the last JSON log line with `msg: "summary"`,
 * from a container log as text or as lines. Lines that are not JSON (the
 * kubelet's, or a truncated one) are skipped.
 */
export function summaryIn(log: string | readonly string[]): Record<string, unknown> | undefined {
  const lines = typeof log === 'string' ? log.split('\n') : log;
  for (let i = lines.length - 1; i >= 0; i--) {
    const line = lines[i]!;
    if (!line.startsWith('{')) continue;
    try {
      const e = JSON.parse(line) as Record<string, unknown>;
      if (e.msg === 'summary') return e;
    } catch {
      // not a JSON line
    }
  }
  return undefined;
}
