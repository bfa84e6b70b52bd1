/**
 * What the smoke test of the version matrix expects of a release, from the
 * feature-gate tables of Kubernetes (pkg/features/kube_features.go).
 */

/** PodLevelResources: alpha (off by default) in 1.32 and 1.33, beta and on by default from 1.34. */
export const POD_LEVEL_RESOURCES_SINCE = 34;

export function podLevelResourcesByDefault(minor: number): boolean {
  return minor >= POD_LEVEL_RESOURCES_SINCE;
}
