import type { Operation } from 'fast-json-patch';
import type { ReviewDeps } from '../../src/core/admission.ts';
import { defaultConfig, parseConfig, type Config } from '../../src/core/config.ts';
import type { NamespaceMeta } from '../../src/core/kube.ts';

/** A config whose sink keeps the logs, so that injected Jobs get a TTL. */
export function durableConfig(over: Record<string, unknown> = {}): Config {
  return parseConfig({ sink: { type: 'http', endpoint: 'http://logs.example:8080/ingest' }, ...over });
}

export function job(name = 'job', extra: Record<string, unknown> = {}): Record<string, any> {
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: { name, namespace: 'team-a' },
    spec: {
      template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: 'busybox:1.36', command: ['sh', '-c', 'echo hi'] }] } },
    },
    ...extra,
  };
}

export function review(object: unknown, request: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid: 'b7d4c1e2-0000-4000-8000-000000000001',
      kind: { group: 'batch', version: 'v1', kind: 'Job' },
      resource: { group: 'batch', version: 'v1', resource: 'jobs' },
      operation: 'CREATE',
      namespace: 'team-a',
      object,
      ...request,
    },
  };
}

export const optedIn = (name: string, extra: Partial<NamespaceMeta> = {}): NamespaceMeta => ({
  name,
  annotations: { 'jobharvest.io/inject': 'enabled', ...(extra.annotations ?? {}) },
  labels: { ...(extra.labels ?? {}) },
});

export function deps(over: Partial<ReviewDeps> & { config?: Config } = {}): ReviewDeps {
  return {
    config: over.config ?? defaultConfig(),
    namespace: over.namespace ?? ((name: string) => optedIn(name)),
    serverVersion: over.serverVersion ?? (() => ({ major: 1, minor: 34 })),
    ...(over.assumeOptedIn ? { assumeOptedIn: over.assumeOptedIn } : {}),
  };
}

export function decodePatch(response: { patch?: string }): Operation[] {
  return response.patch ? JSON.parse(Buffer.from(response.patch, 'base64').toString('utf8')) : [];
}
