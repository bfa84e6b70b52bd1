/**
 * Which Kubernetes release a run tests. By default the pins of
 * test/harness/cluster and test/harness/node (1.37); the version matrix
 * (`npm run test:versions`) sets JOBHARVEST_KUBERNETES_BIN to the folder that
 * versions/build.sh built one minor into, and the control plane (etcd,
 * kube-apiserver, kube-controller-manager) and the node's kubelet, kube-proxy
 * and kube-scheduler then come from there. Helm, kubectl and containerd stay
 * the default pins'.
 */
import { accessSync, constants, readFileSync } from 'node:fs';
import { join } from 'node:path';

export const KUBERNETES_BIN_ENV = 'JOBHARVEST_KUBERNETES_BIN';

export interface SelectedKubernetes {
  dir: string;
  /** e.g. v1.32.13, as versions.json records the build. */
  kubernetes: string;
  etcd: string;
  minor: number;
  /** Wall time of the build that produced the folder, in seconds. */
  buildSeconds: number;
}

export const MATRIX_BINARIES = ['etcd', 'kube-apiserver', 'kube-controller-manager', 'kubelet', 'kube-proxy', 'kube-scheduler'] as const;

/** The binaries of one minor in `dir`, checked; throws with what is missing. */
export function readSelection(dir: string): SelectedKubernetes {
  try {
    for (const name of MATRIX_BINARIES) accessSync(join(dir, name), constants.X_OK);
    const v = JSON.parse(readFileSync(join(dir, 'versions.json'), 'utf8')) as { kubernetes: string; etcd: string; buildSeconds: number };
    const minor = /^v1\.(\d+)\./.exec(v.kubernetes)?.[1];
    if (minor === undefined) throw new Error(`versions.json names no 1.x release: ${v.kubernetes}`);
    return { dir, kubernetes: v.kubernetes, etcd: v.etcd, minor: Number(minor), buildSeconds: v.buildSeconds };
  } catch (err) {
    throw new Error(`${KUBERNETES_BIN_ENV}=${dir} holds no complete build of test/harness/versions/build.sh (${(err as Error).message})`, { cause: err });
  }
}

/** The release under test when the matrix selected one, else undefined (the default pins). */
export function selectedKubernetes(): SelectedKubernetes | undefined {
  const dir = process.env[KUBERNETES_BIN_ENV];
  return dir === undefined || dir === '' ? undefined : readSelection(dir);
}
