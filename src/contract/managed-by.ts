// The label on every object the webhook creates at run time (the log-reader
// RoleBindings, the certificate and signing Secrets): the webhook only ever
// rewrites or deletes objects carrying it, and the uninstall hook
// (harvester/uninstall.ts) deletes only those, so a RoleBinding or Secret of
// the same name that somebody else made is left alone.

export const MANAGED_BY_LABEL = 'app.kubernetes.io/managed-by';
export const MANAGED_BY = 'jobharvest';

export function managedByLabels(): Record<string, string> {
  return { [MANAGED_BY_LABEL]: MANAGED_BY };
}

export function isManagedByUs(labels: Record<string, string> | undefined): boolean {
  return labels?.[MANAGED_BY_LABEL] === MANAGED_BY;
}

/**
 * The RoleBindings of the log-reader ClusterRole the webhook keeps in opted-in
 * namespaces: one named after the role, for api-mode sidecars, and one with
 * `-webhook`, for the harvester. Named after the role, so two releases never
 * share one.
 */
export function logReaderBindingNames(clusterRole: string): { sidecars: string; harvester: string } {
  return { sidecars: clusterRole, harvester: `${clusterRole}-webhook` };
}
