/** The real-node suite's describe block; it lives in test/support/ because the version matrix uses it too. */
import { DEFAULT_CONTROLLERS } from '../harness/cluster/harness.ts';

export { describeRealNode } from '../support/real-node.ts';

/**
 * Controllers a real cluster runs that the chart's install needs: Deployments
 * and their ReplicaSets for the webhook, EndpointSlices for the API server's
 * endpoint routing and kube-proxy, and the disruption controller, without
 * which `helm install --wait` never sees the PodDisruptionBudget current.
 */
export const CHART_CONTROLLERS = [
  ...DEFAULT_CONTROLLERS,
  'node-lifecycle-controller',
  'deployment-controller',
  'replicaset-controller',
  'endpointslice-controller',
  'disruption-controller',
];
