import { writeFile } from 'node:fs/promises';
import { stringify } from 'yaml';

export interface KubeconfigInput {
  server: string;
  caPem: string;
  user: string;
  token: string;
}

/** A single-context kubeconfig that kubectl, helm and client libraries all read. */
export async function writeKubeconfig(path: string, { server, caPem, user, token }: KubeconfigInput): Promise<void> {
  const doc = {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      { name: 'jobharvest-test', cluster: { server, 'certificate-authority-data': Buffer.from(caPem).toString('base64') } },
    ],
    users: [{ name: user, user: { token } }],
    contexts: [{ name: 'jobharvest-test', context: { cluster: 'jobharvest-test', user } }],
    'current-context': 'jobharvest-test',
  };
  await writeFile(path, stringify(doc), { mode: 0o600 });
}
