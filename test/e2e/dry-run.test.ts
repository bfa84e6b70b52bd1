/**
 * A patch the API server refuses is a blocked Job. For every golden input and
 * for generated Job shapes, the unpatched object and its injected form (the
 * core the webhook and the CLI share, through injectManifests) are both
 * created with dryRun=All on the real API server, which runs its defaulting,
 * validation and admission on them and stores nothing. Required: whatever
 * the API server accepts unpatched, it accepts patched.
 */
import type { KubernetesObject } from '@kubernetes/client-node';
import fc from 'fast-check';
import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/cli/options.ts';
import { injectManifests, parseManifests } from '../../src/cli/manifests.ts';
import type { Config } from '../../src/core/config.ts';
import { createTestNamespace, useCluster } from '../harness/cluster/client.ts';
import { goldenCases } from '../golden/cases.ts';

const cluster = useCluster();
let ns = '';

beforeAll(async () => {
  // Not opted in and not labelled: no webhook of another test file is called for it.
  ns = await createTestNamespace(cluster.core, 'dry-run');
});

type Obj = KubernetesObject & Record<string, unknown>;
type Verdict = { accepted: true } | { accepted: false; message: string };

async function dryRun(obj: Obj): Promise<Verdict> {
  const body = structuredClone(obj);
  body.metadata = { ...body.metadata, namespace: ns };
  try {
    await cluster.objects.create(body, undefined, 'All');
    return { accepted: true };
  } catch (err) {
    const e = err as { code?: number; body?: unknown; message?: string };
    // Only a refusal of the object counts; anything else (a broken connection) fails the test.
    if (e.code !== 422 && e.code !== 400 && e.code !== 413) throw err;
    let message = e.message ?? String(err);
    try {
      message = (JSON.parse(String(e.body)) as { message?: string }).message ?? message;
    } catch {
      // The body was not a Status; the error's own message stands.
    }
    return { accepted: false, message };
  }
}

/** The objects the API server would be sent: Lists are sent item by item. */
function sendable(o: unknown): Obj[] {
  const obj = o as Obj;
  if (typeof obj?.kind === 'string' && obj.kind.endsWith('List') && Array.isArray(obj.items)) return obj.items.flatMap(sendable);
  return obj?.kind === 'Job' || obj?.kind === 'CronJob' ? [obj] : [];
}

interface Pair {
  ref: string;
  before: Obj;
  after: Obj;
}

function pairs(ref: string, docs: unknown[], config: Config): Pair[] {
  const { objects } = injectManifests(docs, config);
  const before = docs.flatMap(sendable);
  const after = objects.flatMap(sendable);
  expect(after.length, `${ref}: objects in and out`).toBe(before.length);
  return before.map((b, i) => ({ ref: `${ref}#${i} ${b.kind} ${b.metadata?.name ?? b.metadata?.generateName ?? ''}`, before: b, after: after[i]! }));
}

interface Outcome extends Pair {
  unpatched: Verdict;
  patched: Verdict;
}

async function judge(p: Pair): Promise<Outcome> {
  return { ...p, unpatched: await dryRun(p.before), patched: await dryRun(p.after) };
}

/** Accepted unpatched but refused patched: a Job jobharvest would block. */
const blocked = (o: Outcome) => o.unpatched.accepted && !o.patched.accepted;
const explain = (o: Outcome) => `${o.ref}: ${o.patched.accepted ? '' : o.patched.message}`;

describe('API server dry run of the golden inputs', () => {
  const { cases } = goldenCases();
  it.each(cases.map((c) => [c.name, c] as const))('%s: accepted unpatched ⇒ accepted patched', async (_name, c) => {
    const config = loadConfig(c.flags);
    const docs = parseManifests(readFileSync(c.input, 'utf8'), c.input);
    const outcomes = await Promise.all(pairs(c.name, docs, config).map(judge));
    expect(outcomes.length).toBeGreaterThan(0);
    expect(outcomes.filter(blocked).map(explain)).toEqual([]);
  });

  it('accepts every golden input unpatched (the inputs are real Jobs, so the check above is not vacuous)', async () => {
    const refused: string[] = [];
    for (const c of goldenCases().cases) {
      for (const p of pairs(c.name, parseManifests(readFileSync(c.input, 'utf8'), c.input), loadConfig(c.flags))) {
        const v = await dryRun(p.before);
        if (!v.accepted) refused.push(`${p.ref}: ${v.message}`);
      }
    }
    expect(refused).toEqual([]);
  });
});

// ---------------------------------------------------------------------------
// Generated Job shapes. Mostly valid, so that most are accepted unpatched, with
// the edges that patches run into: Windows pods, podFailurePolicy, managedBy,
// annotations at the 256 KiB limit, user namespaces, 63-character names,
// names jobharvest uses itself, grace periods, no token automount.
// ---------------------------------------------------------------------------

