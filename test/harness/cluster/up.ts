/**
 * Starts the test cluster by hand for debugging and keeps it up until Ctrl-C:
 *   npx tsx test/harness/cluster/up.ts
 *   KUBECONFIG=<printed path> helm ... / curl ...
 */
import { startCluster } from './harness.ts';

const cluster = await startCluster();
console.log(`Kubernetes ${cluster.versions.kubernetes}, etcd ${cluster.versions.etcd} at ${cluster.server}`);
console.log(`export KUBECONFIG=${cluster.kubeconfigPath}`);
console.log(`logs: ${cluster.logsDir}; press Ctrl-C to stop`);

let stopping = false;
const shutdown = (): void => {
  if (stopping) return;
  stopping = true;
  void cluster.stop().then(() => process.exit(0));
};
process.on('SIGINT', shutdown);
process.on('SIGTERM', shutdown);
