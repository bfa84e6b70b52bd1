import type { RbacAuthorizationV1Api, V1RoleBinding } from '@kubernetes/client-node';
import { excludedNamespaces, type Config } from '../core/config.ts';
import { namespaceOptIn, resolveMode } from '../core/decide.ts';
import type { NamespaceMeta } from '../core/kube.ts';
import { resolveSettings } from '../core/settings.ts';
import { messageOf, statusOf } from './errors.ts';
import { isManagedByUs, managedByLabels } from './labels.ts';
import type { Log } from './log.ts';

export interface LogReaderRbacOptions {
  config: Config;
  clusterRole: string;
  log: Log;
}

export function optedIn(ns: NamespaceMeta, config: Config): boolean {
  return !excludedNamespaces(config).has(ns.name) && namespaceOptIn(ns, config).optedIn;
}

/** Whether Jobs of this namespace run the sidecar in api mode unless a Job says otherwise. */
export function namespaceUsesApiMode(ns: NamespaceMeta, config: Config): boolean {
  const { settings } = resolveSettings(config, [{ level: 'namespace', annotations: ns.annotations }]);
  return resolveMode(settings, ns) === 'api';
}

/**
 * The RoleBinding is named after the ClusterRole it binds, so two releases
 * (each with its own ClusterRole) never fight over one binding.
 *
 * api mode reads pods/log through the API server with the pod's own service
 * account, so an opted-in namespace needs a RoleBinding of the log-reader
 * ClusterRole to its service accounts. The binding is namespaced: a sidecar can
 * read logs of its own namespace only. It is removed when the namespace opts out.
 */
export class LogReaderRbac {
  private queue: Promise<void> = Promise.resolve();

  constructor(
    private readonly rbac: RbacAuthorizationV1Api,
    private readonly opts: LogReaderRbacOptions,
  ) {}

  /** Namespace event from the cache. */
  onNamespace(ns: NamespaceMeta, deleted: boolean): void {
    if (deleted) return;
    const want = optedIn(ns, this.opts.config) && namespaceUsesApiMode(ns, this.opts.config);
    const wantGone = !optedIn(ns, this.opts.config);
    if (want) this.enqueue(() => this.ensure(ns.name));
    else if (wantGone) this.enqueue(() => this.remove(ns.name));
  }

  /** An api-mode Job was admitted (not a dry run): make sure its namespace can read logs. */
  ensureFor(namespace: string): void {
    this.enqueue(() => this.ensure(namespace));
  }

  /** Resolves when every queued change has been applied. */
  idle(): Promise<void> {
    return this.queue;
  }

  private enqueue(task: () => Promise<void>): void {
    this.queue = this.queue.then(task).catch((err) => this.opts.log('warn', 'log-reader RBAC change failed', { error: messageOf(err) }));
  }

  private desired(namespace: string): V1RoleBinding {
    return {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: { name: this.opts.clusterRole, namespace, labels: managedByLabels() },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: this.opts.clusterRole },
      subjects: [{ kind: 'Group', apiGroup: 'rbac.authorization.k8s.io', name: `system:serviceaccounts:${namespace}` }],
    };
  }

  private async ensure(namespace: string): Promise<void> {
    try {
      const cur = await this.rbac.readNamespacedRoleBinding({ name: this.opts.clusterRole, namespace });
      if (cur.roleRef?.name === this.opts.clusterRole && cur.subjects?.[0]?.name === `system:serviceaccounts:${namespace}`) return;
      // roleRef is immutable: replace by delete + create.
      await this.rbac.deleteNamespacedRoleBinding({ name: this.opts.clusterRole, namespace });
    } catch (err) {
      if (statusOf(err) !== 404) throw err;
    }
    try {
      await this.rbac.createNamespacedRoleBinding({ namespace, body: this.desired(namespace) });
      this.opts.log('info', 'log-reader RoleBinding created', { namespace });
    } catch (err) {
      if (statusOf(err) !== 409) throw err;
    }
  }

  private async remove(namespace: string): Promise<void> {
    try {
      const cur = await this.rbac.readNamespacedRoleBinding({ name: this.opts.clusterRole, namespace });
      // Never delete a binding somebody else made under the same name.
      if (!isManagedByUs(cur.metadata?.labels)) return;
      await this.rbac.deleteNamespacedRoleBinding({ name: this.opts.clusterRole, namespace });
      this.opts.log('info', 'log-reader RoleBinding removed', { namespace });
    } catch (err) {
      if (statusOf(err) !== 404) throw err;
    }
  }
}
