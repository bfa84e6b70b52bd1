// Objects the webhook creates carry this label; the definition is shared with
// the uninstall hook, which deletes only objects that carry it.
export { MANAGED_BY, MANAGED_BY_LABEL, isManagedByUs, managedByLabels } from '../contract/managed-by.ts';
