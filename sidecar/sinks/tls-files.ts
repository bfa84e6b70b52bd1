// The TLS material of the sidecar's settings (custom CA, client certificate
// and key), as the HTTP and the stream clients both hand it to node:tls. Read
// when the client is built, so that a missing file is a start-up error naming
// its setting rather than a send retried until the drain deadline.
import { readFileSync } from 'node:fs';
import { ENV } from '../../src/contract/env.ts';
import { ConfigError, type TlsSettings } from '../config.ts';

export interface TlsFiles {
  readonly ca: Buffer | undefined;
  readonly cert: Buffer | undefined;
  readonly key: Buffer | undefined;
  readonly rejectUnauthorized: boolean;
}

function readPem(file: string | undefined, key: keyof typeof ENV): Buffer | undefined {
  if (!file) return undefined;
  try {
    return readFileSync(file);
  } catch (err) {
    throw new ConfigError([`${ENV[key].name}: cannot read ${file}: ${(err as Error).message}`]);
  }
}

export function readTlsFiles(tls: TlsSettings): TlsFiles {
  return {
    ca: readPem(tls.caFile, 'TLS_CA_FILE'),
    cert: readPem(tls.certFile, 'TLS_CERT_FILE'),
    key: readPem(tls.keyFile, 'TLS_KEY_FILE'),
    rejectUnauthorized: !tls.insecureSkipVerify,
  };
}
