/**
 * What an e2e test uses to reach the cluster that global-setup.ts started:
 *
 *   const cluster = useCluster();
 *   const { core, batch } = cluster;
 *   const ns = await createTestNamespace(core, 'webhook', { 'jobharvest.io/inject': 'enabled' });
 */
import {
  AdmissionregistrationV1Api,
  BatchV1Api,
  CoreV1Api,
  KubeConfig,
  KubernetesObjectApi,
  VersionApi,
} from '@kubernetes/client-node';
import { randomBytes } from 'node:crypto';
import { inject } from 'vitest';
import type { ClusterInfo } from './harness.ts';

export { waitFor } from '../../support/wait.ts';
export type { ClusterInfo } from './harness.ts';

export function kubeConfigFor(info: ClusterInfo): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'jobharvest-test', server: info.server, caData: Buffer.from(info.caPem).toString('base64') }],
    users: [{ name: 'admin', token: info.token }],
    contexts: [{ name: 'jobharvest-test', cluster: 'jobharvest-test', user: 'admin' }],
    currentContext: 'jobharvest-test',
  });
  return kc;
}

export interface ClusterClients {
  info: ClusterInfo;
  kc: KubeConfig;
  core: CoreV1Api;
  batch: BatchV1Api;
  admission: AdmissionregistrationV1Api;
  version: VersionApi;
  /** Generic create/patch/delete of any object, e.g. from a manifest. */
  objects: KubernetesObjectApi;
}

export function clientsFor(info: ClusterInfo): ClusterClients {
  const kc = kubeConfigFor(info);
  return {
    info,
    kc,
    core: kc.makeApiClient(CoreV1Api),
    batch: kc.makeApiClient(BatchV1Api),
    admission: kc.makeApiClient(AdmissionregistrationV1Api),
    version: kc.makeApiClient(VersionApi),
    objects: KubernetesObjectApi.makeApiClient(kc),
  };
}

/** The cluster of this e2e run, with typed API clients. Call inside a test file. */
export function useCluster(): ClusterClients {
  return clientsFor(inject('cluster'));
}

/** A namespace with a unique name, so test files never see each other's objects. */
export async function createTestNamespace(
  core: CoreV1Api,
  prefix: string,
  annotations: Record<string, string> = {},
  labels: Record<string, string> = {},
): Promise<string> {
  const name = `${prefix}-${randomBytes(3).toString('hex')}`;
  await core.createNamespace({ body: { metadata: { name, annotations, labels } } });
  return name;
}
