import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decide } from '../../src/core/decide.ts';
import { parseConfig } from '../../src/core/config.ts';
import { mutateJob } from '../../src/core/mutate.ts';
import { parseQuantity } from '../../src/contract/quantity.ts';
import { containerQos, ephemeralStorage, sizeSidecar } from '../../src/core/resources.ts';
import { durableConfig, job, optedIn } from '../support/fixtures.ts';

const owner = (apiVersion: string, kind: string, name = 'owner', controller = true) => ({ apiVersion, kind, name, uid: '00000000-0000-0000-0000-000000000001', controller });

function owned(ref: Record<string, unknown> | undefined, extra: Record<string, unknown> = {}) {
  const j = job('child', extra);
  if (ref) j.metadata.ownerReferences = [ref];
  return j;
}

const ttlOf = (j: Record<string, any>, config = durableConfig(), ns = optedIn('team-a')) => {
  const d = decide(j, { config, namespace: ns });
  if (d.action !== 'inject') throw new Error(`skipped: ${d.reason}`);
  return d;
};

describe('the TTL follows ownership', () => {
  it('a Job without a controller, or a CronJob\'s, gets the TTL', () => {
    expect(ttlOf(owned(undefined)).ttlSecondsAfterFinished).toBe(3600);
    expect(ttlOf(owned(owner('batch/v1', 'CronJob'))).ttlSecondsAfterFinished).toBe(3600);
    // An owner that is not the controller changes nothing.
    expect(ttlOf(owned(owner('jobset.x-k8s.io/v1alpha2', 'JobSet', 'js', false))).ttlSecondsAfterFinished).toBe(3600);
  });

  it('a JobSet\'s, a RayJob\'s or any other controller\'s Job gets none, with a warning that says why', () => {
    for (const [apiVersion, kind, words] of [
      ['jobset.x-k8s.io/v1alpha2', 'JobSet', 'runs again'],
      ['ray.io/v1', 'RayJob', 'stays Running'],
      ['example.com/v1', 'Pipeline', 're-create'],
      // A kind named CronJob in another group is not the CronJob controller.
      ['example.com/v1', 'CronJob', 're-create'],
    ] as const) {
      const d = ttlOf(owned(owner(apiVersion, kind, 'train')));
      expect(d.ttlSecondsAfterFinished).toBeNull();
      expect(d.ttlLeftTo).toBe(`${apiVersion.split('/')[0]}/${kind} "train"`);
      expect(d.warnings.join('\n')).toContain(words);
      const out = mutateJob(owned(owner(apiVersion, kind, 'train')), { config: durableConfig(), namespace: optedIn('team-a') });
      expect(out.job.spec?.ttlSecondsAfterFinished).toBeUndefined();
      expect(JSON.parse(out.job.metadata!.annotations!['jobharvest.io/status']!)).toMatchObject({ ttlSecondsAfterFinished: null, ttlLeftTo: `${apiVersion.split('/')[0]}/${kind} "train"` });
    }
  });

  it('the operator may list owner kinds that are safe to give a TTL', () => {
    const config = durableConfig({ ownedJobs: { ttlOwners: [{ group: 'example.com', kind: 'Pipeline' }] } });
    expect(ttlOf(owned(owner('example.com/v1', 'Pipeline')), config).ttlSecondsAfterFinished).toBe(3600);
    expect(ttlOf(owned(owner('jobset.x-k8s.io/v1alpha2', 'JobSet')), config).ttlSecondsAfterFinished).toBeNull();
  });

  it('a Job\'s own TTL is kept whoever owns it, and no warning is given then', () => {
    const j = owned(owner('jobset.x-k8s.io/v1alpha2', 'JobSet'));
    j.spec.ttlSecondsAfterFinished = 120;
    const out = mutateJob(j, { config: durableConfig(), namespace: optedIn('team-a') });
    expect(out.job.spec?.ttlSecondsAfterFinished).toBe(120);
    expect(out.warnings.join('\n')).not.toContain('leaves ttlSecondsAfterFinished');
    // A JobSet re-creates a child its own TTL deleted: kept, but said.
    expect(out.warnings.join('\n')).toContain('the Job sets ttlSecondsAfterFinished 120 and is controlled by jobset.x-k8s.io/JobSet');
  });
});

