/**
 * vitest globalSetup of the e2e project: one control plane for the whole run,
 * handed to the tests with `inject('cluster')` (see client.ts).
 */
import type { TestProject } from 'vitest/node';
import { startCluster, type ClusterInfo } from './harness.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    cluster: ClusterInfo;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const started = Date.now();
  const cluster = await startCluster();
  console.error(
    `test cluster: Kubernetes ${cluster.versions.kubernetes} at ${cluster.server} ` +
      `(started in ${((Date.now() - started) / 1000).toFixed(1)} s, kubeconfig ${cluster.kubeconfigPath})`,
  );
  const { processes: _processes, stop: _stop, ...info } = cluster;
  project.provide('cluster', info);

  return async () => {
    const state = project.vitest.state;
    const failed = state.getCountOfFailedTests() > 0 || state.getFailedFilepaths().length > 0;
    await cluster.stop({ failed });
  };
}
