/**
 * What the harvester does not trust, on the real control plane with the test
 * kubelet, the webhook and the harvester as their own processes: Jobs, pods
 * and annotations a tenant forged, and endpoints the operator never approved.
 * A loopback listener stands in for the place a tenant would have the
 * harvester send to; it counts every request it gets.
 */
import { PatchStrategy, setHeaderOptions, type V1Job, type V1Pod } from '@kubernetes/client-node';
import { createServer, type Server } from 'node:http';
import { request } from 'node:https';
import { gunzipSync } from 'node:zlib';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { INJECTED_LABEL, STATUS_ANNOTATION } from '../../src/contract/harvest.ts';
import { SIGNATURE_ANNOTATION } from '../../src/contract/signature.ts';
import { DELIVERY_ANNOTATION, HOLD_ANNOTATION } from '../../src/contract/harvest.ts';
import type { DeliveryRecord } from '../../harvester/report.ts';
import { useCluster, waitFor } from '../harness/cluster/client.ts';
import { numberedLines, shellJob, Stack } from '../harness/kubelet/stack.ts';

const cluster = useCluster();
let stack: Stack;
const rows: string[] = [];

/** An HTTP server on loopback that counts requests, and answers with `status()`. */
class Listener {
  requests = 0;
  lines = 0;
  status: () => number = () => 200;
  private server!: Server;
  url = '';
  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      this.requests++;
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const code = this.status();
        const raw = Buffer.concat(chunks);
        const body = (req.headers['content-encoding'] === 'gzip' ? gunzipSync(raw) : raw).toString('utf8');
        if (code === 200) this.lines += body.split('\n').filter(Boolean).length;
        res.writeHead(code).end();
      });
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/ingest`;
    return this;
  }
  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((r) => this.server.close(r));
  }
}

let listener: Listener;

beforeAll(async () => {
  stack = await Stack.start({ info: cluster.info, name: 'ht', kubelet: { restartBackoffMs: 300 } });
  listener = await new Listener().start();
}, 240_000);

afterAll(async () => {
  console.log('harvester trust: scenario / requests at the tenant listener / delivery record');
  for (const r of rows) console.log(`  ${r}`);
  await listener?.stop();
  await stack?.stop();
}, 120_000);

async function record(ns: string, name: string): Promise<{ job: V1Job; delivery: DeliveryRecord & { sig?: string } }> {
  return waitFor(
    `the delivery record on ${ns}/${name}`,
    async () => {
      const job = await stack.batch.readNamespacedJob({ name, namespace: ns });
      const raw = job.metadata?.annotations?.[DELIVERY_ANNOTATION];
      const d = raw ? (JSON.parse(raw) as DeliveryRecord & { sig?: string }) : undefined;
      // Only the harvester's own (signed) record counts; a forged one is there from the start.
      return d?.sig ? { job, delivery: d } : undefined;
    },
    { timeoutMs: 60_000 },
  );
}

/** A sidecar of the tenant's own, named like ours: runs until SIGTERM and leaves no report. */
function forgedSidecar(endpoint: string) {
  return {
    name: 'jobharvest',
    image: 'busybox:1.36',
    restartPolicy: 'Always',
    command: ['sh', '-c', 'sleep 3600'],
    env: [
      { name: 'JOBHARVEST_SINK', value: 'http' },
      { name: 'JOBHARVEST_ENDPOINT', value: endpoint },
      { name: 'JOBHARVEST_HEADERS', value: 'metadata-flavor=Google,host=metadata.google.internal' },
      { name: 'JOBHARVEST_TLS_INSECURE_SKIP_VERIFY', value: 'true' },
      { name: 'JOBHARVEST_BATCH_MAX_BYTES', value: '67108864' },
    ],
  };
}

/** A create with the admission warnings the API server passes on (client-node drops them). */
function createWithWarnings(ns: string, body: V1Job): Promise<{ status: number; job: V1Job; warnings: string[] }> {
  const text = JSON.stringify(body);
  const url = new URL(`${cluster.info.server}/apis/batch/v1/namespaces/${ns}/jobs`);
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: 'POST',
        ca: cluster.info.caPem,
        headers: { authorization: `Bearer ${cluster.info.token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), accept: 'application/json' },
        timeout: 15_000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (d: Buffer) => chunks.push(d));
        res.on('end', () => {
          const raw = res.headers.warning;
          // A warning header is a quoted string: quotes and backslashes inside are escaped.
          const warnings = (Array.isArray(raw) ? raw : raw ? [raw] : []).map((w) => w.replace(/^299 - "?/, '').replace(/"$/, '').replace(/\\(.)/g, '$1'));
          resolve({ status: res.statusCode ?? 0, job: JSON.parse(Buffer.concat(chunks).toString('utf8')) as V1Job, warnings });
        });
      },
    );
    req.on('error', reject);
    req.end(text);
  });
}