describe('opting in by the owner\'s kind', () => {
  const config = durableConfig({ ownedJobs: { injectOwners: [{ group: 'jobset.x-k8s.io', kind: 'JobSet' }] } });
  const notOptedIn = { name: 'team-b', annotations: {} };

  it('injects a listed owner\'s Job in a namespace that did not opt in, and nothing else there', () => {
    expect(decide(owned(owner('jobset.x-k8s.io/v1alpha2', 'JobSet')), { config, namespace: notOptedIn }).action).toBe('inject');
    expect(decide(owned(undefined), { config, namespace: notOptedIn }).action).toBe('skip');
    expect(decide(owned(owner('ray.io/v1', 'RayJob')), { config, namespace: notOptedIn }).action).toBe('skip');
    expect(decide(owned(owner('jobset.x-k8s.io/v1alpha2', 'JobSet')), { config: durableConfig(), namespace: notOptedIn }).action).toBe('skip');
  });

  it('a namespace that opted out, by annotation or label, stays out', () => {
    const off = { name: 'team-b', annotations: { 'jobharvest.io/inject': 'disabled' } };
    const labelled = { name: 'team-b', labels: { 'jobharvest.io/inject': 'disabled' } };
    for (const ns of [off, labelled]) expect(decide(owned(owner('jobset.x-k8s.io/v1alpha2', 'JobSet')), { config, namespace: ns }).action).toBe('skip');
  });

  it('is skipped, with a warning, where the namespace would need api mode (its log-reader binding follows namespace opt-in)', () => {
    const restricted = { name: 'team-b', labels: { 'pod-security.kubernetes.io/enforce': 'restricted' } };
    const d = decide(owned(owner('jobset.x-k8s.io/v1alpha2', 'JobSet')), { config, namespace: restricted });
    expect(d.action).toBe('skip');
    expect(d.warnings.join('\n')).toContain('api mode');
  });
});

describe('quantities', () => {
  it('parse exactly, as the API server reads them', () => {
    const n = (q: unknown) => parseQuantity(q);
    expect(n('1')).toBe(1_000_000_000n);
    expect(n('100m')).toBe(100_000_000n);
    expect(n('0.1')).toBe(n('100m'));
    expect(n('1Gi')).toBe(1024n ** 3n * 1_000_000_000n);
    expect(n('1.5Gi')).toBe(3n * 512n * 1024n ** 2n * 1_000_000_000n);
    expect(n('1e3')).toBe(n('1k'));
    expect(n('2E')).toBe(2n * 10n ** 27n);
    expect(n(2)).toBe(n('2'));
    expect(n('1n')).toBe(1n);
    expect(n('0.5n')).toBe(1n); // rounded up, as resource.Quantity does
    for (const bad of ['', 'a', '1Xi', '1.2.3', '--1', 'Gi', '.', '1 Gi', 'x'.repeat(100), null, undefined, {}, Infinity]) expect(n(bad)).toBeUndefined();
  });
});

const res = (requests?: Record<string, string>, limits?: Record<string, string>) => ({ ...(requests ? { requests } : {}), ...(limits ? { limits } : {}) });
const container = (name: string, resources: Record<string, unknown>) => ({ name, image: 'busybox', resources });

describe('the pod keeps its QoS class', () => {
  const standard = { requests: { cpu: '10m', memory: '24Mi' }, limits: { memory: '96Mi' } };
  const bounded = { cpu: '100m', memory: '96Mi' };

  it('a Guaranteed, a Burstable and a BestEffort pod each keep theirs after injection', () => {
    const shapes = {
      Guaranteed: [container('a', res({ cpu: '1', memory: '1Gi' }, { cpu: '1', memory: '1Gi' })), container('b', res(undefined, { cpu: '500m', memory: '64Mi' }))],
      Burstable: [container('a', res({ cpu: '1' }))],
      BestEffort: [container('a', {}), container('b', res({ 'ephemeral-storage': '1Gi' }))],
    };
    for (const [qos, containers] of Object.entries(shapes)) {
      const j = job('q');
      j.spec.template.spec.containers = containers;
      expect(containerQos(j.spec.template.spec)).toBe(qos);
      const out = mutateJob(j, { config: parseConfig({}), namespace: optedIn('team-a') });
      expect(containerQos(out.job.spec!.template!.spec!)).toBe(qos);
    }
  });

  it('holds for any mix of container resources (property)', () => {
    const q = fc.constantFrom(undefined, '100m', '1', '64Mi', '1Gi');
    const list = fc.record({ cpu: q, memory: q }).map((r) => Object.fromEntries(Object.entries(r).filter(([, v]) => v !== undefined)) as Record<string, string>);
    const c = fc.record({ requests: fc.option(list, { nil: undefined }), limits: fc.option(list, { nil: undefined }) });
    fc.assert(
      fc.property(fc.array(c, { minLength: 1, maxLength: 3 }), fc.array(c, { maxLength: 2 }), (mains, inits) => {
        const pod = { containers: mains.map((r, i) => container(`m${i}`, res(r.requests, r.limits))), initContainers: inits.map((r, i) => container(`i${i}`, res(r.requests, r.limits))) };
        const sized = sizeSidecar({ pod, standard, bounded });
        const after = { ...pod, initContainers: [{ name: 'jobharvest', restartPolicy: 'Always', resources: sized.resources }, ...pod.initContainers] };
        expect(containerQos(after)).toBe(containerQos(pod));
      }),
    );
  });

  it('a ResourceQuota on limits.cpu gets the sidecar a CPU limit; other keys it already has', () => {
    const pod = { containers: [container('a', res({ cpu: '1' }, { cpu: '2', memory: '1Gi' }))] };
    expect(sizeSidecar({ pod, standard, bounded, quotaKeys: ['limits.cpu', 'limits.memory', 'requests.cpu', 'pods', 'count/jobs.batch'] }).resources).toEqual({
      requests: { cpu: '10m', memory: '24Mi' },
      limits: { cpu: '100m', memory: '96Mi' },
    });
    expect(sizeSidecar({ pod, standard, bounded, quotaKeys: ['pods'] }).resources).toEqual(standard);
  });
});

