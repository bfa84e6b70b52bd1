import { describe, expect, it } from 'vitest';
import { request as httpsRequest } from 'node:https';
import { build } from '../../src/http/app.ts';
import { createMetrics } from '../../src/http/metrics.ts';
import { webhookLogger } from '../../src/http/logging.ts';
import { applyPatch } from '../../src/core/patch.ts';
import { generateBundle } from '../../src/tls/generate.ts';
import { decodePatch, deps, durableConfig, job, optedIn, review } from '../support/fixtures.ts';

const mutate = (app: ReturnType<typeof build>, payload: unknown, headers: Record<string, string> = {}) =>
  app.inject({ method: 'POST', url: '/mutate', payload: payload as object, headers });

describe('POST /mutate', () => {
  it('patches a Job CREATE in an opted-in namespace and echoes the uid', async () => {
    const app = build({ deps: deps({ config: durableConfig() }) });
    const res = await mutate(app, review(job()));
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.apiVersion).toBe('admission.k8s.io/v1');
    expect(body.kind).toBe('AdmissionReview');
    expect(body.response.uid).toBe('b7d4c1e2-0000-4000-8000-000000000001');
    expect(body.response.allowed).toBe(true);
    expect(body.response.patchType).toBe('JSONPatch');
    const patched = applyPatch(job(), decodePatch(body.response));
    expect(patched.spec.template.spec.initContainers[0].name).toBe('jobharvest');
    expect(patched.spec.template.spec.initContainers[0].restartPolicy).toBe('Always');
    expect(patched.spec.ttlSecondsAfterFinished).toBe(3600);
    expect(patched.spec.template.spec.containers).toEqual(job().spec.template.spec.containers);
  });

  it('escapes annotation keys in patch paths', async () => {
    const app = build({ deps: deps() });
    const j = job();
    j.spec.template.metadata = { annotations: { existing: 'x' } };
    const ops = decodePatch((await mutate(app, review(j))).json().response);
    expect(ops.map((o) => o.path)).toContain('/spec/template/metadata/annotations/kubectl.kubernetes.io~1default-container');
    expect(ops.map((o) => o.path)).toContain('/metadata/annotations');
  });

  it('never touches managedFields', async () => {
    const app = build({ deps: deps() });
    const j = job();
    j.metadata.managedFields = [{ manager: 'kubectl', operation: 'Update' }];
    const ops = decodePatch((await mutate(app, review(j))).json().response);
    expect(ops.length).toBeGreaterThan(0);
    expect(ops.some((o) => o.path.startsWith('/metadata/managedFields'))).toBe(false);
  });

  it.each([
    ['UPDATE', { operation: 'UPDATE' }],
    ['DELETE', { operation: 'DELETE' }],
    ['a Pod', { kind: { group: '', version: 'v1', kind: 'Pod' } }],
    ['a status subresource', { subResource: 'status' }],
  ])('allows %s unchanged', async (_what, req) => {
    const app = build({ deps: deps() });
    const res = await mutate(app, review(job(), req));
    expect(res.statusCode).toBe(200);
    expect(res.json().response).toEqual({ uid: 'b7d4c1e2-0000-4000-8000-000000000001', allowed: true });
  });

  it('skips namespaces that did not opt in, and excluded ones', async () => {
    const app = build({ deps: deps({ namespace: (name) => ({ name }) }) });
    expect((await mutate(app, review(job()))).json().response.patch).toBeUndefined();
    const app2 = build({ deps: deps() });
    const j = job();
    j.metadata.namespace = 'kube-system';
    expect((await mutate(app2, review(j, { namespace: 'kube-system' }))).json().response.patch).toBeUndefined();
  });

  it('honours the escape-hatch label even when annotated', async () => {
    const app = build({ deps: deps({ namespace: (name) => optedIn(name, { labels: { 'jobharvest.io/inject': 'disabled' } }) }) });
    expect((await mutate(app, review(job()))).json().response.patch).toBeUndefined();
  });

  it('returns warnings for invalid annotation values and still injects', async () => {
    const app = build({ deps: deps({ config: durableConfig() }) });
    const j = job();
    j.metadata.annotations = { 'jobharvest.io/ttl-seconds-after-finished': 'soon' };
    const r = (await mutate(app, review(j))).json().response;
    expect(r.patch).toBeDefined();
    expect(r.warnings).toHaveLength(1);
    expect(r.warnings[0]).toMatch(/^jobharvest: Job annotation jobharvest.io\/ttl-seconds-after-finished="soon" ignored/);
  });

  it('skips with a warning on a cluster without native sidecars', async () => {
    const app = build({ deps: deps({ serverVersion: () => ({ major: 1, minor: 28 }) }) });
    const r = (await mutate(app, review(job()))).json().response;
    expect(r.patch).toBeUndefined();
    expect(r.warnings[0]).toMatch(/1\.28 has no native sidecars/);
  });

  it('allows the Job unpatched, warns and counts when the core fails', async () => {
    const metrics = createMetrics();
    const app = build({
      metrics,
      deps: deps({
        namespace: () => {
          throw new Error('boom');
        },
      }),
    });
    const r = (await mutate(app, review(job()))).json().response;
    expect(r.allowed).toBe(true);
    expect(r.patch).toBeUndefined();
    expect(r.warnings[0]).toMatch(/internal error JH_INTERNAL/);
    const m = await (await app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(m).toMatch(/jobharvest_errors_total\{code="JH_INTERNAL"\} 1/);
  });

  it('lets a review choose nothing beyond the namespace\'s mode: a Job-level mode api in a node-mode namespace stays node, with a warning', async () => {
    const app = build({ deps: deps() });
    const j = job();
    j.metadata.annotations = { 'jobharvest.io/mode': 'api' };
    const r = (await mutate(app, review(j))).json().response;
    const sidecar = applyPatch(j, decodePatch(r)).spec.template.spec.initContainers[0];
    expect(sidecar.env.find((e: { name: string }) => e.name === 'JOBHARVEST_MODE')?.value).toBe('node');
    expect(r.warnings.join('\n')).toMatch(/jobharvest.io\/mode: api ignored: namespace team-a reads logs in node mode/);
    // The same annotation where the namespace itself is in api mode is honoured.
    const apiNs = build({ deps: deps({ namespace: (name) => optedIn(name, { annotations: { 'jobharvest.io/mode': 'api' } }) }) });
    const r2 = (await mutate(apiNs, review(j))).json().response;
    expect(applyPatch(j, decodePatch(r2)).spec.template.spec.initContainers[0].env.find((e: { name: string }) => e.name === 'JOBHARVEST_MODE')?.value).toBe('api');
  });

  it('accepts a 3 MiB Job', async () => {
    const app = build({ deps: deps() });
    const j = job();
    j.spec.template.spec.containers[0].command = ['sh', '-c', 'x'.repeat(3 * 1024 * 1024)];
    const res = await mutate(app, review(j));
    expect(res.statusCode).toBe(200);
    expect(res.json().response.patch).toBeDefined();
  });

  it.each([
    ['malformed JSON', '{"apiVersion": "admission.k8s.io/v1", ', /JSON/i],
    ['a wrong apiVersion', JSON.stringify({ ...review(job()), apiVersion: 'admission.k8s.io/v1beta1' }), /apiVersion must be admission.k8s.io\/v1/],
    ['a wrong kind', JSON.stringify({ ...review(job()), kind: 'Review' }), /kind must be AdmissionReview/],
    ['a missing request', JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview' }), /request is missing/],
    ['a missing uid', JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: {} }), /uid is missing/],
    ['an array', '[]', /not a JSON object/],
  ])('answers 400 with a clear message for %s', async (_what, body, message) => {
    const metrics = createMetrics();
    const app = build({ deps: deps(), metrics });
    const res = await app.inject({ method: 'POST', url: '/mutate', payload: body, headers: { 'content-type': 'application/json' } });
    expect(res.statusCode).toBe(400);
    expect(res.json().code).toBe('JH_BAD_REQUEST');
    expect(res.json().message).toMatch(message);
    expect(await metrics.registry.getSingleMetricAsString('jobharvest_bad_requests_total')).toMatch(/ 1$/m);
  });
});

