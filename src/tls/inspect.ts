import { X509Certificate } from 'node:crypto';

/** Splits a PEM bundle into its certificates, in order. */
export function splitPem(bundle: string): string[] {
  return bundle.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g)?.map((s) => `${s}\n`) ?? [];
}

export interface CertInfo {
  notBefore: Date;
  notAfter: Date;
  fingerprint256: string;
}

export function certInfo(pem: string): CertInfo {
  const c = new X509Certificate(pem);
  return { notBefore: new Date(c.validFrom), notAfter: new Date(c.validTo), fingerprint256: c.fingerprint256 };
}

/** Fraction of the certificate's lifetime still ahead at `now` (1 = brand new, 0 = expired). */
export function remainingFraction(pem: string, now: Date): number {
  const { notBefore, notAfter } = certInfo(pem);
  const life = notAfter.getTime() - notBefore.getTime();
  return life <= 0 ? 0 : Math.max(0, (notAfter.getTime() - now.getTime()) / life);
}

export function secondsUntilExpiry(pem: string, now: Date): number {
  return (certInfo(pem).notAfter.getTime() - now.getTime()) / 1000;
}

/** True when `leafPem` was signed by one of the CAs in `bundle`. */
export function issuedByAny(leafPem: string, bundle: string): boolean {
  const leaf = new X509Certificate(leafPem);
  return splitPem(bundle).some((caPem) => {
    const ca = new X509Certificate(caPem);
    return leaf.checkIssued(ca) && leaf.verify(ca.publicKey);
  });
}

/** Drops the certificates of a bundle that expired before `now`. */
export function withoutExpired(bundle: string, now: Date): string {
  return splitPem(bundle)
    .filter((pem) => certInfo(pem).notAfter.getTime() > now.getTime())
    .join('');
}
