import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { build } from '../../src/http/app.ts';
import { applyPatch } from '../../src/core/patch.ts';
import { decodePatch, deps, job, review } from '../support/fixtures.ts';

const app = build({ deps: deps() });

/** Sets a random JSON value at a random path of a valid review: shapes the API server never sends. */
function mutateAt(doc: unknown, path: string[], value: unknown): unknown {
  if (path.length === 0) return value;
  const [head, ...rest] = path;
  const base = typeof doc === 'object' && doc !== null ? (Array.isArray(doc) ? [...doc] : { ...(doc as object) }) : {};
  (base as Record<string, unknown>)[head!] = mutateAt((doc as Record<string, unknown> | null)?.[head!], rest, value);
  return base;
}

const paths = fc.constantFrom<string[]>(
  ['request'],
  ['request', 'uid'],
  ['request', 'object'],
  ['request', 'object', 'metadata'],
  ['request', 'object', 'metadata', 'annotations'],
  ['request', 'object', 'metadata', 'annotations', 'jobharvest.io/ttl-seconds-after-finished'],
  ['request', 'object', 'metadata', 'annotations', 'jobharvest.io/inject'],
  ['request', 'object', 'spec'],
  ['request', 'object', 'spec', 'template'],
  ['request', 'object', 'spec', 'template', 'spec'],
  ['request', 'object', 'spec', 'template', 'spec', 'containers'],
  ['request', 'object', 'spec', 'template', 'spec', 'initContainers'],
  ['request', 'object', 'spec', 'template', 'spec', 'volumes'],
  ['request', 'object', 'spec', 'template', 'metadata'],
  ['request', 'object', 'spec', 'ttlSecondsAfterFinished'],
  ['request', 'namespace'],
  ['request', 'operation'],
  ['request', 'kind'],
  ['request', 'dryRun'],
  ['kind'],
  ['apiVersion'],
);

async function check(payload: string, uid: unknown) {
  const res = await app.inject({ method: 'POST', url: '/mutate', payload, headers: { 'content-type': 'application/json' } });
  expect([200, 400]).toContain(res.statusCode);
  if (res.statusCode === 200) {
    const body = res.json();
    expect(body.apiVersion).toBe('admission.k8s.io/v1');
    expect(body.kind).toBe('AdmissionReview');
    expect(body.response.uid).toBe(uid);
    expect(body.response.allowed).toBe(true);
    if (body.response.patch) {
      // Whatever came in, a patch that goes out must apply to it.
      const object = JSON.parse(payload).request.object;
      expect(() => applyPatch(object, decodePatch(body.response))).not.toThrow();
    }
  } else {
    expect(res.json().code).toBe('JH_BAD_REQUEST');
  }
}

describe('property: /mutate never crashes and never denies', () => {
  it('survives random values at any place of a valid review', async () => {
    await fc.assert(
      fc.asyncProperty(paths, fc.jsonValue({ maxDepth: 4 }), fc.uuid(), async (path, value, uid) => {
        const base = review(job(), { uid });
        const doc = mutateAt(base, path, value) as { request?: { uid?: unknown } };
        const payload = JSON.stringify(doc);
        const sentUid = typeof doc === 'object' && doc && typeof doc.request === 'object' && doc.request ? doc.request.uid : undefined;
        await check(payload, sentUid);
      }),
      { numRuns: 400 },
    );
  });

  it('survives entirely random JSON bodies', async () => {
    await fc.assert(
      fc.asyncProperty(fc.jsonValue({ maxDepth: 5 }), async (value) => {
        const payload = JSON.stringify(value) ?? 'null';
        const res = await app.inject({ method: 'POST', url: '/mutate', payload, headers: { 'content-type': 'application/json' } });
        expect([200, 400]).toContain(res.statusCode);
        if (res.statusCode === 200) expect(res.json().response.allowed).toBe(true);
      }),
      { numRuns: 300 },
    );
  });

  it('survives random annotation values on an opted-in Job', async () => {
    const keys = ['inject', 'mode', 'sink', 'endpoint', 'ttl-seconds-after-finished', 'drain-seconds', 'auth-secret', 'tls-secret', 'es-index', 'loki-tenant', 'forward-tag', 'otlp-encoding', 'status'].map((k) => `jobharvest.io/${k}`);
    await fc.assert(
      fc.asyncProperty(fc.dictionary(fc.constantFrom(...keys), fc.string({ maxLength: 80 })), fc.uuid(), async (annotations, uid) => {
        const j = job();
        j.metadata.annotations = annotations;
        await check(JSON.stringify(review(j, { uid })), uid);
      }),
      { numRuns: 300 },
    );
  });
});
