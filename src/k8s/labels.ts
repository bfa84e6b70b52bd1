/**
 * Marks objects the webhook creates, so that it only ever deletes or rewrites
 * its own (a RoleBinding of the same name made by someone else is left alone).
 */
export const MANAGED_BY_LABEL = 'app.kubernetes.io/managed-by';
export const MANAGED_BY = 'jobharvest';

export function managedByLabels(): Record<string, string> {
  return { [MANAGED_BY_LABEL]: MANAGED_BY };
}

export function isManagedByUs(labels: Record<string, string> | undefined): boolean {
  return labels?.[MANAGED_BY_LABEL] === MANAGED_BY;
}
