/**
 * Kueue's controller-manager, built from the pinned module in this folder
 * through the same cached `go build` as the test servers, and the module's
 * own manifests (CRDs, webhook configurations) read from the module cache at
 * the same version.
 */
import { execFileSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ensureGoProgram, pinnedVersion, type GoProgram } from '../servers/go-build.ts';

const here = dirname(fileURLToPath(import.meta.url));
export const KUEUE_MODULE = 'sigs.k8s.io/kueue';

const version = pinnedVersion({ name: 'kueue', pkg: '', dir: here }, KUEUE_MODULE);

export const KUEUE: GoProgram = {
  name: 'kueue',
  pkg: `${KUEUE_MODULE}/cmd/kueue`,
  dir: here,
  // What the release build stamps, so that the manager logs its version.
  stamps: { [`${KUEUE_MODULE}/pkg/version.GitVersion`]: version },
};

export function kueueVersion(): string {
  return version;
}

export function ensureKueue(log: (msg: string) => void = () => {}): string {
  return ensureGoProgram(KUEUE, log);
}

/** The pinned module's source folder in the Go module cache (downloaded if missing, checked against go.sum). */
export function kueueModuleDir(): string {
  const out = execFileSync('go', ['mod', 'download', '-json', `${KUEUE_MODULE}@${version}`], {
    cwd: here,
    env: { ...process.env, GOFLAGS: '-mod=readonly' },
    encoding: 'utf8',
  });
  const dir = (JSON.parse(out) as { Dir?: string }).Dir;
  if (!dir) throw new Error(`go mod download gave no folder for ${KUEUE_MODULE}@${version}`);
  return dir;
}

export const kueueManifests = (dir = kueueModuleDir()) => ({
  crds: join(dir, 'config/components/crd/bases'),
  webhooks: join(dir, 'config/components/webhook/manifests.yaml'),
});
