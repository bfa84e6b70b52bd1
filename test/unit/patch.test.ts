import fc from 'fast-check';
import fjp from 'fast-json-patch';
import { describe, expect, it } from 'vitest';
import { applyPatch, createPatch, insertions, serializePatch, sharedValue } from '../../src/core/patch.ts';
import { inject } from '../../src/core/inject.ts';
import { decide } from '../../src/core/decide.ts';
import { defaultConfig } from '../../src/core/config.ts';
import type { Job } from '../../src/core/kube.ts';

/** What the patch must produce: the mutated object as JSON would carry it. */
const asJson = (v: unknown) => JSON.parse(JSON.stringify(v));

function roundTrip(a: Job, b: Job) {
  const ops = createPatch(a, b);
  // Serialized first, as the webhook sends it: values share structure with b.
  const wire = JSON.parse(JSON.stringify(ops));
  expect(fjp.validate(wire, structuredClone(asJson(a)))).toBeUndefined();
  expect(applyPatch(asJson(a), wire)).toEqual(asJson(b));
  return wire as Array<{ op: string; path: string; value?: unknown }>;
}

const job = (): Job => ({
  apiVersion: 'batch/v1',
  kind: 'Job',
  metadata: { name: 'j', namespace: 'team-a', annotations: { keep: 'me' } },
  spec: {
    template: {
      metadata: { labels: { a: 'b' } },
      spec: {
        restartPolicy: 'Never',
        initContainers: [{ name: 'fetch', image: 'busybox', args: ['x'] }],
        containers: [{ name: 'main', image: 'busybox' }],
        volumes: [{ name: 'work', emptyDir: {} }],
      },
    },
  },
});

describe('insertions', () => {
  const x = {};
  const y = {};
  const z = {};
  it('finds elements inserted anywhere, matched by identity', () => {
    expect(insertions([x], [z, x])).toEqual([0]);
    expect(insertions([x], [x, y, z])).toEqual([1, 2]);
    expect(insertions([x, y], [x, z, y])).toEqual([1]);
    expect(insertions([], [x])).toEqual([0]);
    expect(insertions(['a'], ['b', 'a'])).toEqual([0]);
  });
  it('refuses anything but insertions', () => {
    expect(insertions([x], [x])).toBeUndefined();
    expect(insertions([x, y], [y, x, z])).toBeUndefined();
    expect(insertions([x], [{}, {}])).toBeUndefined();
    expect(insertions([x, y], [z])).toBeUndefined();
  });
});

describe('createPatch', () => {
  it('turns an injection into adds, leaving existing containers and volumes alone', () => {
    const original = job();
    const d = decide(original, { config: defaultConfig(), namespace: { name: 'team-a' }, assumeOptedIn: true });
    if (d.action !== 'inject') throw new Error(d.reason);
    const mutated = inject({ job: original, settings: d.settings, mode: d.mode, ttlSecondsAfterFinished: d.ttlSecondsAfterFinished, config: defaultConfig(), now: 0 }).job;
    const ops = roundTrip(original, mutated);
    expect(ops.every((o) => o.op === 'add')).toBe(true);
    expect(ops.map((o) => o.path)).toContain('/spec/template/spec/initContainers/0');
    expect(ops.some((o) => o.path.startsWith('/spec/template/spec/initContainers/1') || o.path.startsWith('/spec/template/spec/volumes/0'))).toBe(false);
    expect(ops.map((o) => o.path)).toContain('/spec/template/metadata/annotations');
  });

  it('escapes keys with / and ~', () => {
    const a = job();
    const b = { ...a, metadata: { ...a.metadata, annotations: { ...a.metadata!.annotations, 'x.io/a~b': 'v' } } };
    const ops = roundTrip(a, b);
    expect(ops).toEqual([{ op: 'add', path: '/metadata/annotations/x.io~1a~0b', value: 'v' }]);
  });

  it('removes, replaces and adds into missing parents', () => {
    const a = job();
    const b = {
      ...a,
      metadata: { name: 'j', namespace: 'other', annotations: undefined },
      spec: { ...a.spec, ttlSecondsAfterFinished: 5, template: { ...a.spec!.template, metadata: { labels: { a: 'b' }, annotations: { x: 'y' } } } },
    } as Job;
    roundTrip(a, b);
  });

  it('ignores managedFields on both sides', () => {
    const a = { ...job(), metadata: { ...job().metadata, managedFields: [{ manager: 'kubectl' }] } };
    const b = { ...a, metadata: { ...a.metadata, managedFields: [{ manager: 'other' }], labels: { l: 'v' } } };
    expect(createPatch(a, b)).toEqual([{ op: 'add', path: '/metadata/labels', value: { l: 'v' } }]);
  });

  it('leaves arrays changed in place to compare', () => {
    const a = job();
    const pod = a.spec!.template!.spec!;
    const b = { ...a, spec: { ...a.spec, template: { ...a.spec!.template, spec: { ...pod, containers: [{ ...pod.containers![0]!, image: 'alpine' }], volumes: [] } } } } as Job;
    const ops = roundTrip(a, b);
    expect(ops).toContainEqual({ op: 'replace', path: '/spec/template/spec/containers/0/image', value: 'alpine' });
  });

  it('gives the target for any two JSON objects', () => {
    const obj = fc.dictionary(fc.string({ maxLength: 4 }), fc.jsonValue({ maxDepth: 3 }), { maxKeys: 5 });
    fc.assert(fc.property(obj, obj, (a, b) => void roundTrip(a as Job, b as Job)), { numRuns: 300 });
  });

  it('gives the target when the second shares structure with the first', () => {
    // Copy-on-write edits like inject's: shared subtrees, new keys, arrays with elements inserted.
    const edit = (v: unknown, choose: number[], depth = 0): unknown => {
      const c = choose[depth % choose.length]!;
      if (Array.isArray(v)) return c % 3 === 0 ? [{ new: depth }, ...v] : c % 3 === 1 ? [...v, 'tail'] : v.map((x, i) => (i === 0 ? edit(x, choose, depth + 1) : x));
      if (typeof v === 'object' && v !== null) {
        const keys = Object.keys(v);
        const out: Record<string, unknown> = { ...(v as object) };
        if (keys.length && c % 4 === 0) delete out[keys[0]!];
        else if (keys.length && c % 4 === 1) out[keys[0]!] = edit((v as Record<string, unknown>)[keys[0]!], choose, depth + 1);
        else out[`k/${depth}~`] = c;
        return out;
      }
      return c;
    };
    const obj = fc.dictionary(fc.string({ maxLength: 4 }), fc.jsonValue({ maxDepth: 4 }), { maxKeys: 6 });
    fc.assert(fc.property(obj, fc.array(fc.nat(11), { minLength: 1, maxLength: 6 }), (a, choose) => void roundTrip(a as Job, edit(a, choose) as Job)), { numRuns: 300 });
  });
});

