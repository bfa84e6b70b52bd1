// Where the harvester may send. A pod's sink endpoint is the tenant's choice
// (`jobharvest.io/endpoint`), and the harvester sends from jobharvest's own
// pod, network position and credentials: so it sends only to destinations the
// operator listed, each with its own credentials and TLS material from
// Secrets in jobharvest's namespace, never the pod's. A pod whose endpoint is
// on no list is not held; its delivery record says why.
import { isIP } from 'node:net';
import { SINKS, type SinkType } from '../src/contract/env.ts';

export interface Destination {
  readonly name: string;
  readonly sink: SinkType;
  readonly endpoint: URL;
  readonly esIndex?: string;
  readonly lokiTenant?: string;
  readonly otlpEncoding?: 'protobuf' | 'json';
  /** Files mounted from Secrets in the harvester's namespace. */
  readonly auth?: { readonly tokenFile?: string; readonly usernameFile?: string; readonly passwordFile?: string };
  readonly tls?: { readonly caFile?: string; readonly certFile?: string; readonly keyFile?: string };
  /**
   * Address classes the operator allows for this destination; none by
   * default. `cluster`: a Service name (`*.svc`, `*.cluster.local`, or a
   * name with no dot); `private`: RFC 1918 and unique-local addresses;
   * `loopback`; `link-local` (cloud metadata lives there).
   */
  readonly allow: readonly AddressClass[];
}

export const ADDRESS_CLASSES = ['cluster', 'private', 'loopback', 'link-local'] as const;
export type AddressClass = (typeof ADDRESS_CLASSES)[number];

/** The class of the endpoint's host, or undefined for a public name or address. */
export function addressClass(host: string): AddressClass | undefined {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  const v = isIP(h);
  if (v === 4) {
    const [a, b] = h.split('.').map(Number) as [number, number];
    if (a === 127 || a === 0) return 'loopback';
    if (a === 169 && b === 254) return 'link-local';
    if (a === 10 || (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168) || (a === 100 && b >= 64 && b <= 127)) return 'private';
    return undefined;
  }
  if (v === 6) {
    if (h === '::1' || h === '::') return 'loopback';
    if (/^fe[89ab]/.test(h)) return 'link-local';
    if (/^f[cd]/.test(h)) return 'private';
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(h);
    return mapped ? addressClass(mapped[1]!) : undefined;
  }
  if (h === 'localhost' || h.endsWith('.localhost')) return 'loopback';
  if (!h.includes('.') || h.endsWith('.svc') || h.includes('.svc.') || h.endsWith('.cluster.local') || h.endsWith('.local')) return 'cluster';
  return undefined;
}

/** Why a destination may not be used as configured, or undefined. */
export function destinationProblem(d: Destination): string | undefined {
  const cls = addressClass(d.endpoint.hostname);
  if (cls && !d.allow.includes(cls)) return `destination ${d.name}: ${d.endpoint.host} is a ${cls} address; list '${cls}' in its allow to use it`;
  return undefined;
}

const norm = (u: URL): string => {
  const port = u.port || (u.protocol === 'https:' || u.protocol === 'tls:' ? '443' : u.protocol === 'http:' ? '80' : '');
  return `${u.protocol}//${u.hostname.toLowerCase()}:${port}${u.pathname.replace(/\/+$/, '')}`;
};

/**
 * The approved destination for a pod's sink and endpoint: same sink, same
 * scheme, host, port and path. Credentials in the pod's URL are never used.
 */
export function matchDestination(list: readonly Destination[], sink: string, endpoint: string | undefined): Destination | undefined {
  if (!endpoint) return undefined;
  let u: URL;
  try {
    u = new URL(endpoint);
  } catch {
    return undefined;
  }
  const want = norm(u);
  return list.find((d) => d.sink === sink && norm(d.endpoint) === want);
}

/** Parses the operator's list (the chart renders it as JSON); every problem at once. */
export function parseDestinations(value: unknown): Destination[] {
  if (!Array.isArray(value)) throw new Error('destinations must be a list');
  const problems: string[] = [];
  const out: Destination[] = [];
  value.forEach((raw, i) => {
    const d = (raw ?? {}) as Record<string, unknown>;
    const name = typeof d.name === 'string' && d.name ? d.name : `#${i}`;
    if (!(SINKS as readonly string[]).includes(String(d.sink)) || d.sink === 'stdout') {
      problems.push(`destination ${name}: sink must be one of ${SINKS.filter((s) => s !== 'stdout').join(', ')}`);
      return;
    }
    let endpoint: URL;
    try {
      endpoint = new URL(String(d.endpoint));
    } catch {
      problems.push(`destination ${name}: endpoint is not a URL`);
      return;
    }
    if (endpoint.username || endpoint.password) problems.push(`destination ${name}: put credentials in auth files, not in the endpoint`);
    const allow = Array.isArray(d.allow) ? (d.allow as unknown[]).map(String) : [];
    for (const a of allow) if (!(ADDRESS_CLASSES as readonly string[]).includes(a)) problems.push(`destination ${name}: unknown address class '${a}'`);
    const dest: Destination = {
      name,
      sink: d.sink as SinkType,
      endpoint,
      allow: allow as AddressClass[],
      ...(typeof d.esIndex === 'string' ? { esIndex: d.esIndex } : {}),
      ...(typeof d.lokiTenant === 'string' ? { lokiTenant: d.lokiTenant } : {}),
      ...(d.otlpEncoding === 'json' || d.otlpEncoding === 'protobuf' ? { otlpEncoding: d.otlpEncoding } : {}),
      ...(d.auth && typeof d.auth === 'object' ? { auth: d.auth as Destination['auth'] } : {}),
      ...(d.tls && typeof d.tls === 'object' ? { tls: d.tls as Destination['tls'] } : {}),
    };
    const why = destinationProblem(dest);
    if (why) problems.push(why);
    out.push(dest);
  });
  if (problems.length > 0) throw new Error(`invalid destinations: ${problems.join('; ')}`);
  return out;
}
