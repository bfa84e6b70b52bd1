import { describe, expect, it } from 'vitest';
import { parseOptions } from '../../src/cli/logs.ts';
import { chooseRun, formatRuns, mergeRuns, runPattern } from '../../src/cli/logs/runs.ts';

const flags = { chartNamespace: 'jobharvest' };

describe('cronjob/NAME', () => {
  it('is parsed as a CronJob reference, and --run only goes with one', () => {
    for (const ref of ['cronjob/report', 'cronjobs/report', 'cj/report', 'cronjob.batch/report']) expect(parseOptions(ref, flags)).toMatchObject({ job: 'report', cronJob: true, run: undefined });
    expect(parseOptions('job/report', flags).cronJob).toBe(false);
    expect(parseOptions('cronjob/report', { ...flags, run: '2' }).run).toBe('2');
    expect(() => parseOptions('job/report', { ...flags, run: '1' })).toThrow(/--run chooses a run of a CronJob/);
    expect(() => parseOptions('cronjob/report', { ...flags, run: '0' })).toThrow(/expected a run number/);
    expect(() => parseOptions('cronjob/Report', flags)).toThrow(/expected job\/NAME or cronjob\/NAME/);
  });

  it('lists the runs of the cluster and of the log server once each, newest first by their scheduled time', () => {
    // 29400000 minutes after the epoch is 2025-11-24T16:00:00Z.
    const runs = mergeRuns(
      'report',
      [{ job: 'report-29400002', createdMs: 1 }],
      [
        { job: 'report-29400000', lines: 10, firstNs: 1_764_000_000_000_000_000n },
        { job: 'report-29400002', lines: 12 },
        { job: 'report-29400001', lines: 11 },
        // Not of the CronJob's pattern: another Job whose name begins the same way.
        { job: 'report-weekly-29400001', lines: 3 },
      ],
    );
    expect(runs.map((r) => [r.job, r.exists, r.lines])).toEqual([
      ['report-29400002', true, 12],
      ['report-29400001', false, 11],
      ['report-29400000', false, 10],
    ]);
    expect(runs[2]!.scheduledMs).toBe(Date.parse('2025-11-24T16:00:00Z'));
    expect(chooseRun(runs, '1').job).toBe('report-29400002');
    expect(chooseRun(runs, '3').job).toBe('report-29400000');
    expect(chooseRun(runs, 'report-29400001').exists).toBe(false);
    expect(() => chooseRun(runs, '4')).toThrow(/there are 3 runs/);
    const table = formatRuns('report', runs);
    expect(table.split('\n')[0]).toMatch(/^RUN\s+JOB\s+SCHEDULED\s+FIRST LINE\s+LINES\s+JOB OBJECT$/);
    expect(table).toContain('2025-11-24T16:00:00Z');
    expect(formatRuns('report', [])).toContain('no runs of cronjob/report found');
  });

  it('the pattern matches only the CronJob\'s own names, its dots and dashes literal', () => {
    const re = new RegExp(`^(?:${runPattern('a.b-c')})$`);
    expect(re.test('a.b-c-29400000')).toBe(true);
    expect(re.test('aXb-c-29400000')).toBe(false);
    expect(re.test('a.b-c-x')).toBe(false);
  });
});
