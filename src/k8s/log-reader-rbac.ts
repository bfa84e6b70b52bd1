import type { RbacAuthorizationV1Api, V1RoleBinding } from '@kubernetes/client-node';
import { logReaderBindingNames } from '../contract/managed-by.ts';
import { excludedNamespaces, type Config } from '../core/config.ts';
import { namespaceMode, namespaceOptIn } from '../core/decide.ts';
import type { NamespaceMeta } from '../core/kube.ts';
import { messageOf, statusOf } from './errors.ts';
import { isManagedByUs, managedByLabels } from './labels.ts';
import type { Log } from '../contract/log.ts';

export interface LogReaderRbacOptions {
  config: Config;
  clusterRole: string;
  log: Log;
  /** Bind the log reader for api-mode sidecars (the namespace's service accounts) in api-mode namespaces. */
  sidecars?: boolean;
  /**
   * The webhook's own service account: bound to the log reader in every
   * opted-in namespace, whatever the mode, so the delivery report and the
   * harvester read pods and pods/log there and nowhere else.
   */
  webhook?: { serviceAccount: string; namespace: string } | undefined;
}

/** Name of the binding that lets the webhook read pods and their logs in a namespace. */
export function webhookBindingName(clusterRole: string): string {
  return logReaderBindingNames(clusterRole).harvester;
}

type Subject = NonNullable<V1RoleBinding['subjects']>[number];

export function optedIn(ns: NamespaceMeta, config: Config): boolean {
  return !excludedNamespaces(config).has(ns.name) && namespaceOptIn(ns, config).optedIn;
}

/** Whether Jobs of this namespace run the sidecar in api mode unless a Job says otherwise. */
export function namespaceUsesApiMode(ns: NamespaceMeta, config: Config): boolean {
  return namespaceMode(ns, config) === 'api';
}

/**
 * The RoleBinding is named after the ClusterRole it binds, so two releases
 * (each with its own ClusterRole) never fight over one binding.
 *
 * api mode reads pods/log through the API server with the pod's own service
 * account, so an opted-in namespace needs a RoleBinding of the log-reader
 * ClusterRole to its service accounts. The binding is namespaced: a sidecar can
 * read logs of its own namespace only. It is removed when the namespace opts out.
 *
 * Namespace events are the only thing that binds: never an admission. A
 * review's content (a Job's annotations, or a review anyone who reaches the
 * Service can forge) decides nothing here; the namespace's own annotations and
 * labels, which only the operator writes, decide everything.
 */
export class LogReaderRbac {
  private queue: Promise<void> = Promise.resolve();

  constructor(
    private readonly rbac: RbacAuthorizationV1Api,
    private readonly opts: LogReaderRbacOptions,
  ) {}

  /** Namespace event from the cache. */
  onNamespace(ns: NamespaceMeta, deleted: boolean): void {
    // A terminating namespace takes its bindings with it, and refuses new ones.
    if (deleted || ns.terminating) return;
    const inOpt = optedIn(ns, this.opts.config);
    const sidecars = this.sidecarBinding(ns.name);
    const webhook = this.webhookBinding(ns.name);
    if (sidecars) {
      if (inOpt && namespaceUsesApiMode(ns, this.opts.config)) this.enqueue(() => this.ensure(ns.name, sidecars));
      else if (!inOpt) this.enqueue(() => this.remove(ns.name, sidecars.name));
    }
    if (webhook) {
      if (inOpt) this.enqueue(() => this.ensure(ns.name, webhook));
      else this.enqueue(() => this.remove(ns.name, webhook.name));
    }
  }

  private sidecarBinding(namespace: string): { name: string; subject: Subject } | undefined {
    if (this.opts.sidecars === false) return undefined;
    return { name: logReaderBindingNames(this.opts.clusterRole).sidecars, subject: { kind: 'Group', apiGroup: 'rbac.authorization.k8s.io', name: `system:serviceaccounts:${namespace}` } };
  }

  private webhookBinding(_namespace: string): { name: string; subject: Subject } | undefined {
    const w = this.opts.webhook;
    if (!w) return undefined;
    return { name: webhookBindingName(this.opts.clusterRole), subject: { kind: 'ServiceAccount', name: w.serviceAccount, namespace: w.namespace } };
  }

  /** Resolves when every queued change has been applied. */
  idle(): Promise<void> {
    return this.queue;
  }

  private enqueue(task: () => Promise<void>): void {
    this.queue = this.queue.then(task).catch((err) => this.opts.log('warn', 'log-reader RBAC change failed', { error: messageOf(err) }));
  }

  private desired(namespace: string, b: { name: string; subject: Subject }): V1RoleBinding {
    return {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata: { name: b.name, namespace, labels: managedByLabels() },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: this.opts.clusterRole },
      subjects: [b.subject],
    };
  }

  private async ensure(namespace: string, b: { name: string; subject: Subject }): Promise<void> {
    try {
      const cur = await this.rbac.readNamespacedRoleBinding({ name: b.name, namespace });
      const s = cur.subjects?.[0];
      if (cur.roleRef?.name === this.opts.clusterRole && cur.subjects?.length === 1 && s?.kind === b.subject.kind && s?.name === b.subject.name && (s?.namespace ?? '') === (b.subject.namespace ?? '')) return;
      // Never replace a binding somebody else made under the same name: it is
      // theirs, and deleting it could take away what they granted.
      if (!isManagedByUs(cur.metadata?.labels)) {
        this.opts.log('warn', 'a RoleBinding of the log reader\'s name exists and was not made by jobharvest; left as it is', { namespace, binding: b.name });
        return;
      }
      // roleRef is immutable: replace by delete + create.
      await this.rbac.deleteNamespacedRoleBinding({ name: b.name, namespace });
    } catch (err) {
      if (statusOf(err) !== 404) throw err;
    }
    try {
      await this.rbac.createNamespacedRoleBinding({ namespace, body: this.desired(namespace, b) });
      this.opts.log('info', 'log-reader RoleBinding created', { namespace, binding: b.name });
    } catch (err) {
      if (statusOf(err) === 409) return;
      // The namespace began terminating after the event that asked for this.
      if (statusOf(err) === 403 && /NamespaceTerminating|is being terminated/.test(messageOf(err))) return;
      throw err;
    }
  }

  private async remove(namespace: string, name: string): Promise<void> {
    try {
      const cur = await this.rbac.readNamespacedRoleBinding({ name, namespace });
      // Never delete a binding somebody else made under the same name.
      if (!isManagedByUs(cur.metadata?.labels)) return;
      await this.rbac.deleteNamespacedRoleBinding({ name, namespace });
      this.opts.log('info', 'log-reader RoleBinding removed', { namespace, binding: name });
    } catch (err) {
      if (statusOf(err) !== 404) throw err;
    }
  }
}