const forgedStatus = JSON.stringify({ version: '0.1.0', mode: 'node', sink: 'http', container: 'jobharvest', volumes: [], ttlSecondsAfterFinished: 60, terminationGracePeriodSeconds: null, defaultContainer: null });

describe('the harvester acts only on what it can verify', () => {
  it('T1. a forged sidecar under a status annotation set in advance: not held, nothing sent, the record says why', async () => {
    const ns = await stack.namespace('t1');
    const before = listener.requests;
    const job = shellJob('t1', { script: numberedLines('t1', 50) });
    job.metadata = { name: 't1', labels: { [INJECTED_LABEL]: 'true' }, annotations: { [STATUS_ANNOTATION]: forgedStatus } };
    job.spec!.ttlSecondsAfterFinished = 60;
    job.spec!.template.spec!.initContainers = [forgedSidecar(listener.url)];
    const created = await stack.batch.createNamespacedJob({ namespace: ns, body: job });
    // The webhook drops a label that no verified signature backs (T5 has its warning);
    // labels stay writable after creation, where no webhook looks.
    expect(created.metadata?.labels?.[INJECTED_LABEL]).toBeUndefined();
    await stack.batch.patchNamespacedJob({ namespace: ns, name: 't1', body: { metadata: { labels: { [INJECTED_LABEL]: 'true' } } } }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
    const { job: done, delivery } = await record(ns, 't1');
    expect(done.metadata?.annotations?.[HOLD_ANNOTATION]).toBeUndefined();
    expect(done.spec?.ttlSecondsAfterFinished).toBe(60);
    expect(delivery.notes?.[0]).toMatch(/^not harvested: the injection is not signed/);
    // Long enough for a harvest to have started, had there been one.
    await new Promise((r) => setTimeout(r, 3000));
    rows.push(`T1. forged sidecar, status set in advance: ${listener.requests - before} / ${JSON.stringify({ ...delivery, sig: '…' })}`);
    expect(listener.requests - before).toBe(0);
  }, 120_000);

  it('T2. a bare pod carrying a Job\'s controller-uid label is not that Job\'s: not read, not counted, said so', async () => {
    const ns = await stack.namespace('t2');
    const before = listener.requests;
    // The Job's own pod waits until the bare pod exists, so both are there when it finishes.
    const created = await stack.batch.createNamespacedJob({ namespace: ns, body: shellJob('t2', { script: `sleep 2; ${numberedLines('t2', 40)}` }) });
    const uid = created.metadata!.uid!;
    // Controlled by something else, so the Job controller neither adopts it nor
    // deletes it as an extra pod (an orphan it would adopt; the unit tests
    // cover that case: its sidecar is not the signed one).
    const owner = await stack.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 't2-owner' } } });
    const bare: V1Pod = {
      metadata: {
        name: 't2-bare',
        labels: { 'batch.kubernetes.io/controller-uid': uid, 'batch.kubernetes.io/job-name': 't2' },
        ownerReferences: [{ apiVersion: 'v1', kind: 'ConfigMap', name: 't2-owner', uid: owner.metadata!.uid!, controller: true }],
      },
      spec: { restartPolicy: 'Never', initContainers: [forgedSidecar(listener.url) as never], containers: [{ name: 'main', image: 'busybox:1.36', command: ['sh', '-c', 'echo bare'] }] },
    };
    await stack.core.createNamespacedPod({ namespace: ns, body: bare });
    const { delivery } = await record(ns, 't2');
    expect(delivery).toMatchObject({ pods: 1, shipped: 40, lost: 0, unaccounted: 0 });
    // Whether or not the Job controller adopted the orphan by then, it is not the Job's pod for the harvester.
    expect(delivery.notes).toEqual([expect.stringContaining("1 pod(s) carry the Job's label but are not its own")]);
    await new Promise((r) => setTimeout(r, 2000));
    rows.push(`T2. bare pod with the Job's controller-uid: ${listener.requests - before} / ${JSON.stringify({ ...delivery, sig: '…' })}`);
    expect(listener.requests - before).toBe(0);
  }, 120_000);

  it('T3. hold and delivery set in advance change nothing: the real record is written, the TTL is the Job\'s own', async () => {
    const ns = await stack.namespace('t3');
    const job = shellJob('t3', { script: numberedLines('t3', 30) });
    job.metadata = {
      name: 't3',
      annotations: {
        [DELIVERY_ANNOTATION]: JSON.stringify({ sink: 'loki', pods: 1, shipped: 999, lost: 0, unaccounted: 0 }),
        [HOLD_ANNOTATION]: JSON.stringify({ originalTtl: null, since: new Date().toISOString(), maxHoldSeconds: 600 }),
      },
    };
    job.spec!.ttlSecondsAfterFinished = 60;
    await stack.batch.createNamespacedJob({ namespace: ns, body: job });
    const { job: done, delivery } = await record(ns, 't3');
    expect(delivery).toMatchObject({ sink: 'loki', pods: 1, shipped: 30, lost: 0, unaccounted: 0 });
    expect(done.spec?.ttlSecondsAfterFinished).toBe(60);
    rows.push(`T3. hold and delivery set in advance: - / ${JSON.stringify({ ...delivery, sig: '…' })}`);
  }, 120_000);

  it('T4. a tenant endpoint outside the approved destinations: the sidecar ships there as told, the harvester sends nothing', async () => {
    const ns = await stack.namespace('t4', { drainSeconds: 3 });
    const before = listener.requests;
    const linesBefore = listener.lines;
    // The tenant's server takes the first 100 lines, then fails: the sidecar cannot finish.
    listener.status = () => (listener.lines - linesBefore >= 100 ? 503 : 200);
    try {
      const job = shellJob('t4', { terminationGracePeriodSeconds: 8, script: `${numberedLines('t4', 100)}; sleep 2; ${numberedLines('t4', 50, 101)}` });
      job.metadata = { name: 't4', annotations: { 'jobharvest.io/sink': 'http', 'jobharvest.io/endpoint': listener.url } };
      await stack.batch.createNamespacedJob({ namespace: ns, body: job });
      const { job: done, delivery } = await record(ns, 't4');
      const atRecord = listener.requests;
      expect(listener.lines - linesBefore).toBe(100);
      expect(done.metadata?.annotations?.[HOLD_ANNOTATION]).toBeUndefined();
      expect(delivery).toMatchObject({ sink: 'http', pods: 1, shipped: 100, lost: 50, unaccounted: 0 });
      expect(delivery.notes).toEqual([expect.stringMatching(/the sink http at http:\/\/127\.0\.0\.1:\d+\/ingest is not an approved destination/)]);
      await new Promise((r) => setTimeout(r, 3000));
      rows.push(`T4. endpoint not approved: ${listener.requests - before} (all from the sidecar, none after its exit) / ${JSON.stringify({ ...delivery, sig: '…' })}`);
      // Every request came from the sidecar, before the record; none since.
      expect(listener.requests).toBe(atRecord);
    } finally {
      listener.status = () => 200;
    }
  }, 120_000);

  it("T5. a signature, status and label copied from the tenant's own injected Job onto a hand-written one: never a signed count; a warning and an Event say why", async () => {
    const ns = await stack.namespace('t5');
    // A genuine injection in the same namespace, to copy from.
    const genuine = (await stack.batch.createNamespacedJob({ namespace: ns, body: shellJob('t5-genuine', { script: numberedLines('t5g', 5) }) }));
    const copied = {
      [STATUS_ANNOTATION]: genuine.metadata!.annotations![STATUS_ANNOTATION]!,
      [SIGNATURE_ANNOTATION]: genuine.metadata!.annotations![SIGNATURE_ANNOTATION]!,
    };
    expect(copied[SIGNATURE_ANNOTATION]).toMatch(/^v2\.[A-Za-z0-9_-]{8}\./);
    /**
     * The tenant's hand-written Job: the rendered sidecar and its volumes, but
     * the tenant's image, an env var and a mount of its own, all outside what
     * the signature covered before. (Here the test kubelet runs any image
     * named jobharvest as the real sidecar; on a node it is the tenant's code.)
     */
    const handWritten = (name: string, annotations: Record<string, string>, labels: Record<string, string>): V1Job => {
      const job = shellJob(name, { script: `sleep 2; ${numberedLines(name, 20)}`, volumes: [...structuredClone(genuine.spec!.template.spec!.volumes!), { name: 'shared', emptyDir: {} }], volumeMounts: [{ name: 'shared', mountPath: '/shared' }] });
      job.metadata = { name, labels, annotations };
      const sidecar = structuredClone(genuine.spec!.template.spec!.initContainers!.find((c) => c.name === 'jobharvest')!);
      sidecar.image = 'registry.tenant.example/jobharvest:1';
      sidecar.env = [...(sidecar.env ?? []), { name: 'TENANT_SETTING', value: 'on' }];
      sidecar.volumeMounts = [...(sidecar.volumeMounts ?? []), { name: 'shared', mountPath: '/shared' }];
      job.spec!.template.spec!.initContainers = [sidecar];
      job.spec!.ttlSecondsAfterFinished = 60;
      return job;
    };

    // At creation: the webhook skips it as already injected, and drops what does not verify.
    const created = await createWithWarnings(ns, handWritten('t5-copied', copied, { [INJECTED_LABEL]: 'true' }));
    expect(created.status).toBe(201);
    expect(created.warnings.join('\n')).toContain('jobharvest: jobharvest.io/signature and label jobharvest.io/injected removed, nothing reported on this Job: the injection signature does not match this Job and its sidecar');
    expect(created.job.metadata?.annotations?.[SIGNATURE_ANNOTATION]).toBeUndefined();
    expect(created.job.metadata?.labels?.[INJECTED_LABEL]).toBeUndefined();

    // Annotations and labels stay writable after creation, where no webhook looks:
    // the same copy patched onto a second hand-written Job reaches the harvester.
    await stack.batch.createNamespacedJob({ namespace: ns, body: handWritten('t5-patched', { [STATUS_ANNOTATION]: copied[STATUS_ANNOTATION] }, {}) });
    await stack.batch.patchNamespacedJob(
      { namespace: ns, name: 't5-patched', body: { metadata: { labels: { [INJECTED_LABEL]: 'true' }, annotations: { [SIGNATURE_ANNOTATION]: copied[SIGNATURE_ANNOTATION] } } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    const { job: patched, delivery } = await record(ns, 't5-patched');
    expect(delivery).toMatchObject({ shipped: 0, lost: 0, notes: [expect.stringMatching(/^not harvested: the injection signature does not match this Job and its sidecar/)] });
    expect(patched.metadata?.annotations?.[HOLD_ANNOTATION]).toBeUndefined();
    const events = (await stack.core.listNamespacedEvent({ namespace: ns, fieldSelector: `involvedObject.uid=${patched.metadata!.uid}` })).items.filter((e) => e.source?.component === 'jobharvest');
    expect(events.map((e) => [e.type, e.reason])).toEqual([['Warning', 'LogsLost']]);
    expect(events[0]!.message).toContain('not harvested: the injection signature does not match this Job and its sidecar');

    // The first one finished long ago by now: the harvester never looked at it.
    const done = await waitFor(
      't5-copied finished',
      async () => {
        const j = await stack.batch.readNamespacedJob({ namespace: ns, name: 't5-copied' });
        return (j.status?.conditions ?? []).some((c) => c.type === 'Complete' && c.status === 'True') ? j : undefined;
      },
      { timeoutMs: 60_000 },
    );
    await new Promise((r) => setTimeout(r, 3000));
    const after = await stack.batch.readNamespacedJob({ namespace: ns, name: 't5-copied' });
    expect(after.metadata?.annotations?.[DELIVERY_ANNOTATION]).toBeUndefined();
    rows.push(`T5. copied signature: at creation dropped (${done.metadata?.name}: no record); patched on later: ${JSON.stringify({ ...delivery, sig: '…' })}`);
  }, 180_000);

  it("T6. a container that mounts one of jobharvest's volumes: the webhook skips it with a warning and never refuses; the API server finds the volume undefined", async () => {
    const seen: string[] = [];
    for (const mode of ['node', 'api'] as const) {
      const ns = await stack.namespace(`t6${mode}`, { mode });
      for (const volume of ['jobharvest-pod-logs', 'jobharvest-token', 'jobharvest-state', 'jobharvest-tls']) {
        const job = shellJob('t6', { script: 'cat /peek/* || true', volumeMounts: [{ name: volume, mountPath: '/peek' }] });
        job.spec!.template.spec!.automountServiceAccountToken = false;
        const r = await createWithWarnings(ns, job);
        // Had the webhook added its volume, the mount would have resolved; skipped, the
        // template names a volume it does not define, which the API server's validation refuses.
        expect(r.warnings, `${mode} ${volume}`).toEqual([`jobharvest: container "main" mounts the volume "${volume}", which is jobharvest's; Job admitted without the log sidecar`]);
        expect(r.status, `${mode} ${volume}`).toBe(422);
        expect(JSON.stringify(r.job), `${mode} ${volume}`).toContain(`volumeMounts[0].name: Not found: \\"${volume}\\"`);
        expect(JSON.stringify(r.job)).not.toContain('admission webhook');
        seen.push(`${mode}/${volume}: ${r.status}`);
      }
    }
    rows.push(`T6. a mount of jobharvest's volumes: ${seen.join(', ')}`);
  }, 120_000);
});