describe('health, readiness and metrics', () => {
  it('serves /healthz and /readyz', async () => {
    let ready = false;
    const app = build({ deps: deps(), readiness: () => (ready ? { ready: true } : { ready: false, reason: 'no certificate' }) });
    expect((await app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
    const notReady = await app.inject({ method: 'GET', url: '/readyz' });
    expect(notReady.statusCode).toBe(503);
    expect(notReady.json().reason).toBe('no certificate');
    ready = true;
    expect((await app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
  });

  it('counts requests, injections, skips and latency with sub-millisecond buckets', async () => {
    const app = build({ deps: deps() });
    await mutate(app, review(job()));
    const j = job();
    j.metadata.annotations = { 'jobharvest.io/inject': 'false' };
    await mutate(app, review(j));
    const text = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(text).toMatch(/jobharvest_admission_requests_total\{operation="CREATE",kind="Job"\} 2/);
    expect(text).toMatch(/jobharvest_injected_total\{mode="node",sink="stdout",dry_run="false"\} 1/);
    expect(text).toMatch(/jobharvest_skipped_total\{reason="opted-out-job"\} 1/);
    expect(text).toMatch(/jobharvest_admission_duration_seconds_bucket\{le="0.0001"\}/);
    expect(text).toMatch(/jobharvest_admission_duration_seconds_count 2/);
  });
});

describe('logs', () => {
  it('never show URL credentials, in the message or in fields', async () => {
    const lines: string[] = [];
    const app = build({
      logger: webhookLogger({ level: 'info', stream: { write: (l) => lines.push(l) } }),
      deps: deps({
        namespace: () => {
          throw new Error('cannot reach http://alice:S3cr@t/pw@api:6443/ns?access_token=TOPSECRET');
        },
      }),
    });
    await mutate(app, review(job()));
    app.log.warn({ endpoint: 'https://bob:hunter2@logs/x' }, 'sink at http://carol:pw2@logs refused');
    const text = lines.join('');
    expect(text).toMatch(/internal error/);
    expect(text).toContain('http://***@api:6443/ns?access_token=***');
    for (const secret of ['S3cr', 'TOPSECRET', 'hunter2', 'pw2', 'alice', 'bob', 'carol']) expect(text).not.toContain(secret);
  });
});

describe('metric labels', () => {
  it('keeps request labels to fixed sets whatever the request says', async () => {
    const app = build({ deps: deps() });
    for (let i = 0; i < 20; i++) {
      const v = `${i}-${'x'.repeat(4096)}`;
      const res = await mutate(app, review(job(), { operation: v, kind: { group: 'batch', version: 'v1', kind: v } }));
      expect(res.statusCode).toBe(200);
    }
    await mutate(app, review(job(), { kind: { group: '', version: 'v1', kind: 'Pod' } }));
    const text = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    const series = text.split('\n').filter((l) => l.startsWith('jobharvest_admission_requests_total{'));
    expect(series).toEqual(['jobharvest_admission_requests_total{operation="other",kind="other"} 20', 'jobharvest_admission_requests_total{operation="CREATE",kind="other"} 1']);
    expect(text.length).toBeLessThan(20_000);
  });
});

describe('TLS and shutdown', () => {
  it('serves over TLS 1.2+ and finishes in-flight requests on close', async () => {
    const bundle = await generateBundle({ dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] });
    let release: () => void = () => {};
    const gate = new Promise<void>((r) => (release = r));
    const app = build({
      tls: bundle.serving,
      deps: deps({
        namespace: async (name) => {
          await gate;
          return optedIn(name);
        },
      }),
    });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const port = (app.server.address() as { port: number }).port;
    const body = JSON.stringify(review(job()));
    const call = (opts: { minVersion?: 'TLSv1'; maxVersion?: 'TLSv1.1' } = {}) =>
      new Promise<{ status: number; body: string; protocol: string }>((resolve, reject) => {
        const req = httpsRequest(
          { host: '127.0.0.1', port, path: '/mutate', method: 'POST', ca: bundle.ca.cert, servername: 'localhost', headers: { 'content-type': 'application/json' }, ...opts },
          (res) => {
            const protocol = (res.socket as import('node:tls').TLSSocket).getProtocol() ?? '';
            let b = '';
            res.on('data', (c) => (b += c));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, body: b, protocol }));
          },
        );
        req.on('error', reject);
        req.end(body);
      });
    await expect(call({ minVersion: 'TLSv1', maxVersion: 'TLSv1.1' })).rejects.toThrow(/protocol|version|alert/i);
    const inflight = call();
    await new Promise((r) => setTimeout(r, 100));
    const closing = app.close();
    release();
    const res = await inflight;
    await closing;
    expect(res.status).toBe(200);
    expect(['TLSv1.2', 'TLSv1.3']).toContain(res.protocol);
    expect(JSON.parse(res.body).response.patch).toBeDefined();
  });
});
