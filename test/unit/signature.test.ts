// What the injection signature proves (docs/harvester.md, "What it trusts"):
// the sidecar of a Job, and of each of its pods, runs the code the webhook
// rendered and reports through the path it rendered. Each case here is a way
// a tenant could have had its own numbers signed, or a change another
// admission plugin makes on a real cluster.
import type { V1Container, V1Job, V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { INJECTED_LABEL, STATUS_ANNOTATION } from '../../src/contract/harvest.ts';
import { foreignMount, imageRepository, sidecarDigest, SIGNATURE_ANNOTATION } from '../../src/contract/signature.ts';
import { review } from '../../src/core/admission.ts';
import { mutateJob } from '../../src/core/mutate.ts';
import { ownedPods, verifyInjection } from '../../harvester/trust.ts';
import { decodePatch, deps, durableConfig, job as jobFixture, optedIn, review as reviewOf } from '../support/fixtures.ts';

const KEY = Buffer.from('0123456789abcdef0123456789abcdef');

/** A Job as the webhook stores it, signed; `annotations` are the Job's own before admission. */
function injected(o: { mode?: 'node' | 'api'; annotations?: Record<string, string>; automount?: boolean } = {}): V1Job {
  const j = jobFixture('build');
  j.metadata.annotations = { ...(o.mode ? { 'jobharvest.io/mode': o.mode } : {}), ...(o.annotations ?? {}) };
  if (o.automount === false) j.spec.template.spec.automountServiceAccountToken = false;
  const r = mutateJob(j as never, { config: durableConfig(), namespace: optedIn('team-a'), signingKey: KEY, now: 0 });
  expect(r.decision.action).toBe('inject');
  return r.job as V1Job;
}

/**
 * The Job as the API server stores it: defaults filled in (the termination
 * message path and policy, the pull policy, a Secret volume's mode), and
 * every object's keys in another order than the webhook wrote them.
 */
function asStored(j: V1Job): V1Job {
  const out = structuredClone(j);
  const spec = out.spec!.template.spec!;
  for (const c of [...(spec.initContainers ?? []), ...spec.containers]) {
    c.terminationMessagePath ??= '/dev/termination-log';
    c.terminationMessagePolicy ??= 'File';
    c.imagePullPolicy ??= 'IfNotPresent';
  }
  for (const v of spec.volumes ?? []) if (v.secret) v.secret.defaultMode ??= 420;
  const reversed = (x: unknown): unknown => {
    if (Array.isArray(x)) return x.map(reversed);
    if (x === null || typeof x !== 'object') return x;
    return Object.fromEntries(Object.keys(x).reverse().map((k) => [k, reversed((x as Record<string, unknown>)[k])]));
  };
  return reversed(out) as V1Job;
}

const sidecarOf = (j: V1Job | V1Pod): V1Container => (j as V1Job).spec!.template?.spec?.initContainers?.find((c) => c.name === 'jobharvest') ?? (j as V1Pod).spec!.initContainers!.find((c) => c.name === 'jobharvest')!;

/** A pod the Job controller made of the template. */
function podOf(j: V1Job): V1Pod {
  return {
    metadata: { name: 'build-x', namespace: 'team-a', uid: 'pod-uid', ownerReferences: [{ apiVersion: 'batch/v1', kind: 'Job', name: 'build', uid: 'job-uid', controller: true }] },
    spec: structuredClone(j.spec!.template.spec!),
  };
}

describe('the injection signature covers what runs in the sidecar and where its termination message comes from', () => {
  it('a signature, status and label copied onto a hand-written Job with the rendered sidecar, but its own image, message path, env or user, do not verify', () => {
    const genuine = asStored(injected());
    expect(verifyInjection(genuine, KEY)).toMatchObject({ ok: true });
    // The tenant's own Job: a copy of what the webhook rendered, then changed.
    const forged = (change: (c: V1Container, j: V1Job) => void): V1Job => {
      const j = structuredClone(genuine);
      j.metadata = { name: 'mine', namespace: 'team-a', labels: { [INJECTED_LABEL]: 'true' }, annotations: { [STATUS_ANNOTATION]: genuine.metadata!.annotations![STATUS_ANNOTATION]!, [SIGNATURE_ANNOTATION]: genuine.metadata!.annotations![SIGNATURE_ANNOTATION]! } };
      change(sidecarOf(j), j);
      return j;
    };
    // Unchanged, the copy verifies: the signature cannot name the Job (docs/harvester.md).
    expect(verifyInjection(forged(() => {}), KEY)).toMatchObject({ ok: true });
    const cases: Array<[string, (c: V1Container, j: V1Job) => void]> = [
      ['its own image', (c) => (c.image = 'registry.tenant.example/fake-sidecar:1')],
      [
        'a termination message path on an emptyDir its main container writes',
        (c, j) => {
          c.terminationMessagePath = '/shared/report';
          c.volumeMounts!.push({ name: 'shared', mountPath: '/shared' });
          j.spec!.template.spec!.volumes!.push({ name: 'shared', emptyDir: {} });
          j.spec!.template.spec!.containers[0]!.volumeMounts = [{ name: 'shared', mountPath: '/shared' }];
        },
      ],
      ['extra env', (c) => c.env!.push({ name: 'JOBHARVEST_METRICS_PORT', value: '9090' })],
    ];
    for (const [what, change] of cases) {
      const v = verifyInjection(forged(change), KEY);
      expect(v, what).toMatchObject({ ok: false, why: expect.stringContaining('does not match this Job and its sidecar') });
    }
    // Root alone changes what the code may do, not which code runs or where it reports.
    expect(verifyInjection(forged((c) => (c.securityContext = { runAsUser: 0, runAsNonRoot: false })), KEY)).toMatchObject({ ok: true });
  });

  it('a change of any covered field of the sidecar does not verify', () => {
    const genuine = asStored(injected({ annotations: { 'jobharvest.io/tls-secret': 'sink-tls', 'jobharvest.io/auth-secret': 'sink-auth' } }));
    expect(verifyInjection(genuine, KEY)).toMatchObject({ ok: true });
    const cases: Array<[string, (c: V1Container, j: V1Job) => void]> = [
      ['image repository', (c) => (c.image = 'ghcr.io/tenant/jobharvest:0.1.0')],
      ['name', (c) => (c.name = 'jobharvest2')],
      ['command', (c) => (c.command = ['sh', '-c', 'echo'])],
      ['args', (c) => (c.args = [...(c.args ?? []), '--x'])],
      ['workingDir', (c) => (c.workingDir = '/tmp')],
      ['an env value', (c) => (c.env!.find((e) => e.name === 'JOBHARVEST_ENDPOINT')!.value = 'http://elsewhere:8080/ingest')],
      ['an env var added', (c) => c.env!.push({ name: 'NODE_OPTIONS', value: '--require /tmp/x.js' })],
      ['an env var removed', (c) => (c.env = c.env!.filter((e) => e.name !== 'JOBHARVEST_DRAIN_SECONDS'))],
      ['an env var from another Secret', (c) => (c.env!.find((e) => e.name === 'JOBHARVEST_AUTH_TOKEN')!.valueFrom!.secretKeyRef!.name = 'other')],
      ['envFrom', (c) => (c.envFrom = [{ configMapRef: { name: 'tenant-env' } }])],
      ['a mount added', (c, j) => (c.volumeMounts!.push({ name: 'x', mountPath: '/x' }), j.spec!.template.spec!.volumes!.push({ name: 'x', emptyDir: {} }))],
      ['a mount moved', (c) => (c.volumeMounts!.find((m) => m.name === 'jobharvest-state')!.mountPath = '/elsewhere')],
      ['a mount made writable', (c) => delete c.volumeMounts!.find((m) => m.name === 'jobharvest-pod-logs')!.readOnly],
      ['a mount without its subPathExpr', (c) => delete c.volumeMounts!.find((m) => m.name === 'jobharvest-pod-logs')!.subPathExpr],
      ['the state volume now a hostPath', (_c, j) => (j.spec!.template.spec!.volumes!.find((v) => v.name === 'jobharvest-state')!.emptyDir = undefined, (j.spec!.template.spec!.volumes!.find((v) => v.name === 'jobharvest-state')!.hostPath = { path: '/tmp/state' }))],
      ['the TLS volume from another Secret', (_c, j) => (j.spec!.template.spec!.volumes!.find((v) => v.name === 'jobharvest-tls')!.secret!.secretName = 'tenant-ca')],
      ['the pod logs from another host path', (_c, j) => (j.spec!.template.spec!.volumes!.find((v) => v.name === 'jobharvest-pod-logs')!.hostPath!.path = '/tmp/fake-logs')],
      ['a volume device', (c, j) => (c.volumeDevices = [{ name: 'blk', devicePath: '/dev/x' }], j.spec!.template.spec!.volumes!.push({ name: 'blk', persistentVolumeClaim: { claimName: 'b' } }))],
      ['lifecycle hooks', (c) => (c.lifecycle = { postStart: { exec: { command: ['sh', '-c', 'echo'] } } })],
      ['lifecycle hooks removed', (c) => delete c.lifecycle],
      ['livenessProbe', (c) => (c.livenessProbe = { exec: { command: ['true'] } })],
      ['readinessProbe', (c) => (c.readinessProbe = { exec: { command: ['true'] } })],
      ['startupProbe', (c) => (c.startupProbe = { exec: { command: ['true'] } })],
      ['terminationMessagePath', (c) => (c.terminationMessagePath = '/var/lib/jobharvest/report')],
      ['terminationMessagePolicy', (c) => (c.terminationMessagePolicy = 'FallbackToLogsOnError')],
      ['restartPolicy', (c) => delete c.restartPolicy],
    ];
    const names = new Set<string>();
    for (const [what, change] of cases) {
      const j = structuredClone(genuine);
      change(sidecarOf(j) ?? j.spec!.template.spec!.initContainers![0]!, j);
      expect(verifyInjection(j, KEY), what).toMatchObject({ ok: false });
      names.add(what);
    }
    expect(names.size).toBe(cases.length);
  });

  it('what other admission plugins change still verifies: API server defaults, LimitRange resources, securityContext defaults, the same repository at a digest', () => {
    for (const mode of ['node', 'api'] as const) {
      const signed = injected({ mode, automount: mode === 'api' ? false : undefined, annotations: { 'jobharvest.io/tls-secret': 'sink-tls' } });
      const cases: Array<[string, (c: V1Container) => void]> = [
        ['as stored, defaults filled in and keys reordered', () => {}],
        ['LimitRange defaults', (c) => (c.resources = { requests: { cpu: '500m', memory: '256Mi' }, limits: { cpu: '1', memory: '512Mi' } })],
        ['a policy engine\'s securityContext defaults', (c) => (c.securityContext = { ...c.securityContext, runAsUser: 10001, seccompProfile: { type: 'Localhost', localhostProfile: 'jobs.json' }, seLinuxOptions: { level: 's0:c1' } })],
        ['the tag pinned to its digest', (c) => (c.image = `${c.image}@sha256:${'b'.repeat(64)}`)],
        ['the tag replaced by a digest', (c) => (c.image = `jobharvest@sha256:${'c'.repeat(64)}`)],
        ['the registry spelled out', (c) => (c.image = 'docker.io/library/jobharvest:0.1.0')],
        ['another pull policy', (c) => (c.imagePullPolicy = 'Always')],
      ];
      for (const [what, change] of cases) {
        const j = asStored(signed);
        change(sidecarOf(j));
        expect(verifyInjection(j, KEY), `${mode}: ${what}`).toMatchObject({ ok: true });
        // And its pods, with the ServiceAccount plugin's token mount where it adds one.
        const p = podOf(j);
        if (mode === 'node') {
          sidecarOf(p).volumeMounts!.push({ name: 'kube-api-access-abcde', mountPath: '/var/run/secrets/kubernetes.io/serviceaccount', readOnly: true });
          p.spec!.volumes!.push({
            name: 'kube-api-access-abcde',
            projected: {
              defaultMode: 420,
              sources: [
                { serviceAccountToken: { expirationSeconds: 3607, path: 'token' } },
                { configMap: { name: 'kube-root-ca.crt', items: [{ key: 'ca.crt', path: 'ca.crt' }] } },
                { downwardAPI: { items: [{ fieldRef: { apiVersion: 'v1', fieldPath: 'metadata.namespace' }, path: 'namespace' }] } },
              ],
            },
          });
        }
        const v = verifyInjection(j, KEY);
        const owned = ownedPods({ ...j, metadata: { ...j.metadata, uid: 'job-uid' } }, [p], v.ok ? { name: 'jobharvest', digest: v.value.sidecarDigest } : undefined);
        expect(owned, `${mode}: ${what}, pod`).toEqual({ owned: [p], foreign: 0 });
      }
    }
  });

  it("an Indexed Job's pod (JobSet's children) still verifies with the Job controller's JOB_COMPLETION_INDEX in every container; any other form of it does not", () => {
    const j = asStored(injected({ annotations: { 'jobharvest.io/tls-secret': 'sink-tls' } }));
    const v = verifyInjection(j, KEY);
    expect(v.ok).toBe(true);
    const signed = v.ok ? { name: 'jobharvest', digest: v.value.sidecarDigest } : undefined;
    const owner = { ...j, metadata: { ...j.metadata, uid: 'job-uid' } };
    const indexed = (fieldPath: string) => {
      const p = podOf(j);
      for (const c of [...p.spec!.initContainers!, ...p.spec!.containers]) c.env = [...(c.env ?? []), { name: 'JOB_COMPLETION_INDEX', valueFrom: { fieldRef: { apiVersion: 'v1', fieldPath } } }];
      return p;
    };
    const ok = indexed("metadata.annotations['batch.kubernetes.io/job-completion-index']");
    expect(ownedPods(owner, [ok], signed)).toEqual({ owned: [ok], foreign: 0 });
    // As the Job controller of Kubernetes v1.37 writes it (found with JobSet on the real API server).
    const label = indexed("metadata.labels['batch.kubernetes.io/job-completion-index']");
    expect(ownedPods(owner, [label], signed)).toEqual({ owned: [label], foreign: 0 });
    const other = indexed("metadata.annotations['example.com/index']");
    expect(ownedPods(owner, [other], signed)).toEqual({ owned: [], foreign: 1 });
  });

  it('another container that mounts a jobharvest-* volume: the template does not verify, nor does a pod with an ephemeral container added later', () => {
    for (const volume of ['jobharvest-state', 'jobharvest-pod-logs', 'jobharvest-tls']) {
      const j = asStored(injected({ annotations: { 'jobharvest.io/tls-secret': 'sink-tls' } }));
      j.spec!.template.spec!.containers[0]!.volumeMounts = [{ name: volume, mountPath: '/peek' }];
      expect(verifyInjection(j, KEY), volume).toMatchObject({ ok: false, why: `container "main" mounts the volume "${volume}", which is jobharvest's` });
    }
    const j = asStored(injected({ mode: 'api', automount: false }));
    const v = verifyInjection(j, KEY);
    expect(v.ok).toBe(true);
    const p = podOf(j);
    p.spec!.ephemeralContainers = [{ name: 'debugger', image: 'busybox', volumeMounts: [{ name: 'jobharvest-token', mountPath: '/t' }] }];
    expect(foreignMount(p.spec)).toBe('ephemeral container "debugger" mounts the volume "jobharvest-token", which is jobharvest\'s');
    expect(ownedPods({ ...j, metadata: { ...j.metadata, uid: 'job-uid' } }, [p], v.ok ? { name: 'jobharvest', digest: v.value.sidecarDigest } : undefined)).toEqual({ owned: [], foreign: 1 });
  });

  it('the image repository: tag and digest dropped, Docker Hub spelled out, registry ports kept', () => {
    expect(imageRepository('jobharvest:0.1.0')).toBe('docker.io/library/jobharvest');
    expect(imageRepository('jobharvest')).toBe('docker.io/library/jobharvest');
    expect(imageRepository('acme/jobharvest:1@sha256:abc')).toBe('docker.io/acme/jobharvest');
    expect(imageRepository('registry.local:5000/ops/jobharvest:1')).toBe('registry.local:5000/ops/jobharvest');
    expect(imageRepository('localhost/jobharvest@sha256:abc')).toBe('localhost/jobharvest');
    expect(imageRepository('ghcr.io/ops/jobharvest')).not.toBe(imageRepository('ghcr.io/tenant/jobharvest'));
  });

  it('a pod spec without the sidecar has no digest', () => {
    expect(sidecarDigest({ containers: [{ name: 'main' }] })).toBe('');
    expect(sidecarDigest(undefined)).toBe('');
  });
});

describe('the webhook drops, on every skip path, a signature that does not verify for the template in hand', () => {
  const withKey = { ...deps(), signingKey: KEY };
  /** A tenant's Job carrying what it copied from a genuine one. */
  function copied(extra: (j: Record<string, any>) => void = () => {}): Record<string, any> {
    const genuine = injected();
    const j = jobFixture('mine');
    j.metadata.labels = { [INJECTED_LABEL]: 'true', team: 'a' };
    j.metadata.annotations = { [STATUS_ANNOTATION]: genuine.metadata!.annotations![STATUS_ANNOTATION], [SIGNATURE_ANNOTATION]: genuine.metadata!.annotations![SIGNATURE_ANNOTATION] };
    const sidecar = structuredClone(sidecarOf(genuine)) as Record<string, any>;
    sidecar.image = 'registry.tenant.example/fake-sidecar:1';
    j.spec.template.spec.initContainers = [sidecar];
    j.spec.template.spec.volumes = structuredClone(genuine.spec!.template.spec!.volumes);
    extra(j);
    return j;
  }

  const cases: Array<[string, string, Record<string, any>, Partial<typeof withKey>?]> = [
    ['already injected (status copied)', 'already-injected', copied()],
    ['a name conflict (no status, a container named jobharvest)', 'name-conflict', copied((j) => delete j.metadata.annotations[STATUS_ANNOTATION])],
    ['opted out', 'opted-out-job', copied((j) => (j.metadata.annotations['jobharvest.io/inject'] = 'false'))],
    ['a namespace not opted in', 'namespace-not-opted-in', copied(), { namespace: async (name: string) => ({ name }) }],
    ['only the label, on a Job jobharvest skips', 'opted-out-job', { ...jobFixture('plain'), metadata: { name: 'plain', namespace: 'team-a', labels: { [INJECTED_LABEL]: 'true' }, annotations: { 'jobharvest.io/inject': 'false' } } }],
  ];
  for (const [what, reason, object, over] of cases) {
    it(`${what}: skipped (${reason}), allowed, signature and label removed, and a warning says why`, async () => {
      const r = await review(reviewOf(object).request as never, { ...withKey, ...(over ?? {}) });
      expect(r.review.response.allowed).toBe(true);
      expect(r.disposition).toMatchObject({ kind: 'skipped', reason });
      const patch = decodePatch(r.review.response);
      const removed = patch.filter((op) => op.op === 'remove').map((op) => op.path);
      expect(removed).toContain('/metadata/labels/jobharvest.io~1injected');
      if (object.metadata.annotations?.[SIGNATURE_ANNOTATION]) expect(removed).toContain('/metadata/annotations/jobharvest.io~1signature');
      expect(patch.every((op) => op.op === 'remove' && op.path.startsWith('/metadata/'))).toBe(true);
      expect(r.review.response.warnings?.join('\n')).toMatch(/jobharvest.io\/signature and label jobharvest.io\/injected removed, nothing reported on this Job: (the injection signature does not match this Job and its sidecar|the injection is not signed|no injection status)/);
    });
  }

  it("the webhook's own Job on reinvocation (as the API server stored it) keeps its signature: no patch", async () => {
    const own = asStored(injected());
    const r = await review(reviewOf(own).request as never, withKey);
    expect(r.disposition).toMatchObject({ kind: 'skipped', reason: 'already-injected' });
    expect(r.review.response.patch).toBeUndefined();
    expect(r.review.response.warnings).toBeUndefined();
  });

  it('without a key (the offline CLI) nothing can be verified, so nothing is dropped', () => {
    const j = copied();
    const r = mutateJob(j as never, { config: durableConfig(), namespace: optedIn('team-a'), now: 0 });
    expect(r.decision).toMatchObject({ action: 'skip', reason: 'already-injected' });
    expect(r.job).toBe(j);
  });
});
