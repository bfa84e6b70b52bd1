/**
 * The oldest Kubernetes minor jobharvest supports: the oldest release the
 * version matrix (`npm run test:versions`, docs/operations.md) passes on. The
 * chart's `kubeVersion` (charts/jobharvest/Chart.yaml), which makes Helm
 * refuse an older cluster, and the README say the same; a unit test holds
 * them to this value.
 */
export const MIN_KUBERNETES = { major: 1, minor: 32 } as const;