describe('shared values', () => {
  it('are frozen all the way down', () => {
    const v = sharedValue({ a: [{ b: 1 }], c: { d: 'e' } });
    expect(Object.isFrozen(v)).toBe(true);
    expect(Object.isFrozen(v.a[0])).toBe(true);
    expect(Object.isFrozen(v.c)).toBe(true);
    expect(() => {
      (v.c as { d: string }).d = 'x';
    }).toThrow(TypeError);
  });

  it('serialize to the same JSON as JSON.stringify, shared or not, again and again', () => {
    const shared = sharedValue({ name: 'jobharvest', env: [{ name: 'A', value: 'x"y' }] });
    const ops = [
      { op: 'add', path: '/spec/template/spec/initContainers/0', value: shared },
      { op: 'add', path: '/metadata/annotations/a~1b', value: 'v' },
      { op: 'remove', path: '/x' },
      { op: 'replace', path: '/y', value: { plain: true } },
      { op: 'add', path: '/z', value: shared },
    ] as Parameters<typeof serializePatch>[0];
    expect(serializePatch(ops)).toBe(JSON.stringify(ops));
    expect(serializePatch(ops)).toBe(JSON.stringify(ops));
    expect(serializePatch([])).toBe('[]');
  });
});

describe('the injected sidecar', () => {
  const config = defaultConfig();
  const injected = (j: Job, ns: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> } = { name: 'team-a' }) => {
    const d = decide(j, { config, namespace: ns, assumeOptedIn: true });
    if (d.action !== 'inject') throw new Error(d.reason);
    return inject({ job: j, settings: d.settings, mode: d.mode, ttlSecondsAfterFinished: d.ttlSecondsAfterFinished, config, now: 0 }).job;
  };
  const sidecarOf = (j: Job) => j.spec!.template!.spec!.initContainers![0]!;

  it('is built once per distinct settings and shared, frozen', () => {
    const a = sidecarOf(injected(job()));
    const b = sidecarOf(injected({ ...job(), metadata: { name: 'other', namespace: 'team-a' } }));
    expect(b).toBe(a);
    expect(Object.isFrozen(a)).toBe(true);
    const c = sidecarOf(injected({ ...job(), metadata: { name: 'j', namespace: 'team-a', annotations: { 'jobharvest.io/sink': 'loki', 'jobharvest.io/endpoint': 'http://loki:3100' } } }));
    expect(c).not.toBe(a);
    expect(c.env).toContainEqual({ name: 'JOBHARVEST_ENDPOINT', value: 'http://loki:3100' });
  });

  it('differs where the pod decides: the token mount, the exit code; not a shared PID namespace, which has the same stop hook', () => {
    const base = sidecarOf(injected(job()));
    const j = job();
    const shared = { ...j, spec: { ...j.spec, template: { ...j.spec!.template, spec: { ...j.spec!.template!.spec, shareProcessNamespace: true } } } } as Job;
    expect(sidecarOf(injected(shared))).toBe(base);
    expect(base.lifecycle).toEqual({ preStop: { exec: { command: ['/nodejs/bin/node', '/app/sidecar.mjs', '--wait-started'] } } });
    const rules = { ...j, spec: { ...j.spec, podFailurePolicy: { rules: [{ action: 'FailJob', onExitCodes: { operator: 'In', values: [3] } }] } } } as Job;
    expect(sidecarOf(injected(rules)).env).toContainEqual({ name: 'JOBHARVEST_FAILURE_EXIT_CODE', value: '1' });
    expect(JSON.stringify(base.env)).not.toContain('JOBHARVEST_FAILURE_EXIT_CODE');
  });
});
