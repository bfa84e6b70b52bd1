/**
 * The kubelet's serving certificate, signed by the cluster CA for the node's
 * address, so the API server can verify it (--kubelet-certificate-authority).
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { generateServing } from '../../../src/tls/generate.ts';

export async function kubeletServingCert(certsDir: string, nodeName: string, ip: string): Promise<{ cert: string; key: string }> {
  const [caCert, caKey] = await Promise.all([readFile(join(certsDir, 'ca.crt'), 'utf8'), readFile(join(certsDir, 'ca.key'), 'utf8')]);
  return generateServing({ cert: caCert, key: caKey }, { dnsNames: [nodeName], ipAddresses: [ip], leafDays: 2 });
}
