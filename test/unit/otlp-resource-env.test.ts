import { describe, expect, it } from 'vitest';
import { ENV } from '../../src/contract/env.ts';
import { serviceLinkCanSet } from '../../src/contract/service-links.ts';
import { parseConfig } from '../../src/core/config.ts';
import { inject } from '../../src/core/inject.ts';
import type { Obj } from '../../src/core/kube.ts';
import { globalSettings } from '../../src/core/settings.ts';
import { job } from '../support/fixtures.ts';

const config = parseConfig({ sink: { type: 'otlp', endpoint: 'http://otel.example:4318' } });

function sidecarEnv(input: Record<string, unknown>): Record<string, unknown> {
  const { job: out } = inject({ job: input as never, settings: globalSettings(config), mode: 'node', ttlSecondsAfterFinished: null, config });
  const env = (out.spec!.template!.spec!.initContainers![0]!.env ?? []) as Obj[];
  return Object.fromEntries(env.map((e) => [String(e.name), e.value ?? e.valueFrom]));
}

const withTemplateMeta = (metadata: Record<string, unknown>) => {
  const j = job('etl');
  j.spec.template.metadata = metadata;
  return j;
};

describe('the OTLP resource env the webhook renders', () => {
  it("the Job's uid from the Job controller's pod label, on every sidecar", () => {
    expect(sidecarEnv(job('a'))[ENV.JOB_UID.name]).toEqual({ fieldRef: { apiVersion: 'v1', fieldPath: "metadata.labels['batch.kubernetes.io/controller-uid']" } });
  });

  it("a CronJob's run: its name and uid from the Job's controller reference; no CronJob, no variable", () => {
    const run = job('nightly-29000000', { metadata: { name: 'nightly-29000000', namespace: 'team-a', ownerReferences: [{ apiVersion: 'batch/v1', kind: 'CronJob', name: 'nightly', uid: 'cj-uid', controller: true }] } });
    expect(sidecarEnv(run)).toMatchObject({ [ENV.CRONJOB_NAME.name]: 'nightly', [ENV.CRONJOB_UID.name]: 'cj-uid' });
    const other = job('x', { metadata: { name: 'x', namespace: 'team-a', ownerReferences: [{ apiVersion: 'example.com/v1', kind: 'CronJob', name: 'y', uid: 'u', controller: true }] } });
    expect(sidecarEnv(other)).not.toHaveProperty(ENV.CRONJOB_NAME.name);
    expect(sidecarEnv(job('z'))).not.toHaveProperty(ENV.CRONJOB_NAME.name);
  });

  it("service.name: the template's resource.opentelemetry.io/service.name annotation, else its app.kubernetes.io/name label, else unset (the sidecar falls back)", () => {
    expect(sidecarEnv(withTemplateMeta({ annotations: { 'resource.opentelemetry.io/service.name': 'billing' }, labels: { 'app.kubernetes.io/name': 'etl' } }))[ENV.SERVICE_NAME.name]).toBe('billing');
    expect(sidecarEnv(withTemplateMeta({ labels: { 'app.kubernetes.io/name': 'etl' } }))[ENV.SERVICE_NAME.name]).toBe('etl');
    expect(sidecarEnv(job('plain'))).not.toHaveProperty(ENV.SERVICE_NAME.name);
  });

  it('no Service of the namespace can set them through service links', () => {
    for (const v of [ENV.JOB_UID, ENV.CRONJOB_NAME, ENV.CRONJOB_UID, ENV.SERVICE_NAME]) expect(serviceLinkCanSet(v.name), v.name).toBe(false);
  });
});
