// The ship step on the sidecar's engine, against the sidecar tests' fake API
// server (real TLS, pods/log with timestamps) and a real NDJSON receiver:
// typed configuration, positions from the termination message, no files.
import { readFile } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { encodeTermination, decodeTermination } from '../../src/contract/termination.ts';
import { FakeKube, type LogLine } from '../../test/support/fake-kube.ts';
import { NdjsonReceiver } from '../../test/support/ndjson-receiver.ts';
import { parseDestinations } from '../destinations.ts';
import { checkpointOf, DEFAULT_LIMITS, podResource, podShaping, shipConfig, shipPod, type ShipRequest } from '../ship.ts';

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const ts = (i: number): string => new Date(Date.UTC(2026, 0, 1, 0, 0, 0) + i * 250).toISOString().replace('Z', '000000Z');
const lines = (from: number, to: number): LogLine[] => Array.from({ length: to - from }, (_, k) => ({ ts: ts(from + k), msg: `line ${from + k}` }));

async function setup(status?: number) {
  const kube = await new FakeKube({ main: ['main'] }).start();
  cleanups.push(() => kube.stop());
  const sink = await new NdjsonReceiver().start();
  cleanups.push(() => sink.stop());
  if (status) sink.handler = (_docs, _req, res) => void res.writeHead(status).end('{"error":"no"}') as unknown as boolean;
  kube.run('main', 0);
  kube.append('main', 0, lines(0, 20));
  kube.terminate('main');
  const ca = await readFile(`${kube.tokenDir}/ca.crt`);
  const position = decodeTermination(encodeTermination({ state: 'running', mode: 'api', sink: 'http', shipped: 10, unsent: 0, dead_lettered: 0 }, [['main', 0, ts(9), 1, 10]], []));
  /** null: the sidecar left no message. */
  const req = (deadlineSeconds: number, message: typeof position | null = position): ShipRequest => ({
    pod: { metadata: { name: kube.name, namespace: kube.namespace, uid: kube.uid, labels: { 'batch.kubernetes.io/job-name': 'job-abc' } }, spec: { containers: [], nodeName: 'n1' } },
    sidecar: 'jobharvest',
    message: message ?? undefined,
    destination: parseDestinations([{ name: 'logs', sink: 'http', endpoint: sink.url, allow: ['loopback'] }])[0]!,
    kube: { apiUrl: new URL(kube.url), credentials: async () => ({ token: 'token-1', ca }) },
    limits: { ...DEFAULT_LIMITS, batchMaxWaitMs: 20 },
    deadlineMs: deadlineSeconds * 1000,
    signal: new AbortController().signal,
  });
  return { kube, sink, req };
}

