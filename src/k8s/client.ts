import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';

/**
 * The kubeconfig to use: an explicit file, then in-cluster, then $KUBECONFIG or
 * ~/.kube/config. Undefined when there is none, which means standalone mode.
 */
export function loadKubeConfig(explicit?: string): KubeConfig | undefined {
  const kc = new KubeConfig();
  if (explicit) {
    kc.loadFromFile(explicit);
    return kc;
  }
  if (process.env.KUBERNETES_SERVICE_HOST && existsSync('/var/run/secrets/kubernetes.io/serviceaccount/token')) {
    kc.loadFromCluster();
    return kc;
  }
  const envPath = process.env.KUBECONFIG?.split(':').find((p) => p && existsSync(p));
  const home = join(homedir(), '.kube', 'config');
  const file = envPath ?? (existsSync(home) ? home : undefined);
  if (!file) return undefined;
  kc.loadFromFile(file);
  return kc;
}
