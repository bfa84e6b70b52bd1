/**
 * The kubelet's serving certificate, signed by the cluster CA for the node's
 * address, so the API server can verify it (--kubelet-certificate-authority).
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { generate } from 'selfsigned';

export async function kubeletServingCert(certsDir: string, nodeName: string, ip: string): Promise<{ cert: string; key: string }> {
  const [caCert, caKey] = await Promise.all([readFile(join(certsDir, 'ca.crt'), 'utf8'), readFile(join(certsDir, 'ca.key'), 'utf8')]);
  const now = Date.now();
  const pems = await generate([{ name: 'commonName', value: `system:node:${nodeName}` }], {
    keyType: 'ec',
    algorithm: 'sha256',
    notBeforeDate: new Date(now - 60_000),
    notAfterDate: new Date(now + 2 * 24 * 3600 * 1000),
    ca: { key: caKey, cert: caCert },
    extensions: [
      { name: 'basicConstraints', cA: false },
      { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
      { name: 'extKeyUsage', serverAuth: true },
      { name: 'subjectAltName', altNames: [{ type: 2, value: nodeName }, { type: 7, ip }] },
    ],
  });
  return { cert: pems.cert, key: pems.private };
}
