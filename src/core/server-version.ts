import { MIN_KUBERNETES } from '../contract/kubernetes.ts';

export interface ServerVersion {
  major: number;
  minor: number;
}

/**
 * Parses the major/minor pair of the API server's /version. Managed clusters
 * report minors like "29+", so trailing non-digits are ignored.
 */
export function parseServerVersion(v: { major?: string; minor?: string; gitVersion?: string }): ServerVersion | undefined {
  const major = Number.parseInt(v.major ?? '', 10);
  const minor = Number.parseInt(v.minor ?? '', 10);
  if (Number.isFinite(major) && Number.isFinite(minor)) return { major, minor };
  const m = /^v?(\d+)\.(\d+)/.exec(v.gitVersion ?? '');
  return m ? { major: Number(m[1]), minor: Number(m[2]) } : undefined;
}

/** Native sidecars (init containers with restartPolicy Always) are on by default from 1.29. */
export function supportsNativeSidecars(v: ServerVersion): boolean {
  return v.major > 1 || (v.major === 1 && v.minor >= 29);
}

/**
 * Whether a cluster is at or above the oldest release jobharvest is tested on
 * (MIN_KUBERNETES). An older one still gets the sidecar where it has native
 * sidecars: this only says what to report, never whether to admit a Job.
 */
export function isSupportedKubernetes(v: ServerVersion, min: ServerVersion = MIN_KUBERNETES): boolean {
  return v.major > min.major || (v.major === min.major && v.minor >= min.minor);
}

/** The log line the webhook writes at start about the cluster's release. */
export function kubernetesSupportMessage(gitVersion: string, v: ServerVersion, min: ServerVersion = MIN_KUBERNETES): string {
  const oldest = `${min.major}.${min.minor}`;
  if (isSupportedKubernetes(v, min)) return `Kubernetes ${gitVersion} is supported (${oldest} or newer)`;
  const effect = supportsNativeSidecars(v)
    ? 'Jobs are still admitted and injected, but this release is not tested'
    : 'Jobs are admitted without the log sidecar';
  return `Kubernetes ${gitVersion} is older than ${oldest}, the oldest supported release: ${effect}; upgrade the cluster`;
}
