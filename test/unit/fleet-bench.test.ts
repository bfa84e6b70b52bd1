/**
 * bench:fleet's own arithmetic: who made which API request (the audit log),
 * which Job a request is about, what the API server's webhook histogram says
 * between two readings, and the etcd key range of a prefix. The bench's goals
 * rest on these, so they are checked here on fixed inputs.
 */
import { describe, expect, it } from 'vitest';
import { auditPolicy, countByRequest, jobOfRequest, parseAuditLog } from '../../bench/fleet/audit.ts';
import { callsBetween, webhookCalls } from '../../bench/fleet/apiserver.ts';
import { prefixEnd } from '../../bench/fleet/etcd.ts';

const jobs = new Set(['j1', 'j12', 'ix-jobharvest']);
const isJob = (n: string) => jobs.has(n);

describe('bench:fleet audit log', () => {
  it('names the Job of a request: the Job, its pods (Indexed too), the Events about it', () => {
    expect(jobOfRequest('jobs', 'j12', undefined, isJob)).toBe('j12');
    expect(jobOfRequest('jobs/status', 'j1', undefined, isJob)).toBe('j1');
    expect(jobOfRequest('pods', 'j12-x7k2q', undefined, isJob)).toBe('j12');
    expect(jobOfRequest('pods/log', 'ix-jobharvest-1999-abcde', undefined, isJob)).toBe('ix-jobharvest');
    expect(jobOfRequest('events', undefined, 'j1', isJob)).toBe('j1');
    expect(jobOfRequest('pods', 'other-abcde', undefined, isJob)).toBeUndefined();
    expect(jobOfRequest('leases', 'j1', undefined, isJob)).toBeUndefined();
  });

  it('counts completed requests only, by user, verb and resource, and skips a cut last line', () => {
    const line = (o: object) => JSON.stringify(o);
    const user = { username: 'system:serviceaccount:jobharvest:h' };
    const text = [
      line({ stage: 'ResponseComplete', verb: 'patch', user, objectRef: { resource: 'jobs', namespace: 'a', name: 'j1' }, stageTimestamp: '2026-12-05T01:00:00.000000Z', responseStatus: { code: 200 } }),
      line({ stage: 'ResponseComplete', verb: 'create', user, objectRef: { resource: 'events', namespace: 'a' }, requestObject: { involvedObject: { name: 'j1' } }, stageTimestamp: '2026-12-05T01:00:01Z', responseStatus: { code: 201 } }),
      line({ stage: 'ResponseComplete', verb: 'get', user, objectRef: { resource: 'pods', subresource: 'log', namespace: 'a', name: 'j12-abcde' }, stageTimestamp: '2026-12-05T01:00:02Z' }),
      line({ stage: 'ResponseStarted', verb: 'watch', user, objectRef: { resource: 'pods' } }),
      '{"stage":"ResponseComplete","verb":"pa',
    ].join('\n');
    const events = parseAuditLog(text, isJob);
    expect(events.map((e) => [e.verb, e.resource, e.job, e.code])).toEqual([
      ['patch', 'jobs', 'j1', 200],
      ['create', 'events', 'j1', 201],
      ['get', 'pods/log', 'j12', 0],
    ]);
    expect(events[1]!.at).toBe(Date.parse('2026-12-05T01:00:01Z'));
    expect(countByRequest([...events, events[0]!])).toEqual([
      ['patch jobs', 2],
      ['create events', 1],
      ['get pods/log', 1],
    ]);
  });

  it('logs only the named users, with the bodies of the Events they create', () => {
    const p = auditPolicy(['u1', 'u2']) as { rules: Array<{ level: string; users?: string[] }> };
    expect(p.rules.map((r) => r.level)).toEqual(['Request', 'Metadata', 'None']);
    expect(p.rules[0]!.users).toEqual(['u1', 'u2']);
    expect(p.rules[2]!.users).toBeUndefined();
  });
});

describe('bench:fleet API server histogram', () => {
  const metrics = (count: number, sum: number, b: Record<string, number>) =>
    [
      '# TYPE apiserver_admission_webhook_admission_duration_seconds histogram',
      ...Object.entries(b).map(([le, n]) => `apiserver_admission_webhook_admission_duration_seconds_bucket{name="jobs.jobharvest.io",operation="CREATE",rejected="false",type="admit",le="${le}"} ${n}`),
      `apiserver_admission_webhook_admission_duration_seconds_sum{name="jobs.jobharvest.io",operation="CREATE",rejected="false",type="admit"} ${sum}`,
      `apiserver_admission_webhook_admission_duration_seconds_count{name="jobs.jobharvest.io",operation="CREATE",rejected="false",type="admit"} ${count}`,
      'apiserver_admission_webhook_admission_duration_seconds_count{name="other.example.com",operation="CREATE",rejected="false",type="admit"} 999',
    ].join('\n');

  it('takes the calls between two readings: count, mean, and the bucket 99 % fall under', () => {
    const a = webhookCalls(metrics(10, 0.1, { '0.005': 5, '0.025': 10, '0.1': 10, '+Inf': 10 }));
    const b = webhookCalls(metrics(110, 2.1, { '0.005': 5, '0.025': 60, '0.1': 109, '+Inf': 110 }));
    expect(a.count).toBe(10);
    const c = callsBetween(a, b);
    expect(c.count).toBe(100);
    expect(c.meanMs).toBeCloseTo(20, 6);
    // 99 of the 100 new calls are under 0.1 s: the bound is 100 ms.
    expect(c.p99UpperMs).toBe(100);
  });
});

describe('bench:fleet etcd', () => {
  it('ends a prefix range just past every key that starts with it', () => {
    expect(prefixEnd('/registry/jobs/jh-0/')).toBe('/registry/jobs/jh-00');
    expect('/registry/jobs/jh-0/zzz' < prefixEnd('/registry/jobs/jh-0/')).toBe(true);
    expect('/registry/jobs/jh-00' < prefixEnd('/registry/jobs/jh-0/')).toBe(false);
  });
});
