/**
 * Key material for one throwaway control plane: a CA that signs the API
 * server's serving certificate and client certificates, and the key pair the
 * API server signs service-account tokens with.
 */
import { generateKeyPairSync } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { generate } from 'selfsigned';

export interface Pki {
  dir: string;
  caCertPath: string;
  caKeyPath: string;
  caPem: string;
  servingCertPath: string;
  servingKeyPath: string;
  serviceAccountPublicKeyPath: string;
  serviceAccountPrivateKeyPath: string;
}

const DAY_MS = 24 * 60 * 60 * 1000;

// In-cluster clients reach the API server as the first address of the service
// range and under these names, so a real serving cert carries them all.
const SERVING_DNS_NAMES = [
  'localhost',
  'kubernetes',
  'kubernetes.default',
  'kubernetes.default.svc',
  'kubernetes.default.svc.cluster.local',
];

function validity(): { notBeforeDate: Date; notAfterDate: Date } {
  // Backdated a little so clock skew between processes never makes it "not yet valid".
  const now = Date.now();
  return { notBeforeDate: new Date(now - 60_000), notAfterDate: new Date(now + 2 * DAY_MS) };
}

export async function createPki(dir: string, serviceIp: string): Promise<Pki> {
  await mkdir(dir, { recursive: true, mode: 0o700 });

  const ca = await generate([{ name: 'commonName', value: 'jobharvest-test-ca' }], {
    keyType: 'ec',
    algorithm: 'sha256',
    ...validity(),
    extensions: [
      { name: 'basicConstraints', cA: true, critical: true },
      { name: 'keyUsage', keyCertSign: true, cRLSign: true, digitalSignature: true, critical: true },
    ],
  });

  const serving = await generate([{ name: 'commonName', value: 'kube-apiserver' }], {
    keyType: 'ec',
    algorithm: 'sha256',
    ...validity(),
    ca: { key: ca.private, cert: ca.cert },
    extensions: [
      { name: 'basicConstraints', cA: false },
      { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
      { name: 'extKeyUsage', serverAuth: true },
      {
        name: 'subjectAltName',
        altNames: [
          ...SERVING_DNS_NAMES.map((value) => ({ type: 2 as const, value })),
          { type: 7 as const, ip: '127.0.0.1' },
          { type: 7 as const, ip: serviceIp },
        ],
      },
    ],
  });

  const sa = generateKeyPairSync('rsa', {
    modulusLength: 2048,
    publicKeyEncoding: { type: 'spki', format: 'pem' },
    privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
  });

  const pki: Pki = {
    dir,
    caCertPath: join(dir, 'ca.crt'),
    caKeyPath: join(dir, 'ca.key'),
    caPem: ca.cert,
    servingCertPath: join(dir, 'apiserver.crt'),
    servingKeyPath: join(dir, 'apiserver.key'),
    serviceAccountPublicKeyPath: join(dir, 'sa.pub'),
    serviceAccountPrivateKeyPath: join(dir, 'sa.key'),
  };
  await Promise.all([
    writeFile(pki.caCertPath, ca.cert),
    writeFile(pki.caKeyPath, ca.private, { mode: 0o600 }),
    writeFile(pki.servingCertPath, serving.cert),
    writeFile(pki.servingKeyPath, serving.private, { mode: 0o600 }),
    writeFile(pki.serviceAccountPublicKeyPath, sa.publicKey),
    writeFile(pki.serviceAccountPrivateKeyPath, sa.privateKey, { mode: 0o600 }),
  ]);
  return pki;
}
