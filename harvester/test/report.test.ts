import type { V1Job, V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { encodeTermination, type TerminationCounts } from '../../src/contract/termination.ts';
import { deliveryEvent, deliveryOf, jobFinished, needsHarvest, podOutcome, sidecarOutcome } from '../report.ts';

const base: TerminationCounts = { state: 'complete', mode: 'node', sink: 'loki', shipped: 2000, unsent: 0, dead_lettered: 0 };

function pod(name: string, phase: string, sidecar: Record<string, unknown> | undefined): V1Pod {
  return {
    metadata: { name, uid: `uid-${name}` },
    status: {
      phase,
      initContainerStatuses: sidecar ? [{ name: 'jobharvest', image: 'x', imageID: '', ready: false, restartCount: 0, ...sidecar }] : [],
      containerStatuses: [{ name: 'main', image: 'x', imageID: '', ready: false, restartCount: 0, state: { terminated: { exitCode: 0 } } }],
    },
  } as V1Pod;
}
const terminated = (message: string | undefined, exitCode = 0) => ({ state: { terminated: { exitCode, ...(message !== undefined ? { message } : {}) } } });

describe('sidecar outcome from the pod status', () => {
  it('reads the termination message of an exited sidecar', () => {
    const o = sidecarOutcome(pod('a', 'Succeeded', terminated(encodeTermination(base, [], ['main/0']))), 'jobharvest');
    expect(o).toMatchObject({ kind: 'reported', exitCode: 0, message: { state: 'complete', shipped: 2000 } });
    expect(needsHarvest(o)).toBe(false);
  });

  it('a sidecar that is still running has nothing to report yet', () => {
    const o = sidecarOutcome(pod('a', 'Running', { state: { running: {} } }), 'jobharvest');
    expect(o.kind).toBe('running');
    expect(needsHarvest(o)).toBe(false);
  });

  it('SIGKILL or OOM without a message, a snapshot left by a kill, unsent lines and a sidecar that never ran all need a harvest', () => {
    const silent = sidecarOutcome(pod('a', 'Succeeded', terminated(undefined, 137)), 'jobharvest');
    expect(silent).toEqual({ kind: 'silent', exitCode: 137, reason: undefined });
    const snapshot = sidecarOutcome(pod('a', 'Succeeded', terminated(encodeTermination({ ...base, state: 'running', shipped: 500 }, [['main', 0, '2024-01-01T00:00:01Z', 1]], []), 137)), 'jobharvest');
    const unsent = sidecarOutcome(pod('a', 'Succeeded', terminated(encodeTermination({ ...base, state: 'incomplete', shipped: 200, unsent: 300 }, [['main', 0, null, 0]], []), 3)), 'jobharvest');
    const never = sidecarOutcome(pod('a', 'Failed', undefined), 'jobharvest');
    const waitingOnly = sidecarOutcome(pod('a', 'Failed', { state: { waiting: { reason: 'PodInitializing' } } }), 'jobharvest');
    expect(never.kind).toBe('never-ran');
    expect(waitingOnly.kind).toBe('never-ran');
    for (const o of [silent, snapshot, unsent, never]) expect(needsHarvest(o), JSON.stringify(o)).toBe(true);
  });

  it('dead-lettered lines alone are lost, not harvested (the server refused them for good)', () => {
    const o = sidecarOutcome(pod('a', 'Succeeded', terminated(encodeTermination({ ...base, state: 'incomplete', dead_lettered: 4 }, [], ['main/0']), 3)), 'jobharvest');
    expect(needsHarvest(o)).toBe(false);
    expect(deliveryOf('loki', [{ pod: 'a', uid: 'u', sidecar: o }])).toMatchObject({ shipped: 2000, lost: 4, unaccounted: 0 });
  });

  it('a text that is not ours (e.g. a crash message) counts as no message', () => {
    expect(sidecarOutcome(pod('a', 'Succeeded', terminated('Error: boom', 1)), 'jobharvest').kind).toBe('silent');
  });
});

describe('delivery of a Job', () => {
  it('adds up the pods: shipped, lost (unsent + dead-lettered) and pods without a report', () => {
    const pods = [
      podOutcome(pod('a', 'Succeeded', terminated(encodeTermination(base, [], ['main/0']))), 'jobharvest'),
      podOutcome(pod('b', 'Failed', terminated(encodeTermination({ ...base, state: 'incomplete', shipped: 200, unsent: 300, dead_lettered: 1 }, [], []), 3)), 'jobharvest'),
      podOutcome(pod('c', 'Succeeded', terminated(encodeTermination({ ...base, state: 'running', shipped: 50 }, [], []), 137)), 'jobharvest'),
      podOutcome(pod('d', 'Succeeded', terminated(undefined, 137)), 'jobharvest'),
    ];
    const d = deliveryOf('loki', pods);
    expect(d).toEqual({ sink: 'loki', pods: 4, shipped: 2250, lost: 301, unaccounted: 2 });
    expect(deliveryEvent(d)).toEqual({
      type: 'Warning',
      reason: 'LogsLost',
      message: '2250 lines from 4 pods shipped to loki; 301 lines lost, 2 pods without a delivery report (lines may be lost)',
    });
  });

  it('everything delivered: one Normal LogsShipped Event', () => {
    const d = deliveryOf('loki', [podOutcome(pod('a', 'Succeeded', terminated(encodeTermination(base, [], ['main/0']))), 'jobharvest')]);
    expect(deliveryEvent(d)).toEqual({ type: 'Normal', reason: 'LogsShipped', message: '2000 lines from 1 pod shipped to loki' });
    expect(deliveryEvent({ ...d, shipped: 1, harvested: 1 }).message).toBe('1 line from 1 pod shipped to loki (1 by the harvester)');
  });

  it('resume gaps in a sidecar report make a warning that lines may have been lost to a rotation, with the count', () => {
    const pods = [
      podOutcome(pod('a', 'Succeeded', terminated(encodeTermination({ ...base, state: 'incomplete', mode: 'api', resume_gaps: 2 }, [], ['main/0']), 3)), 'jobharvest'),
      podOutcome(pod('b', 'Succeeded', terminated(encodeTermination({ ...base, state: 'incomplete', mode: 'api', resume_gaps: 1 }, [], ['main/0']), 3)), 'jobharvest'),
    ];
    const d = deliveryOf('loki', pods);
    expect(d).toEqual({ sink: 'loki', pods: 2, shipped: 4000, lost: 0, unaccounted: 0, resume_gaps: 3 });
    expect(deliveryEvent(d)).toEqual({
      type: 'Warning',
      reason: 'LogsLost',
      message: '4000 lines from 2 pods shipped to loki; 3 resume gaps (lines may have been lost to a log rotation while the log stream was cut)',
    });
    // pods/log does not serve rotated files: a harvest could not get those lines back.
    for (const p of pods) expect(needsHarvest(p.sidecar)).toBe(false);
  });

  it('an older sidecar without resume gaps in its message still reports everything shipped', () => {
    const older = '{"v":1,"state":"complete","mode":"api","sink":"loki","shipped":7,"unsent":0,"dead_lettered":0,"runs":[],"done":["main/0"]}';
    const d = deliveryOf('loki', [podOutcome(pod('a', 'Succeeded', terminated(older)), 'jobharvest')]);
    expect(d).toEqual({ sink: 'loki', pods: 1, shipped: 7, lost: 0, unaccounted: 0 });
    expect(deliveryEvent(d)).toEqual({ type: 'Normal', reason: 'LogsShipped', message: '7 lines from 1 pod shipped to loki' });
  });

  it('a Job is finished once Complete or Failed is True', () => {
    const job = (type: string, status: string): V1Job => ({ status: { conditions: [{ type, status }] } }) as V1Job;
    expect(jobFinished(job('Complete', 'True'))).toBe(true);
    expect(jobFinished(job('Failed', 'True'))).toBe(true);
    expect(jobFinished(job('Complete', 'False'))).toBe(false);
    expect(jobFinished(job('Suspended', 'True'))).toBe(false);
    expect(jobFinished({} as V1Job)).toBe(false);
  });
});
