import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { parseDelivery } from '../../src/contract/harvest.ts';
import { PURPOSE, checkSignedJson, keyFromText, signedJson } from '../../src/contract/signature.ts';
import { podUsage, usageOf } from '../usage.ts';

const KEY = keyFromText('0123456789abcdef0123456789abcdef');

function pod(o: { cpu?: string; memory?: string; start?: string; end?: string; running?: boolean; sidecarCpu?: string; initCpu?: string; podCpu?: string; overheadCpu?: string }): V1Pod {
  const start = o.start ?? '2026-01-01T00:00:00Z';
  const end = o.end ?? '2026-01-01T00:01:40Z';
  return {
    spec: {
      ...(o.podCpu ? { resources: { requests: { cpu: o.podCpu } } } : {}),
      ...(o.overheadCpu ? { overhead: { cpu: o.overheadCpu } } : {}),
      initContainers: [
        { name: 'jobharvest', restartPolicy: 'Always', resources: { requests: { cpu: o.sidecarCpu ?? '10m', memory: '32Mi' } } },
        ...(o.initCpu ? [{ name: 'setup', resources: { requests: { cpu: o.initCpu } } }] : []),
      ],
      containers: [{ name: 'main', resources: { requests: { ...(o.cpu ? { cpu: o.cpu } : {}), ...(o.memory ? { memory: o.memory } : {}) } } }],
    },
    status: {
      phase: 'Succeeded',
      startTime: new Date(start),
      initContainerStatuses: [{ name: 'jobharvest', ready: false, restartCount: 0, image: 'x', imageID: '', state: { terminated: { exitCode: 0, finishedAt: new Date(end) } } }],
      containerStatuses: [
        { name: 'main', ready: false, restartCount: 0, image: 'x', imageID: '', state: o.running ? { running: {} } : { terminated: { exitCode: 0, finishedAt: new Date('2026-01-01T00:01:30Z') } } },
      ],
    },
  } as V1Pod;
}

describe('the delivery record: usage', () => {
  it('counts what the scheduler counts: containers and sidecars summed, a bigger init container instead, pod-level requests, overhead', () => {
    expect(podUsage(pod({ cpu: '500m', memory: '1Gi' }))).toEqual({ cpuNano: 510_000_000n, memoryNano: (2n ** 30n + 32n * 2n ** 20n) * 1_000_000_000n, runMs: 100_000 });
    expect(podUsage(pod({ cpu: '500m', initCpu: '2' }))!.cpuNano).toBe(2_010_000_000n);
    expect(podUsage(pod({ cpu: '500m', podCpu: '3' }))!.cpuNano).toBe(3_000_000_000n);
    expect(podUsage(pod({ cpu: '500m', overheadCpu: '250m' }))!.cpuNano).toBe(760_000_000n);
  });

  it('runs from the pod start to the end of its last container, the sidecar included; a pod still running or never started is not measured', () => {
    expect(podUsage(pod({ cpu: '1', end: '2026-01-01T00:02:00Z' }))!.runMs).toBe(120_000);
    expect(podUsage(pod({ cpu: '1', running: true }))).toBeUndefined();
    const never = pod({ cpu: '1' });
    delete never.status!.startTime;
    expect(podUsage(never)).toBeUndefined();
    expect(podUsage(pod({ cpu: 'lots' }))).toBeUndefined();
  });

  it('sums run time and request × time over the pods measured, the request the largest pod asked for', () => {
    // 100 s at 1 core and 1 GiB, then 90 s (its main container ends after its sidecar's 50 s) at half of each.
    const u = usageOf([pod({ cpu: '990m', memory: '992Mi' }), pod({ cpu: '490m', memory: '480Mi', end: '2026-01-01T00:00:50Z' }), pod({ cpu: '1', running: true })]);
    expect(u).toEqual({ pods: 2, cpu_request_millicores: 1000, memory_request_bytes: 1024 * 2 ** 20, run_seconds: 190, cpu_core_seconds: 145, memory_gib_seconds: 145 });
    expect(usageOf([pod({ cpu: '1', running: true })])).toBeUndefined();
  });

  it('a record with usage is signed over it, and a record written before usage existed still verifies', () => {
    const uid = 'u-1';
    const old = signedJson(KEY, PURPOSE.delivery, uid, { sink: 'loki', pods: 1, shipped: 5, lost: 0, unaccounted: 0 });
    expect(checkSignedJson(KEY, PURPOSE.delivery, uid, old)).toMatchObject({ check: { ok: true } });
    const withUsage = signedJson(KEY, PURPOSE.delivery, uid, { sink: 'loki', pods: 1, shipped: 5, lost: 0, unaccounted: 0, usage: usageOf([pod({ cpu: '1' })]) });
    const r = checkSignedJson(KEY, PURPOSE.delivery, uid, withUsage);
    expect(r).toMatchObject({ check: { ok: true } });
    expect(parseDelivery(r.value)?.usage).toEqual({ pods: 1, cpu_request_millicores: 1010, memory_request_bytes: 32 * 2 ** 20, run_seconds: 100, cpu_core_seconds: 101, memory_gib_seconds: 3.125 });
    const raised = withUsage.replace('"cpu_request_millicores":1010', '"cpu_request_millicores":10');
    expect(checkSignedJson(KEY, PURPOSE.delivery, uid, raised)).toMatchObject({ check: { ok: false } });
  });

  it('parseDelivery refuses counts that are not non-negative whole numbers', () => {
    expect(parseDelivery({ sink: 'loki', pods: 1, shipped: -1, lost: 0, unaccounted: 0 })).toBeUndefined();
    expect(parseDelivery({ sink: 'loki', pods: 1, shipped: 1, lost: 0.5, unaccounted: 0 })).toBeUndefined();
    expect(parseDelivery({ sink: 'loki', pods: 1, shipped: 1, lost: 0, unaccounted: 0, usage: { pods: 1 } })).toBeUndefined();
    expect(parseDelivery({ sink: 'loki', pods: 1, shipped: 1, lost: 0, unaccounted: 0 })).toEqual({ sink: 'loki', pods: 1, shipped: 1, lost: 0, unaccounted: 0 });
  });
});