describe('pod-level resources', () => {
  const standard = { requests: { cpu: '10m', memory: '24Mi' }, limits: { memory: '96Mi' } };
  const bounded = { cpu: '100m', memory: '96Mi' };
  const pod = (budget: Record<string, unknown>, ...containers: Array<Record<string, unknown>>) => ({ resources: budget, containers: containers.map((r, i) => container(`c${i}`, r)) });

  it('the sidecar requests only what the pod\'s explicit budget has room for', () => {
    const roomy = sizeSidecar({ pod: pod(res({ cpu: '1', memory: '1Gi' }, { cpu: '1', memory: '1Gi' }), res({ cpu: '500m', memory: '512Mi' })), standard, bounded });
    expect(roomy.resources).toEqual(standard);
    expect(roomy.warnings).toEqual([]);

    const full = sizeSidecar({ pod: pod(res({ cpu: '1', memory: '1Gi' }), res({ cpu: '995m', memory: '1Gi' })), standard, bounded });
    expect(full.resources).toEqual({});
    expect(full.warnings.join('\n')).toMatch(/cpu \(the containers already request nearly all.*memory \(the containers already request all/);
  });

  it('counts init containers as the scheduler does, and never sets a limit past the pod\'s', () => {
    // An init container of 1Gi: the aggregate is max(sum, init) = 1Gi, so no memory room.
    const p = { resources: res({ memory: '1Gi' }), initContainers: [container('init', res({ memory: '1Gi' }))], containers: [container('c', res({ memory: '100Mi' }))] };
    expect(sizeSidecar({ pod: p, standard, bounded }).resources).toEqual({});
    const small = sizeSidecar({ pod: pod(res({ memory: '1Gi' }, { memory: '64Mi' }), res({ memory: '10Mi' })), standard, bounded });
    expect(small.resources).toEqual({});
    expect(small.warnings.join('\n')).toContain("its limit would exceed the pod's limit of 64Mi");
  });

  it('leaves a resource whose pod-level request defaults (from the containers or the pod\'s limit) alone', () => {
    const s = sizeSidecar({ pod: pod(res(undefined, { cpu: '2', memory: '2Gi' }), {}), standard, bounded });
    expect(s.resources).toEqual({});
    expect(s.sizing).toBe('pod-level');
  });
});

describe('ephemeral storage', () => {
  it('the sidecar takes its own share where the user\'s containers set one, and nothing otherwise', () => {
    const pod = (r: { requests?: Record<string, string>; limits?: Record<string, string> }) => ({ containers: [container('main', r)] });
    expect(ephemeralStorage(pod({ limits: { 'ephemeral-storage': '100Mi' } }), '64Mi', false)).toEqual({ limits: '72Mi' });
    expect(ephemeralStorage(pod({ requests: { 'ephemeral-storage': '1Gi' }, limits: { 'ephemeral-storage': '2Gi' } }), '64Mi', true)).toEqual({ requests: '128Mi', limits: '128Mi' });
    expect(ephemeralStorage(pod({ requests: { cpu: '1' } }), '64Mi', false)).toEqual({});
    const j = job('storage');
    j.spec.template.spec.containers[0].resources = { limits: { 'ephemeral-storage': '100Mi', memory: '1Gi' } };
    const out = mutateJob(j, { config: durableConfig(), namespace: optedIn('team-a') });
    const sidecar = out.job.spec!.template!.spec!.initContainers![0] as any;
    expect(sidecar.resources.limits['ephemeral-storage']).toBe('72Mi');
    // The state volume's sizeLimit stays within that share.
    expect(out.job.spec!.template!.spec!.volumes!.find((v) => v.name === 'jobharvest-state')).toMatchObject({ emptyDir: { sizeLimit: '64Mi' } });
  });
});
