import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/cli/options.ts';
import { injectManifests, parseManifests, renderManifests } from '../../src/cli/manifests.ts';
import { build } from '../../src/http/app.ts';
import { applyPatch } from '../../src/core/patch.ts';
import type { Job } from '../../src/core/kube.ts';
import { goldenCases, type GoldenCase } from '../golden/cases.ts';

const UPDATE = process.env.JOBHARVEST_UPDATE_GOLDEN === '1';
const { cases, orphans } = goldenCases();

function cliOutput(c: GoldenCase): string {
  const config = loadConfig(c.flags);
  const { objects } = injectManifests(parseManifests(readFileSync(c.input, 'utf8'), c.input), config);
  return renderManifests(objects);
}

/** The Jobs the webhook would see for a document: a Job itself, List items, or the Job a CronJob creates. */
function jobsOf(doc: unknown): Array<{ job: Job; expectedFrom: (out: unknown) => unknown; actualFrom: (j: Job) => unknown }> {
  const o = doc as Record<string, any>;
  if (o?.kind === 'Job') return [{ job: o as Job, expectedFrom: (out) => out, actualFrom: (j) => j }];
  if (o?.kind?.endsWith?.('List')) {
    return (o.items as unknown[]).flatMap((item, i) =>
      jobsOf(item).map((x) => ({ ...x, expectedFrom: (out: unknown) => x.expectedFrom((out as any).items[i]) })),
    );
  }
  if (o?.kind === 'CronJob') {
    const tpl = o.spec.jobTemplate;
    const job: Job = { apiVersion: 'batch/v1', kind: 'Job', metadata: { ...(tpl.metadata ?? {}), namespace: o.metadata?.namespace }, spec: tpl.spec };
    return [
      {
        job,
        expectedFrom: (out) => ({ metadata: (out as any).spec.jobTemplate.metadata ?? {}, spec: (out as any).spec.jobTemplate.spec }),
        actualFrom: (j) => {
          const { namespace: _n, ...metadata } = j.metadata ?? {};
          return { metadata, spec: j.spec };
        },
      },
    ];
  }
  return [];
}

describe('golden files', () => {
  it('has cases', () => {
    expect(cases.length).toBeGreaterThanOrEqual(15);
  });

  it('has no output that no case uses', () => {
    expect(orphans, `orphaned golden outputs: ${orphans.join(', ')}`).toEqual([]);
  });

  for (const c of cases) {
    describe(c.name, () => {
      it('CLI output equals the golden file', () => {
        const actual = cliOutput(c);
        if (UPDATE) writeFileSync(c.output, actual);
        expect(existsSync(c.output), `${c.output} is missing; run npm run golden:update`).toBe(true);
        expect(actual).toBe(readFileSync(c.output, 'utf8'));
        // Idempotence: the golden output injected again is unchanged.
        const config = loadConfig(c.flags);
        const again = renderManifests(injectManifests(parseManifests(actual, c.output), config).objects);
        expect(again).toBe(actual);
      });

      it('/mutate with its patch applied equals the golden file', async () => {
        const config = loadConfig(c.flags);
        const app = build({ deps: { config, namespace: (name) => ({ name, annotations: { 'jobharvest.io/inject': 'enabled' } }), serverVersion: () => ({ major: 1, minor: 34 }) } });
        const inputs = parseManifests(readFileSync(c.input, 'utf8'), c.input);
        const outputs = parseManifests(readFileSync(c.output, 'utf8'), c.output);
        expect(outputs.length).toBe(inputs.length);
        let checked = 0;
        for (const [i, doc] of inputs.entries()) {
          for (const { job, expectedFrom, actualFrom } of jobsOf(doc)) {
            const namespace = job.metadata?.namespace ?? 'default';
            const res = await app.inject({
              method: 'POST',
              url: '/mutate',
              payload: {
                apiVersion: 'admission.k8s.io/v1',
                kind: 'AdmissionReview',
                request: {
                  uid: `uid-${c.name}-${i}`,
                  kind: { group: 'batch', version: 'v1', kind: 'Job' },
                  resource: { group: 'batch', version: 'v1', resource: 'jobs' },
                  operation: 'CREATE',
                  namespace,
                  object: job,
                },
              },
            });
            expect(res.statusCode).toBe(200);
            const response = res.json().response;
            expect(response.allowed).toBe(true);
            expect(response.uid).toBe(`uid-${c.name}-${i}`);
            const patch = response.patch ? JSON.parse(Buffer.from(response.patch, 'base64').toString('utf8')) : [];
            const patched = applyPatch(job, patch);
            if (job.metadata?.namespace === undefined) delete patched.metadata?.namespace;
            expect(actualFrom(patched)).toEqual(expectedFrom(outputs[i]));
            checked++;
          }
        }
        await app.close();
        expect(checked).toBeGreaterThan(0);
      });
    });
  }
});
