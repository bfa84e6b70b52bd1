import { X509Certificate } from 'node:crypto';
import { generateCa, generateServing } from './generate.ts';
import { issuedByAny, remainingFraction, splitPem, withoutExpired } from './inspect.ts';

/**
 * The certificate material of auto mode, as kept in one Secret shared by all
 * replicas. `caBundle` is what the API server must trust: the signing CA first,
 * then older CAs until they expire, so a CA rotation never breaks a handshake.
 */
export interface CertMaterial {
  caBundle: string;
  caCert: string;
  caKey: string;
  tlsCert: string;
  tlsKey: string;
  /** When the signing CA last changed (ISO time); the leaf moves to it only after the overlap delay. */
  caRotatedAt?: string | undefined;
}

export interface CertPolicy {
  dnsNames: string[];
  ipAddresses: string[];
  caDays: number;
  leafDays: number;
  /** Rotate a certificate once less than this fraction of its life is left. */
  rotateRemainingFraction: number;
  /** After a CA rotation, how long the new CA sits in the caBundle before the leaf switches to it. */
  caOverlapMs: number;
}

export const DEFAULT_POLICY: Omit<CertPolicy, 'dnsNames' | 'ipAddresses'> = {
  caDays: 3650,
  leafDays: 365,
  // "Well before expiry": at two thirds of the lifetime.
  rotateRemainingFraction: 1 / 3,
  caOverlapMs: 5 * 60_000,
};

export type ForceRotation = 'leaf' | 'ca' | undefined;

export interface Plan {
  changed: boolean;
  material: CertMaterial;
  reasons: string[];
}

/** The Service names the API server may dial: svc, svc.ns, svc.ns.svc, svc.ns.svc.cluster.local. */
export function serviceDnsNames(service: string, namespace: string, extra: string[] = []): string[] {
  return [service, `${service}.${namespace}`, `${service}.${namespace}.svc`, `${service}.${namespace}.svc.cluster.local`, ...extra];
}

function sans(pem: string): Set<string> {
  const s = new X509Certificate(pem).subjectAltName ?? '';
  return new Set(
    s
      .split(',')
      .map((x) => x.trim())
      .filter(Boolean)
      .map((x) => x.replace(/^IP Address:/, 'IP:')),
  );
}

function wantedSans(p: CertPolicy): Set<string> {
  return new Set([...p.dnsNames.map((d) => `DNS:${d}`), ...p.ipAddresses.map((i) => `IP:${i}`)]);
}

function sameSet(a: Set<string>, b: Set<string>): boolean {
  return a.size === b.size && [...a].every((x) => b.has(x));
}

function valid(m: CertMaterial | undefined): m is CertMaterial {
  if (!m || !m.caCert || !m.caKey || !m.tlsCert || !m.tlsKey || !m.caBundle) return false;
  try {
    new X509Certificate(m.caCert);
    new X509Certificate(m.tlsCert);
    return splitPem(m.caBundle).length > 0;
  } catch {
    return false;
  }
}

/**
 * Decides what the Secret should hold at `now`. Every replica runs this on the
 * same Secret and reaches the same decision; the API server's resourceVersion
 * check lets exactly one of them write it.
 */
export async function planCertificates(current: CertMaterial | undefined, policy: CertPolicy, now: Date, force?: ForceRotation): Promise<Plan> {
  const serving = { dnsNames: policy.dnsNames, ipAddresses: policy.ipAddresses, leafDays: policy.leafDays, now };
  if (!valid(current)) {
    const ca = await generateCa({ days: policy.caDays, now });
    const leaf = await generateServing(ca, serving);
    return {
      changed: true,
      reasons: [current ? 'existing certificates unusable; regenerated' : 'created'],
      material: { caBundle: ca.cert, caCert: ca.cert, caKey: ca.key, tlsCert: leaf.cert, tlsKey: leaf.key, caRotatedAt: now.toISOString() },
    };
  }
  const reasons: string[] = [];
  const m: CertMaterial = { ...current };
  const pruned = withoutExpired(m.caBundle, now);
  if (splitPem(pruned).length !== splitPem(m.caBundle).length) {
    m.caBundle = pruned || m.caCert;
    reasons.push('dropped expired CAs from the bundle');
  }
  if (force === 'ca' || remainingFraction(m.caCert, now) < policy.rotateRemainingFraction) {
    const ca = await generateCa({ days: policy.caDays, now });
    m.caCert = ca.cert;
    m.caKey = ca.key;
    m.caBundle = ca.cert + m.caBundle;
    m.caRotatedAt = now.toISOString();
    reasons.push(force === 'ca' ? 'CA rotation requested' : 'CA near expiry; rotated with overlap');
  }
  const leafOnOldCa = !issuedByAny(m.tlsCert, m.caCert);
  const overlapDone = !m.caRotatedAt || now.getTime() - Date.parse(m.caRotatedAt) >= policy.caOverlapMs;
  let leafReason: string | undefined;
  if (force === 'leaf') leafReason = 'leaf rotation requested';
  else if (remainingFraction(m.tlsCert, now) < policy.rotateRemainingFraction) leafReason = 'leaf near expiry';
  else if (!sameSet(sans(m.tlsCert), wantedSans(policy))) leafReason = 'serving names changed';
  else if (leafOnOldCa && overlapDone) leafReason = 'moved the leaf to the new CA after the overlap';
  if (leafReason) {
    const leaf = await generateServing({ cert: m.caCert, key: m.caKey }, serving);
    m.tlsCert = leaf.cert;
    m.tlsKey = leaf.key;
    reasons.push(leafReason);
  }
  // The serving leaf must always be trusted through the bundle, whatever happened above.
  if (!issuedByAny(m.tlsCert, m.caBundle)) throw new Error('certificate plan produced a leaf its caBundle does not trust');
  return { changed: reasons.length > 0, material: m, reasons };
}
