import selfsigned from 'selfsigned';

export interface CertPair {
  cert: string;
  key: string;
}

export interface ServingBundle {
  ca: CertPair;
  serving: CertPair;
}

export interface GenerateOptions {
  /** DNS names for the serving certificate; the API server checks SANs only, never the CN. */
  dnsNames: string[];
  ipAddresses?: string[];
  caDays?: number;
  leafDays?: number;
  now?: Date;
}

const DAY_MS = 86_400_000;

/** A CA, valid for caDays. SHA-256: the API server is written in Go, which refuses SHA-1 signatures. */
export async function generateCa(opts: { days: number; now?: Date; commonName?: string }): Promise<CertPair> {
  const now = opts.now ?? new Date();
  const r = await selfsigned.generate([{ name: 'commonName', value: opts.commonName ?? 'jobharvest-ca' }], {
    keyType: 'ec',
    curve: 'P-256',
    algorithm: 'sha256',
    notBeforeDate: new Date(now.getTime() - 5 * 60_000),
    notAfterDate: new Date(now.getTime() + opts.days * DAY_MS),
    extensions: [
      { name: 'basicConstraints', cA: true, critical: true },
      { name: 'keyUsage', keyCertSign: true, cRLSign: true, digitalSignature: true, critical: true },
    ],
  });
  return { cert: r.cert, key: r.private };
}

/** A serving certificate signed by the CA. Its not-before is backdated a little for clock skew. */
export async function generateServing(ca: CertPair, opts: GenerateOptions): Promise<CertPair> {
  const now = opts.now ?? new Date();
  const first = opts.dnsNames[0] ?? 'localhost';
  const r = await selfsigned.generate([{ name: 'commonName', value: first }], {
    keyType: 'ec',
    curve: 'P-256',
    algorithm: 'sha256',
    notBeforeDate: new Date(now.getTime() - 5 * 60_000),
    notAfterDate: new Date(now.getTime() + (opts.leafDays ?? 90) * DAY_MS),
    ca: { cert: ca.cert, key: ca.key },
    extensions: [
      { name: 'basicConstraints', cA: false },
      { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
      { name: 'extKeyUsage', serverAuth: true },
      {
        name: 'subjectAltName',
        altNames: [
          ...opts.dnsNames.map((value) => ({ type: 2 as const, value })),
          ...(opts.ipAddresses ?? []).map((ip) => ({ type: 7 as const, ip })),
        ],
      },
    ],
  });
  return { cert: r.cert, key: r.private };
}

export async function generateBundle(opts: GenerateOptions): Promise<ServingBundle> {
  const ca = await generateCa({ days: opts.caDays ?? 365, ...(opts.now ? { now: opts.now } : {}) });
  const serving = await generateServing(ca, opts);
  return { ca, serving };
}
