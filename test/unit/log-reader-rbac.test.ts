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
    r.onNamespace(optedInNs(), false);
    await r.idle();
    expect(calls).toContain('create team-a');
    expect(warnings).toEqual([]);
  });
});

describe('log-reader RBAC and bindings it did not make', () => {
  /** One binding of the reconciler's name exists, with these labels and subjects. */
  function existing(labels: Record<string, string> | undefined) {
    const calls: string[] = [];
    const api = {
      readNamespacedRoleBinding: async ({ namespace }: { namespace: string }) => {
        calls.push(`read ${namespace}`);
        return {
          metadata: { name: 'jh-log-reader', namespace, ...(labels ? { labels } : {}) },
          roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'jh-log-reader' },
          subjects: [{ kind: 'ServiceAccount', name: 'only-this-one', namespace }],
        };
      },
      createNamespacedRoleBinding: async ({ namespace }: { namespace: string }) => {
        calls.push(`create ${namespace}`);
        return {};
      },
      deleteNamespacedRoleBinding: async ({ namespace }: { namespace: string }) => {
        calls.push(`delete ${namespace}`);
        return {};
      },
    };
    return { api: api as unknown as RbacAuthorizationV1Api, calls };
  }

  it('leaves a same-named binding somebody else made as it is, and says so', async () => {
    const { api, calls } = existing(undefined);
    const warnings: string[] = [];
    const r = new LogReaderRbac(api, { config: defaultConfig(), clusterRole: 'jh-log-reader', log: (level, msg) => level === 'warn' && warnings.push(msg), sidecars: true });
    r.onNamespace(optedInNs(), false);
    await r.idle();
    expect(calls).toEqual(['read team-a']);
    expect(warnings.join()).toMatch(/not made by jobharvest/);
  });

  it('replaces its own binding when it no longer matches (the check above can fail)', async () => {
    const { api, calls } = existing({ 'app.kubernetes.io/managed-by': 'jobharvest' });
    const r = new LogReaderRbac(api, { config: defaultConfig(), clusterRole: 'jh-log-reader', log: () => {}, sidecars: true });
    r.onNamespace(optedInNs(), false);
    await r.idle();
    expect(calls).toEqual(['read team-a', 'delete team-a', 'create team-a']);
  });
});

describe('log-reader RBAC follows the namespace only', () => {
  it('binds nothing for the namespaces\' service accounts in a node-mode namespace, whatever its Jobs say', async () => {
    const { api, calls } = fakeRbac();
    const r = new LogReaderRbac(api, { config: defaultConfig(), clusterRole: 'jh-log-reader', log: () => {}, sidecars: true });
    r.onNamespace(toMeta({ metadata: { name: 'team-a', annotations: { 'jobharvest.io/inject': 'enabled' } } }), false);
    await r.idle();
    expect(calls).toEqual([]);
  });
});
