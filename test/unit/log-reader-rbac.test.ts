import type { RbacAuthorizationV1Api } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { defaultConfig } from '../../src/core/config.ts';
import { LogReaderRbac } from '../../src/k8s/log-reader-rbac.ts';
import { toMeta } from '../../src/k8s/namespace-cache.ts';

/** Records the calls; every binding is absent, and creates fail as the API server answers in a terminating namespace when told to. */
function fakeRbac(opts: { terminating?: boolean } = {}) {
  const calls: string[] = [];
  const notFound = Object.assign(new Error('not found'), { code: 404 });
  const terminating = Object.assign(
    new Error('rolebindings "x" is forbidden: unable to create new content in namespace team-a because it is being terminated (NamespaceTerminating)'),
    { code: 403 },
  );
  const api = {
    readNamespacedRoleBinding: async ({ namespace }: { namespace: string }) => {
      calls.push(`read ${namespace}`);
      throw notFound;
    },
    createNamespacedRoleBinding: async ({ namespace }: { namespace: string }) => {
      calls.push(`create ${namespace}`);
      if (opts.terminating) throw terminating;
      return {};
    },
    deleteNamespacedRoleBinding: async ({ namespace }: { namespace: string }) => {
      calls.push(`delete ${namespace}`);
      return {};
    },
  };
  return { api: api as unknown as RbacAuthorizationV1Api, calls };
}

const optedInNs = (extra: Record<string, unknown> = {}) =>
  toMeta({
    metadata: { name: 'team-a', annotations: { 'jobharvest.io/inject': 'enabled' }, labels: { 'pod-security.kubernetes.io/enforce': 'restricted' }, ...extra },
  });

describe('log-reader RBAC and terminating namespaces', () => {
  it('binds in an opted-in api-mode namespace', async () => {
    const { api, calls } = fakeRbac();
    const logs: string[] = [];
    const r = new LogReaderRbac(api, { config: defaultConfig(), clusterRole: 'jh-log-reader', log: (_l, msg) => logs.push(msg), sidecars: true });
    r.onNamespace(optedInNs(), false);
    await r.idle();
    expect(calls).toContain('create team-a');
    expect(logs).not.toContain('log-reader RBAC change failed');
  });
  it('leaves a terminating namespace alone: it refuses new objects and takes its bindings with it', async () => {
    const { api, calls } = fakeRbac();
    const r = new LogReaderRbac(api, { config: defaultConfig(), clusterRole: 'jh-log-reader', log: () => {}, sidecars: true });
    const ns = optedInNs({ deletionTimestamp: new Date() });
    expect(ns.terminating).toBe(true);
    r.onNamespace(ns, false);
    await r.idle();
    expect(calls).toEqual([]);
  });
  it('takes a namespace that began terminating in between quietly, not as a failure', async () => {
    const { api, calls } = fakeRbac({ terminating: true });
    const warnings: string[] = [];
    const r = new LogReaderRbac(api, { config: defaultConfig(), clusterRole: 'jh-log-reader', log: (level, msg) => level === 'warn' && warnings.push(msg), sidecars: true });
    r.ensureFor('team-a');
    await r.idle();
    expect(calls).toContain('create team-a');
    expect(warnings).toEqual([]);
  });
});