const ALNUM = [...'abcdefghijklmnopqrstuvwxyz0123456789'];
/** A DNS label of min..max characters (past 63 it is too long for the API server). */
const label = (min: number, max: number) =>
  fc.integer({ min, max }).chain((n) => fc.string({ unit: fc.constantFrom(...ALNUM), minLength: n, maxLength: n }).map((s) => `j${s.slice(1)}`));
const ANNOTATION_LIMIT = 256 * 1024;

/** Annotations whose keys and values total about `size` bytes (the API server's limit counts both). */
function annotationsOf(size: number): Record<string, string> {
  if (size === 0) return {};
  const key = 'example.com/blob';
  return { [key]: 'x'.repeat(Math.max(1, size - key.length)) };
}

const annotationSize = fc.oneof(
  { weight: 4, arbitrary: fc.constant(0) },
  { weight: 2, arbitrary: fc.integer({ min: 10, max: 4096 }) },
  // Within a few hundred bytes of the limit, on both sides of it: what jobharvest adds can cross it.
  { weight: 2, arbitrary: fc.integer({ min: ANNOTATION_LIMIT - 300, max: ANNOTATION_LIMIT + 20 }) },
);

const containerName = fc.constantFrom('main', 'worker', 'app');
const command = fc.constantFrom(['sh', '-c', 'echo hi'], ['true']);

const shape = fc.record({
  // Mostly valid; past 56 characters an Indexed Job's pod names, past 63 the job-name label, are too long.
  name: fc.oneof({ weight: 6, arbitrary: label(1, 20) }, { weight: 3, arbitrary: label(50, 63) }, { weight: 1, arbitrary: label(64, 70) }),
  generateName: fc.boolean(),
  jobAnnotations: annotationSize,
  templateAnnotations: annotationSize,
  harvestAnnotations: fc.record(
    {
      'jobharvest.io/mode': fc.constantFrom('node', 'api', 'auto', 'bogus'),
      'jobharvest.io/ttl-seconds-after-finished': fc.constantFrom('0', '60', '-5', 'soon'),
      'jobharvest.io/sink': fc.constantFrom('http', 'loki', 'stdout'),
      'jobharvest.io/endpoint': fc.constantFrom('https://logs.example.com/in', 'http://loki.logging:3100'),
    },
    { requiredKeys: [] },
  ),
  os: fc.constantFrom(undefined, 'linux', 'windows'),
  windowsNodeSelector: fc.boolean(),
  hostUsers: fc.constantFrom(undefined, true, false),
  restartPolicy: fc.constantFrom('Never', 'OnFailure'),
  podFailurePolicy: fc.constantFrom(undefined, 'exit-codes-any', 'exit-codes-main', 'not-in', 'conditions', 'fail-index'),
  managedBy: fc.constantFrom(undefined, 'kubernetes.io/job-controller', 'kueue.x-k8s.io/multikueue', 'example.com/other'),
  mainName: containerName,
  extraContainers: fc.integer({ min: 0, max: 2 }),
  initContainer: fc.constantFrom(undefined, 'regular', 'sidecar'),
  // A container of the user's own already called like jobharvest's sidecar.
  namedJobharvest: fc.constantFrom(undefined, undefined, undefined, 'container', 'init'),
  volumeNamedLikeOurs: fc.constantFrom(undefined, 'jobharvest-state', 'jobharvest-pod-logs', 'data'),
  automountServiceAccountToken: fc.constantFrom(undefined, true, false),
  terminationGracePeriodSeconds: fc.constantFrom(undefined, 0, 1, 30, 3600),
  ttlSecondsAfterFinished: fc.constantFrom(undefined, 0, 100),
  indexed: fc.boolean(),
  suspend: fc.boolean(),
  runAsNonRoot: fc.boolean(),
  command,
});

type Shape = typeof shape extends fc.Arbitrary<infer T> ? T : never;

