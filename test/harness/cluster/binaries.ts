import { accessSync, constants, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { selectedKubernetes } from '../versions/select.ts';

export const DEFAULT_BIN_DIR = join(dirname(fileURLToPath(import.meta.url)), 'bin');

export interface Versions {
  kubernetes: string;
  etcd: string;
  helm: string;
  go: string;
}

export interface Binaries {
  dir: string;
  etcd: string;
  kubeApiserver: string;
  kubeControllerManager: string;
  helm: string;
  versions: Versions;
}

/**
 * The binaries `npm run cluster:build` linked into `dir`, with the versions it
 * built. Without a `dir`, a release selected by the version matrix
 * (versions/select.ts) replaces etcd and the control plane; helm stays.
 */
export function locateBinaries(dir?: string): Binaries {
  const defaults = locateIn(dir ?? DEFAULT_BIN_DIR);
  const selected = dir === undefined ? selectedKubernetes() : undefined;
  if (selected === undefined) return defaults;
  return {
    ...defaults,
    etcd: join(selected.dir, 'etcd'),
    kubeApiserver: join(selected.dir, 'kube-apiserver'),
    kubeControllerManager: join(selected.dir, 'kube-controller-manager'),
    versions: { ...defaults.versions, kubernetes: selected.kubernetes, etcd: selected.etcd },
  };
}

function locateIn(dir: string): Binaries {
  const bins = {
    dir,
    etcd: join(dir, 'etcd'),
    kubeApiserver: join(dir, 'kube-apiserver'),
    kubeControllerManager: join(dir, 'kube-controller-manager'),
    helm: join(dir, 'helm'),
  };
  try {
    for (const path of [bins.etcd, bins.kubeApiserver, bins.kubeControllerManager, bins.helm]) {
      accessSync(path, constants.X_OK);
    }
    const versions = JSON.parse(readFileSync(join(dir, 'versions.json'), 'utf8')) as Versions;
    return { ...bins, versions };
  } catch (err) {
    throw new Error(
      `the test cluster binaries are missing or incomplete in ${dir}; run \`npm run cluster:build\` (${(err as Error).message})`,
      { cause: err },
    );
  }
}
