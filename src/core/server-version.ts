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