function jobOf(s: Shape): Obj {
  const main = s.mainName;
  const containers: Obj[] = [{ name: main, image: 'busybox:1.36', command: s.command }];
  const extra = ['side-a', 'side-b'].slice(0, s.extraContainers);
  for (const n of extra) containers.push({ name: n, image: 'busybox:1.36', command: ['true'] });
  if (s.namedJobharvest === 'container') containers.push({ name: 'jobharvest', image: 'busybox:1.36', command: ['true'] });
  const initContainers: Obj[] = [];
  if (s.initContainer === 'regular') initContainers.push({ name: 'prep', image: 'busybox:1.36', command: ['true'] });
  if (s.initContainer === 'sidecar') initContainers.push({ name: 'proxy', image: 'busybox:1.36', restartPolicy: 'Always', command: ['sleep', '3600'] });
  if (s.namedJobharvest === 'init') initContainers.push({ name: 'jobharvest', image: 'busybox:1.36', command: ['true'] });

  const rules: Record<string, Obj[]> = {
    'exit-codes-any': [{ action: 'FailJob', onExitCodes: { operator: 'In', values: [42] } }],
    'exit-codes-main': [{ action: 'FailJob', onExitCodes: { containerName: main, operator: 'In', values: [3, 42] } }],
    'not-in': [{ action: 'Count', onExitCodes: { operator: 'NotIn', values: [0, 1] } }],
    conditions: [{ action: 'Ignore', onPodConditions: [{ type: 'DisruptionTarget', status: 'True' }] }],
    'fail-index': [{ action: 'FailIndex', onExitCodes: { operator: 'In', values: [7] } }],
  };
  const windows = s.os === 'windows';
  // Kubernetes forbids these for a Windows pod (spec.os.name: windows); the shape uses the Windows equivalent.
  const securityContext = windows ? { windowsOptions: { runAsUserName: 'ContainerUser' } } : { runAsNonRoot: true, runAsUser: 1000 };
  const podSpec: Obj = {
    // podFailurePolicy requires Never.
    restartPolicy: s.podFailurePolicy ? 'Never' : s.restartPolicy,
    containers,
    ...(initContainers.length ? { initContainers } : {}),
    ...(s.os ? { os: { name: s.os } } : {}),
    ...(s.windowsNodeSelector ? { nodeSelector: { 'kubernetes.io/os': 'windows' } } : {}),
    ...(s.hostUsers !== undefined && !windows ? { hostUsers: s.hostUsers } : {}),
    ...(s.automountServiceAccountToken !== undefined ? { automountServiceAccountToken: s.automountServiceAccountToken } : {}),
    ...(s.terminationGracePeriodSeconds !== undefined ? { terminationGracePeriodSeconds: s.terminationGracePeriodSeconds } : {}),
    ...(s.runAsNonRoot ? { securityContext } : {}),
    ...(s.volumeNamedLikeOurs ? { volumes: [{ name: s.volumeNamedLikeOurs, emptyDir: {} }] } : {}),
  };
  if (s.volumeNamedLikeOurs) (containers[0]!.volumeMounts as unknown) = [{ name: s.volumeNamedLikeOurs, mountPath: '/data' }];
  const spec: Obj = {
    template: { ...(s.templateAnnotations ? { metadata: { annotations: annotationsOf(s.templateAnnotations) } } : {}), spec: podSpec },
    ...(s.podFailurePolicy ? { podFailurePolicy: { rules: rules[s.podFailurePolicy] } } : {}),
    ...(s.podFailurePolicy === 'fail-index' || (s.indexed && s.podFailurePolicy === undefined) ? { completionMode: 'Indexed', completions: 3, parallelism: 3 } : {}),
    ...(s.podFailurePolicy === 'fail-index' ? { backoffLimitPerIndex: 1 } : {}),
    ...(s.managedBy ? { managedBy: s.managedBy } : {}),
    ...(s.ttlSecondsAfterFinished !== undefined ? { ttlSecondsAfterFinished: s.ttlSecondsAfterFinished } : {}),
    ...(s.suspend ? { suspend: true } : {}),
  };
  const annotations = { ...annotationsOf(s.jobAnnotations), ...s.harvestAnnotations };
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: { ...(s.generateName ? { generateName: `${s.name}-` } : { name: s.name }), ...(Object.keys(annotations).length ? { annotations } : {}) },
    spec,
  } as Obj;
}

const FUZZ_RUNS = 300;

describe('API server dry run of generated Job shapes', () => {
  it(`accepted unpatched ⇒ accepted patched, for ${FUZZ_RUNS} shapes`, async () => {
    const config = loadConfig({});
    const shapes = fc.sample(shape, { numRuns: FUZZ_RUNS, seed: 20261201 });
    const outcomes: Outcome[] = [];
    for (const [i, s] of shapes.entries()) {
      const [p] = pairs(`shape ${i}`, [jobOf(s)], config);
      outcomes.push(await judge(p!));
    }
    const accepted = outcomes.filter((o) => o.unpatched.accepted).length;
    // A generator that only makes invalid Jobs would pass vacuously.
    expect(accepted, 'shapes the API server accepted unpatched').toBeGreaterThanOrEqual(FUZZ_RUNS / 3);
    expect(outcomes.length - accepted, 'shapes refused unpatched (the edges are really reached)').toBeGreaterThan(0);
    const bad = outcomes.filter(blocked);
    // One line per distinct refusal, with how many shapes hit it and one of them, to read in the failure.
    const byMessage = new Map<string, { count: number; example: string; shape: Shape }>();
    for (const o of bad) {
      const message = o.patched.accepted ? '' : o.patched.message.replace(/"[^"]*"/g, '"…"').replace(/\b[a-z0-9-]{20,}\b/g, '<name>');
      const seen = byMessage.get(message);
      if (seen) seen.count++;
      else byMessage.set(message, { count: 1, example: o.ref, shape: shapes[Number(o.ref.split(' ')[1]!.split('#')[0])]! });
    }
    const report = [...byMessage.entries()].map(([m, v]) => `${v.count}× ${m}\n   e.g. ${v.example}: ${JSON.stringify(v.shape, (_k, val: unknown) => (typeof val === 'number' && val > 10_000 ? `${val} bytes` : val))}`);
    expect(report, `${bad.length} of ${accepted} shapes accepted unpatched were refused patched`).toEqual([]);
  }, 600_000);
});
