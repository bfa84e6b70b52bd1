// TLS material for the stream sinks' tests (syslog, forward), in the sidecar's unit
// tests and the integration tests alike: a CA, a server certificate for
// 127.0.0.1/localhost and a client certificate, all signed by that CA, written as
// PEM files the sidecar's TLS settings can point at.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import selfsigned from 'selfsigned';

export interface TestPki {
  readonly caPem: string;
  readonly serverCert: string;
  readonly serverKey: string;
  readonly clientCert: string;
  readonly clientKey: string;
  readonly files: { ca: string; serverCert: string; serverKey: string; clientCert: string; clientKey: string };
}

const DAY_MS = 86_400_000;

function validity(): { notBeforeDate: Date; notAfterDate: Date } {
  const now = Date.now();
  return { notBeforeDate: new Date(now - 5 * 60_000), notAfterDate: new Date(now + DAY_MS) };
}

export async function writeTestPki(dir: string): Promise<TestPki> {
  const common = { keyType: 'ec' as const, curve: 'P-256' as const, algorithm: 'sha256' as const };
  const ca = await selfsigned.generate([{ name: 'commonName', value: 'jobharvest-test-ca' }], {
    ...common,
    ...validity(),
    extensions: [
      { name: 'basicConstraints', cA: true, critical: true },
      { name: 'keyUsage', keyCertSign: true, cRLSign: true, digitalSignature: true, critical: true },
    ],
  });
  const leaf = (cn: string, usage: { serverAuth?: boolean; clientAuth?: boolean }) =>
    selfsigned.generate([{ name: 'commonName', value: cn }], {
      ...common,
      ...validity(),
      ca: { cert: ca.cert, key: ca.private },
      extensions: [
        { name: 'basicConstraints', cA: false },
        { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
        { name: 'extKeyUsage', ...usage },
        { name: 'subjectAltName', altNames: [{ type: 2 as const, value: cn }, { type: 7 as const, ip: '127.0.0.1' }] },
      ],
    });
  const server = await leaf('localhost', { serverAuth: true });
  const client = await leaf('jobharvest-sidecar', { clientAuth: true });
  const files = {
    ca: join(dir, 'ca.pem'),
    serverCert: join(dir, 'server.pem'),
    serverKey: join(dir, 'server-key.pem'),
    clientCert: join(dir, 'client.pem'),
    clientKey: join(dir, 'client-key.pem'),
  };
  await writeFile(files.ca, ca.cert);
  await writeFile(files.serverCert, server.cert);
  await writeFile(files.serverKey, server.private, { mode: 0o600 });
  await writeFile(files.clientCert, client.cert);
  await writeFile(files.clientKey, client.private, { mode: 0o600 });
  return { caPem: ca.cert, serverCert: server.cert, serverKey: server.private, clientCert: client.cert, clientKey: client.private, files };
}
