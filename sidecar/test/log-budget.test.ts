import { describe, expect, it } from 'vitest';
import { Logger } from '../log.ts';

describe("the sidecar's own log is bounded in bytes", () => {
  it('writes lines until the budget is spent, then counts them; the summary is always written with the count', () => {
    const out: string[] = [];
    const log = new Logger((l) => out.push(l));
    log.setBudget(1000);
    for (let i = 0; i < 100; i++) log.warn('retrying', { attempt: i, error: 'connect ECONNREFUSED 127.0.0.1:9' });
    const bytes = out.join('').length;
    // One line may cross the bound, followed by the notice.
    expect(bytes).toBeLessThan(1000 + 300);
    expect(out.at(-1)).toContain('own log budget spent');
    // The notice goes out with the line that spent the budget.
    const written = out.length;
    log.last('summary', { shipped: 5 });
    const summary = JSON.parse(out.at(-1)!);
    expect(summary).toMatchObject({ msg: 'summary', shipped: 5, log_lines_suppressed: 100 - written });
  });

  it('is unbounded unless a program sets a budget (the harvester runs for months on the same engine)', () => {
    let n = 0;
    const log = new Logger(() => n++);
    for (let i = 0; i < 10_000; i++) log.info('x'.repeat(100));
    expect(n).toBe(10_000);
    log.last('summary', {});
    expect(n).toBe(10_001);
  });
});
