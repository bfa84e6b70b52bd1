// What the harvester keeps of Job pods between their going and their Job's
// record: only pods whose sidecar ended, trimmed, bounded, and let go.
import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { PodReports } from '../../harvester/pod-reports.ts';

function pod(name: string, job: string | null, terminated: boolean): V1Pod {
  return {
    metadata: {
      name,
      uid: `${name}-uid`,
      namespace: 'team-a',
      annotations: { big: 'x'.repeat(1000) },
      ...(job ? { ownerReferences: [{ apiVersion: 'batch/v1', kind: 'Job', name: 'build', uid: job, controller: true }] } : {}),
    },
    spec: {
      containers: [{ name: 'main', image: 'busybox', env: [{ name: 'BIG', value: 'y'.repeat(1000) }] }],
      initContainers: [{ name: 'jobharvest', image: 'jh', restartPolicy: 'Always' }],
    },
    status: {
      phase: terminated ? 'Failed' : 'Running',
      conditions: [
        { type: 'Ready', status: 'False' },
        { type: 'DisruptionTarget', status: 'True', reason: 'EvictionByEvictionAPI' },
      ],
      initContainerStatuses: [{ name: 'jobharvest', image: 'jh', imageID: '', ready: false, restartCount: 0, state: terminated ? { terminated: { exitCode: 0, message: '{"state":"complete"}' } } : { running: {} } }],
      containerStatuses: [{ name: 'main', image: 'busybox', imageID: '', ready: false, restartCount: 0, state: {} }],
    },
  };
}

describe('PodReports', () => {
  it('keeps a Job pod once its sidecar ended, trimmed to what reconcile reads', () => {
    const r = new PodReports('jobharvest');
    r.observe(pod('running', 'job-1', false));
    r.observe(pod('bare', null, true));
    expect(r.count).toBe(0);
    r.observe(pod('ended', 'job-1', true));
    r.observe(pod('ended', 'job-1', true));
    expect(r.count).toBe(1);
    const [kept] = r.gone('job-1', []);
    expect(kept?.metadata).not.toHaveProperty('annotations');
    expect(kept?.spec?.containers).toEqual([]);
    expect(kept?.spec?.initContainers?.map((c) => c.name)).toEqual(['jobharvest']);
    expect(kept?.status?.conditions?.map((c) => c.type)).toEqual(['DisruptionTarget']);
    expect(kept?.status?.initContainerStatuses?.[0]?.state?.terminated?.message).toBe('{"state":"complete"}');
  });

  it('gives only the pods the API no longer lists, and forgets a Job once asked', () => {
    const r = new PodReports('jobharvest');
    const a = pod('a', 'job-1', true);
    r.observe(a);
    r.observe(pod('b', 'job-1', true));
    expect(r.gone('job-1', [a]).map((p) => p.metadata?.name)).toEqual(['b']);
    expect(r.gone('job-2', [])).toEqual([]);
    r.forget('job-1');
    expect(r.count).toBe(0);
    expect(r.gone('job-1', [])).toEqual([]);
  });

  it('holds at most its bound, letting the oldest Jobs go first', () => {
    const r = new PodReports('jobharvest', 3);
    for (let i = 0; i < 5; i++) r.observe(pod(`p${i}`, `job-${i}`, true));
    expect(r.count).toBe(3);
    expect(r.gone('job-0', [])).toEqual([]);
    expect(r.gone('job-4', []).length).toBe(1);
  });
});
