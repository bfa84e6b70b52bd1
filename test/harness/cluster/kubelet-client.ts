/**
 * The API server's client certificate for calls to kubelets (pods/log), signed
 * by the cluster CA, which the test kubelet trusts for its clients.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { generate } from 'selfsigned';
import type { Pki } from './pki.ts';

export async function createKubeletClientCert(pki: Pki): Promise<{ certPath: string; keyPath: string }> {
  const caKey = await readFile(pki.caKeyPath, 'utf8');
  const now = Date.now();
  const pems = await generate(
    [
      { name: 'commonName', value: 'kube-apiserver-kubelet-client' },
      { name: 'organizationName', value: 'system:masters' },
    ],
    {
      keyType: 'ec',
      algorithm: 'sha256',
      notBeforeDate: new Date(now - 60_000),
      notAfterDate: new Date(now + 2 * 24 * 3600 * 1000),
      ca: { key: caKey, cert: pki.caPem },
      extensions: [
        { name: 'basicConstraints', cA: false },
        { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
        { name: 'extKeyUsage', clientAuth: true },
      ],
    },
  );
  const certPath = join(pki.dir, 'apiserver-kubelet-client.crt');
  const keyPath = join(pki.dir, 'apiserver-kubelet-client.key');
  await Promise.all([writeFile(certPath, pems.cert), writeFile(keyPath, pems.private, { mode: 0o600 })]);
  return { certPath, keyPath };
}
