/**
 * Key material for one throwaway control plane: a CA that signs the API
 * server's serving certificate and client certificates, and the key pair the
 * API server signs service-account tokens with.
 */
import { generateKeyPairSync } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { generateCa, generateServing } from '../../../src/tls/generate.ts';

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

// In-cluster clients reach the API server as the first address of the service
// range and under these names, so a real serving cert carries them all.
const SERVING_DNS_NAMES = [
  'localhost',
  'kubernetes',
  'kubernetes.default',
  'kubernetes.default.svc',
  'kubernetes.default.svc.cluster.local',
];

export async function createPki(dir: string, serviceIp: string): Promise<Pki> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  // The same generator the webhook's auto mode uses: SHA-256, as Go demands.
  const caPair = await generateCa({ days: 2, commonName: 'jobharvest-test-ca' });
  const ca = { cert: caPair.cert, private: caPair.key };
  const servingPair = await generateServing(caPair, { dnsNames: SERVING_DNS_NAMES, ipAddresses: ['127.0.0.1', serviceIp], leafDays: 2 });
  const serving = { cert: servingPair.cert, private: servingPair.key };

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
