// Jobs that missed injection: created in an opted-in namespace while the
// webhook was unreachable (its failurePolicy let them through unpatched) or
// before the chart was installed. They run without a sidecar and carry no mark
// of jobharvest's, so the harvester tells them from Jobs skipped on purpose the
// only way that cannot drift from admission: it runs the webhook's own pure
// `decide` on them. A Job `decide` would inject today and that has no
// injection status is one the webhook never saw.
//
// Everything read here is the tenant's to write, and nothing here grants
// more than the Job could have had: a tenant who opts a Job out gets what
// opting out gives (nothing), one who forges `jobharvest.io/injected` on an
// uninjected Job is found all the same (the label is only a filter), and one
// who writes a status annotation is reported as an injection that does not
// verify, as before. Where the logs may go is still the operator's list.
import type { V1Job } from '@kubernetes/client-node';
import { STATUS_ANNOTATION } from '../src/contract/harvest.ts';
import type { VerifyingKeys } from '../src/contract/signature.ts';
import type { SinkType } from '../src/contract/env.ts';
import type { Config } from '../src/core/config.ts';
import { decide, namespaceOptIn } from '../src/core/decide.ts';
import { excludedNamespaces } from '../src/core/config.ts';
import type { NamespaceMeta } from '../src/core/kube.ts';
import { deliveryRecordOf } from './hold.ts';
import { jobFinished } from './report.ts';

export type MissedCheck =
  | { readonly missed: true; readonly sink: SinkType; readonly endpoint: string | undefined }
  | { readonly missed: false; readonly why: string };

/**
 * Whether the namespace is one whose Jobs the webhook injects (the same rule
 * as admission's); only such namespaces are kept by the harvester, and only
 * their labels and annotations. The owner-kind opt-in of a namespace that is
 * not opted in itself is not followed: the harvester reads pods only through
 * the log-reader binding the webhook keeps in opted-in namespaces.
 */
export function namespaceInjects(ns: NamespaceMeta, config: Config): boolean {
  if (excludedNamespaces(config).has(ns.name) || ns.terminating) return false;
  return namespaceOptIn(ns, config).optedIn;
}

/**
 * Whether a Job missed its injection: no injection status, in a namespace
 * that injects (`ns` is undefined for any other), and `decide` would inject
 * it. The sink and endpoint are those the sidecar would have had; the harvest
 * sends only where they match an approved destination.
 */
export function missedInjection(job: V1Job, ns: NamespaceMeta | undefined, config: Config): MissedCheck {
  if (job.metadata?.annotations?.[STATUS_ANNOTATION] !== undefined) return { missed: false, why: 'it went through the webhook (it has an injection status)' };
  if (!ns || !namespaceInjects(ns, config)) return { missed: false, why: 'its namespace is not opted in' };
  // List items come without apiVersion and kind; decide checks them.
  const d = decide({ ...job, apiVersion: 'batch/v1', kind: 'Job' }, { config, namespace: ns });
  if (d.action !== 'inject') return { missed: false, why: `the webhook skips it: ${d.reason}` };
  return { missed: true, sink: d.settings.sink, endpoint: d.settings.endpoint };
}

/**
 * The work-queue key of a Job from the watch of the Jobs without the injected
 * label, or undefined, which is the answer for nearly all of them: only a Job
 * of a namespace that injects (`injecting`: the harvester keeps nothing of any
 * other), finished, not being deleted, not yet recorded, and missed by the
 * webhook's rules becomes a key. The watch keeps no object, so what the
 * harvester holds follows these keys, not the Jobs that are not opted in.
 */
export function missedJobKey(job: V1Job, injecting: ReadonlyMap<string, NamespaceMeta>, config: Config, keys: VerifyingKeys): string | undefined {
  const namespace = job.metadata?.namespace;
  const name = job.metadata?.name;
  if (!namespace || !name || job.metadata?.deletionTimestamp || !jobFinished(job)) return undefined;
  const ns = injecting.get(namespace);
  if (!ns || deliveryRecordOf(job, keys) !== undefined) return undefined;
  return missedInjection(job, ns, config).missed ? `${namespace}/${name}` : undefined;
}
