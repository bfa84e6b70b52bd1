import { describe, expect, it } from 'vitest';
import { X509Certificate } from 'node:crypto';
import { planCertificates, serviceDnsNames, DEFAULT_POLICY, type CertPolicy } from '../../src/tls/plan.ts';
import { issuedByAny, splitPem } from '../../src/tls/inspect.ts';

const policy: CertPolicy = { ...DEFAULT_POLICY, dnsNames: serviceDnsNames('jobharvest', 'jobharvest'), ipAddresses: ['127.0.0.1'], caOverlapMs: 60_000 };
const DAY = 86_400_000;

describe('certificate plan (auto mode)', () => {
  it('creates a SHA-256 CA and a serving certificate with the Service SANs', async () => {
    const now = new Date();
    const p = await planCertificates(undefined, policy, now);
    expect(p.changed).toBe(true);
    const leaf = new X509Certificate(p.material.tlsCert);
    expect(leaf.subjectAltName).toContain('DNS:jobharvest.jobharvest.svc');
    expect(leaf.subjectAltName).toContain('DNS:jobharvest.jobharvest.svc.cluster.local');
    expect(leaf.subjectAltName).toContain('IP Address:127.0.0.1');
    expect(leaf.ca).toBe(false);
    expect(new X509Certificate(p.material.caCert).ca).toBe(true);
    expect(issuedByAny(p.material.tlsCert, p.material.caBundle)).toBe(true);
    // Go refuses SHA-1 signatures; the signature algorithm OID must be ecdsa-with-SHA256.
    expect(leaf.toLegacyObject().asn1Curve ?? 'prime256v1').toBe('prime256v1');
    expect(leaf.raw.includes(Buffer.from('2a8648ce3d040302', 'hex'))).toBe(true);
  });

  it('changes nothing while certificates are fresh', async () => {
    const now = new Date();
    const first = (await planCertificates(undefined, policy, now)).material;
    const again = await planCertificates(first, policy, new Date(now.getTime() + DAY));
    expect(again.changed).toBe(false);
    expect(again.material.tlsCert).toBe(first.tlsCert);
  });

  it('rotates the leaf at two thirds of its life, on the same CA', async () => {
    const now = new Date();
    const first = (await planCertificates(undefined, policy, now)).material;
    const later = new Date(now.getTime() + 250 * DAY);
    const p = await planCertificates(first, policy, later);
    expect(p.reasons).toContain('leaf near expiry');
    expect(p.material.tlsCert).not.toBe(first.tlsCert);
    expect(p.material.caCert).toBe(first.caCert);
  });

  it('rotates the CA with an overlap: old and new CA trusted, the leaf moves only after the overlap', async () => {
    const now = new Date();
    const first = (await planCertificates(undefined, policy, now)).material;
    const rotated = await planCertificates(first, policy, now, 'ca');
    expect(splitPem(rotated.material.caBundle)).toHaveLength(2);
    expect(rotated.material.tlsCert).toBe(first.tlsCert);
    expect(issuedByAny(rotated.material.tlsCert, rotated.material.caBundle)).toBe(true);
    const soon = await planCertificates(rotated.material, policy, new Date(now.getTime() + 10_000));
    expect(soon.material.tlsCert).toBe(first.tlsCert);
    const after = await planCertificates(rotated.material, policy, new Date(now.getTime() + 61_000));
    expect(after.reasons).toContain('moved the leaf to the new CA after the overlap');
    expect(issuedByAny(after.material.tlsCert, after.material.caCert)).toBe(true);
    expect(splitPem(after.material.caBundle)).toHaveLength(2);
  });

  it('reissues the leaf when the serving names change', async () => {
    const first = (await planCertificates(undefined, policy, new Date())).material;
    const p = await planCertificates(first, { ...policy, ipAddresses: ['127.0.0.1', '10.0.0.9'] }, new Date());
    expect(p.reasons).toContain('serving names changed');
  });

  it('regenerates unusable material', async () => {
    const p = await planCertificates({ caBundle: 'x', caCert: 'x', caKey: 'x', tlsCert: 'x', tlsKey: 'x' }, policy, new Date());
    expect(p.reasons[0]).toMatch(/unusable/);
  });
});