describe('harvester: shipping one pod with the engine', () => {
  it.each([86_400, 604_800])('a hold of %i s gives a working ship pass: the lines after the position, once, with their metadata', async (hold) => {
    const t = await setup();
    const r = await shipPod(t.req(hold));
    expect(r).toEqual({ missing: 10, shipped: 10, lost: 0 });
    expect(t.sink.accepted.map((d) => d.message).sort()).toEqual(lines(10, 20).map((l) => l.msg).sort());
    expect(t.sink.accepted[0]).toMatchObject({ 'k8s.namespace.name': 'team-a', 'k8s.pod.name': t.kube.name, 'k8s.container.name': 'main', 'k8s.job.name': 'job-abc' });
    // The engine's configuration is typed: the day-long and week-long drains are taken as given.
    expect((await shipConfig(t.req(hold))).drainMs).toBe(hold * 1000 + 2000);
  });

  it('no message: the whole log, counted first', async () => {
    const t = await setup();
    expect(await shipPod(t.req(60, null))).toEqual({ missing: 20, shipped: 20, lost: 0 });
  });

  it('a server that refuses for good: the lines are counted lost (no dead-letter file: the harvester keeps none)', async () => {
    const t = await setup(400);
    const r = await shipPod(t.req(30));
    expect(r).toEqual({ missing: 10, shipped: 0, lost: 10 });
  });

  it('a replica that may no longer write sends nothing at all: every line counted lost at the deadline', async () => {
    const t = await setup();
    const r = await shipPod({ ...t.req(3), mayWrite: () => false });
    expect(r).toEqual({ missing: 10, shipped: 0, lost: 10 });
    expect(t.sink.requests).toBe(0);
  });

  it('TLS material and credentials come from the destination only, never from the pod', async () => {
    const t = await setup();
    const req = t.req(30);
    // A tenant's sidecar env naming the harvester's own files: not read, not even looked at.
    req.pod.spec!.initContainers = [{ name: 'jobharvest', env: [{ name: 'JOBHARVEST_TLS_KEY_FILE', value: '/etc/jobharvest/tls/tls.key' }, { name: 'JOBHARVEST_HEADERS', value: 'metadata-flavor=Google' }] }];
    const cfg = await shipConfig({ ...req, destination: { ...req.destination, tls: { caFile: '/etc/jobharvest/destinations/logs/tls/ca.crt' } } });
    expect(cfg.tls).toEqual({ caFile: '/etc/jobharvest/destinations/logs/tls/ca.crt', insecureSkipVerify: false });
    expect(cfg.headers).toEqual({ 'user-agent': 'jobharvest-harvester' });
    expect(cfg.endpoint?.href).toBe(t.sink.url);
    expect(cfg.auth).toEqual({ scheme: 'Bearer' });
  });

  it("uses the destination's codec where its sink takes it, gzip otherwise", async () => {
    const t = await setup();
    const req = t.req(30);
    expect((await shipConfig(req)).compression).toBe('gzip');
    expect((await shipConfig({ ...req, destination: { ...req.destination, compression: 'zstd' } })).compression).toBe('zstd');
    expect((await shipConfig({ ...req, destination: { ...req.destination, sink: 'loki', compression: 'zstd' } })).compression).toBe('gzip');
    expect((await shipConfig({ ...req, destination: { ...req.destination, compression: 'none' } })).compression).toBe('none');
  });

  it('ships zstd to a destination that takes it', async () => {
    const t = await setup();
    const req = t.req(60);
    const encodings: Array<string | undefined> = [];
    t.sink.handler = (_docs, r) => {
      encodings.push(r.headers['content-encoding']);
      return true;
    };
    expect(await shipPod({ ...req, destination: { ...req.destination, compression: 'zstd' } })).toEqual({ missing: 10, shipped: 10, lost: 0 });
    expect(new Set(encodings)).toEqual(new Set(['zstd']));
    expect(t.sink.accepted).toHaveLength(10);
  });

  it('names itself to the server', async () => {
    const t = await setup();
    let agent: string | undefined;
    t.sink.handler = (_docs, req) => {
      agent = req.headers['user-agent'];
      return true;
    };
    await shipPod({ ...t.req(30), identity: 'harvester-7f9c' });
    expect(agent).toBe('jobharvest-harvester (harvester-7f9c)');
  });

  it('the positions come from a validated message only', () => {
    expect(checkpointOf(undefined).size).toBe(0);
    expect([...checkpointOf(decodeTermination(encodeTermination({ state: 'running', mode: 'api', sink: 'http', shipped: 1, unsent: 0, dead_lettered: 0 }, [['main', 0, ts(1), 2, 41]], ['init/0']))).keys()]).toEqual(['init/0/api', 'main/0/api']);
  });

  it("ships with the pod's shaping, masks above all: the sidecar's env, as signed", async () => {
    const kube = await new FakeKube({ main: ['main'] }).start();
    cleanups.push(() => kube.stop());
    const sink = await new NdjsonReceiver().start();
    cleanups.push(() => sink.stop());
    kube.run('main', 0);
    const text = ['start', 'Authorization: Bearer s3cr3t-token', 'Traceback (most recent call last):', '  File "a.py", line 1, in <module>', 'ValueError: password=hunter2', 'end'];
    kube.append('main', 0, text.map((msg, i) => ({ ts: ts(i), msg })));
    kube.terminate('main');
    const ca = await readFile(`${kube.tokenDir}/ca.crt`);
    const env = [
      { name: 'JOBHARVEST_MULTILINE', value: 'python' },
      { name: 'JOBHARVEST_MASK', value: 'bearer,password' },
    ];
    const r = await shipPod({
      pod: { metadata: { name: kube.name, namespace: kube.namespace, uid: kube.uid }, spec: { containers: [{ name: 'main' }], initContainers: [{ name: 'jobharvest', env }] } },
      sidecar: 'jobharvest',
      message: undefined,
      destination: parseDestinations([{ name: 'logs', sink: 'http', endpoint: sink.url, allow: ['loopback'] }])[0]!,
      kube: { apiUrl: new URL(kube.url), credentials: async () => ({ token: 'token-1', ca }) },
      limits: { ...DEFAULT_LIMITS, batchMaxWaitMs: 20 },
      deadlineMs: 30_000,
      signal: new AbortController().signal,
    });
    // Lines, not records: the joined traceback counts its three.
    expect(r).toEqual({ missing: 6, shipped: 6, lost: 0 });
    expect(sink.accepted.map((d) => d.message).sort()).toEqual(['start', 'Authorization: Bearer [MASKED]', 'Traceback (most recent call last):\n  File "a.py", line 1, in <module>\nValueError: password=[MASKED]', 'end'].sort());
  });

  it("harvested records carry the sidecar's OTLP resource: the Job's uid from the pod's label, the CronJob and service name from the signed sidecar env", () => {
    const env = [
      { name: 'JOBHARVEST_CRONJOB_NAME', value: 'nightly' },
      { name: 'JOBHARVEST_CRONJOB_UID', value: 'cj-uid' },
      { name: 'JOBHARVEST_SERVICE_NAME', value: 'etl' },
    ];
    const pod = { metadata: { labels: { 'batch.kubernetes.io/controller-uid': 'job-uid' } }, spec: { containers: [{ name: 'main', env: [{ name: 'JOBHARVEST_SERVICE_NAME', value: 'not-the-sidecar' }] }], initContainers: [{ name: 'jobharvest', env }] } };
    expect(podResource(pod, 'jobharvest')).toEqual({ jobUid: 'job-uid', cronJob: { name: 'nightly', uid: 'cj-uid' }, serviceName: 'etl' });
    expect(podResource({ spec: { containers: [{ name: 'main' }] } }, 'jobharvest')).toEqual({});
  });

  it("invalid shaping on the pod: none, but its masks if they are valid on their own", () => {
    const pod = (env: Record<string, string>) => ({ spec: { containers: [{ name: 'jobharvest', env: Object.entries(env).map(([name, value]) => ({ name, value })) }] } });
    expect(podShaping(pod({}), 'jobharvest', 262_144)).toBeUndefined();
    expect(podShaping(pod({ JOBHARVEST_MASK: 'bearer', JOBHARVEST_MULTILINE: 'go' }), 'jobharvest', 262_144)).toMatchObject({ multiline: { rules: ['go'] }, mask: { rules: ['bearer'] } });
    expect(podShaping(pod({ JOBHARVEST_MASK: 'bearer', JOBHARVEST_MULTILINE: 'ruby' }), 'jobharvest', 262_144)).toEqual({ mask: { rules: ['bearer'], patterns: [], replacement: '[MASKED]' } });
    expect(podShaping(pod({ JOBHARVEST_MASK_PATTERNS: '["x"]', JOBHARVEST_MULTILINE_START: '(' }), 'jobharvest', 262_144)).toEqual({ mask: { rules: [], patterns: ['x'], replacement: '[MASKED]' } });
    expect(podShaping(pod({ JOBHARVEST_MASK_PATTERNS: '["("]', JOBHARVEST_MULTILINE: 'go' }), 'jobharvest', 262_144)).toBeUndefined();
    // Another container's env is not the sidecar's.
    expect(podShaping(pod({ JOBHARVEST_MASK: 'bearer' }), 'other', 262_144)).toBeUndefined();
  });
});
