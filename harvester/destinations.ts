// Where the harvester may send. A pod's sink endpoint is the tenant's choice
// (`jobharvest.io/endpoint`), and the harvester sends from jobharvest's own
// pod, network position and credentials: so it sends only to destinations the
// operator listed, each with its own credentials and TLS material from
// Secrets in jobharvest's namespace, never the pod's. A pod whose endpoint is
// on no list is not held; its delivery record says why.
import type { LookupAddress } from 'node:dns';
import { lookup as dnsLookup } from 'node:dns/promises';
import { isIP, type LookupFunction } from 'node:net';
import ipaddr from 'ipaddr.js';
import { CODECS, type Codec } from '../src/contract/codec.ts';
import { SINKS, type SinkType } from '../src/contract/env.ts';

export interface Destination {
  readonly name: string;
  readonly sink: SinkType;
  readonly endpoint: URL;
  readonly esIndex?: string;
  readonly lokiTenant?: string;
  readonly otlpEncoding?: 'protobuf' | 'json';
  /** The request body codec; gzip when absent, and gzip for a sink that does not take the one named. */
  readonly compression?: Codec;
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

/**
 * An address as the class it reaches: an IPv6 form that stands for an IPv4
 * address (IPv4-mapped `::ffff:a.b.c.d`, IPv4-translated `::ffff:0:a.b.c.d`,
 * IPv4-compatible `::a.b.c.d`, the well-known NAT64 prefix `64:ff9b::/96`)
 * is classed as that IPv4 address: the WHATWG URL parser writes
 * `[::ffff:169.254.169.254]` as `[::ffff:a9fe:a9fe]`, and each of these
 * reaches 169.254.169.254 on a host or network that translates them.
 */
function ipClass(ip: ipaddr.IPv4 | ipaddr.IPv6): AddressClass | undefined {
  if (ip.kind() === 'ipv6') {
    const v6 = ip as ipaddr.IPv6;
    const p = v6.parts;
    const zero = (from: number, to: number) => p.slice(from, to).every((x) => x === 0);
    const v4 = () => ipaddr.fromByteArray(v6.toByteArray().slice(12));
    const range = v6.range();
    if (range === 'loopback' || range === 'unspecified') return 'loopback';
    if (range === 'ipv4Mapped' || range === 'rfc6145' || zero(0, 6) || (p[0] === 0x64 && p[1] === 0xff9b && zero(2, 6))) return ipClass(v4());
    if (range === 'linkLocal') return 'link-local';
    // 64:ff9b:1::/48 (RFC 8215): a site's own NAT64 prefix, whose length
    // (and so where the IPv4 address sits) only that site knows.
    if (range === 'uniqueLocal' || range === 'rfc6052' || /^fe[c-f]/.test(v6.toNormalizedString())) return 'private';
    return undefined;
  }
  const range = ip.range();
  if (range === 'loopback' || range === 'unspecified') return 'loopback';
  if (range === 'linkLocal') return 'link-local';
  if (range === 'private' || range === 'carrierGradeNat') return 'private';
  return undefined;
}

/** The class of an address literal (IPv4, IPv6 with or without brackets), or undefined when it is none. */
export function ipAddressClass(address: string): AddressClass | undefined {
  const a = address.replace(/^\[|\]$/g, '');
  return isIP(a) ? ipClass(ipaddr.parse(a)) : undefined;
}

/**
 * The class of the endpoint's host, or undefined for a public name or
 * address. A name is classed by its spelling (`localhost`, a Service name);
 * the address it resolves to is checked again when it is dialled (dialGuard).
 */
export function addressClass(host: string): AddressClass | undefined {
  // A trailing dot makes a name absolute (`localhost.`); it names the same host.
  const h = host.replace(/^\[|\]$/g, '').toLowerCase().replace(/\.$/, '');
  if (isIP(h)) return ipClass(ipaddr.parse(h));
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

/** Resolves a name to every address it has, as dns.lookup with `all: true`. A test passes a stub. */
export type Resolver = (hostname: string, family: number) => Promise<LookupAddress[]>;

const systemResolver: Resolver = (hostname, family) => dnsLookup(hostname, { all: true, family });

/** Why the destination may not dial this resolved address, or undefined when it may. */
export function dialProblem(d: Destination, address: string): string | undefined {
  const cls = ipAddressClass(address);
  if (cls === undefined || d.allow.includes(cls)) return undefined;
  // A Service's ClusterIP and a pod's IP are private addresses: a cluster name may reach them, nothing else private.
  if (cls === 'private' && addressClass(d.endpoint.hostname) === 'cluster' && d.allow.includes('cluster')) return undefined;
  return `destination ${d.name}: ${d.endpoint.hostname} resolved to ${address}, a ${cls} address; list '${cls}' in its allow to use it`;
}

/**
 * The `lookup` of every connection the sinks open for this destination: a
 * name is resolved when it is dialled, and an answer of a class the
 * destination does not allow (a name that resolves to 127.0.0.1 or
 * 169.254.169.254 now, whatever it resolved to when it was listed: DNS
 * rebinding) is not dialled. Addresses that may be dialled are kept, in the
 * resolver's order; none left is a connection error naming the first refused.
 * An address literal is never looked up (Node connects to it directly):
 * parseDestinations classes those.
 */
export function dialGuard(d: Destination, resolve: Resolver = systemResolver): LookupFunction {
  return (hostname, options, callback) => {
    const family = typeof options.family === 'number' ? options.family : options.family === 'IPv6' ? 6 : options.family === 'IPv4' ? 4 : 0;
    resolve(hostname, family).then(
      (all) => {
        const ok = all.filter((a) => dialProblem(d, a.address) === undefined);
        if (ok.length === 0) {
          const why = all.length > 0 ? dialProblem(d, all[0]!.address)! : `destination ${d.name}: ${hostname} has no address`;
          const err = Object.assign(new Error(why), { code: all.length > 0 ? 'EJOBHARVESTREFUSED' : 'ENOTFOUND', hostname });
          callback(err, '', 0);
          return;
        }
        if (options.all) callback(null, ok);
        else callback(null, ok[0]!.address, ok[0]!.family);
      },
      (err: NodeJS.ErrnoException) => callback(err, '', 0),
    );
  };
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
    if (d.compression !== undefined && d.compression !== '' && !(CODECS as readonly string[]).includes(String(d.compression))) {
      problems.push(`destination ${name}: compression must be one of ${CODECS.join(', ')}`);
    }
    const dest: Destination = {
      name,
      sink: d.sink as SinkType,
      endpoint,
      allow: allow as AddressClass[],
      ...(typeof d.esIndex === 'string' ? { esIndex: d.esIndex } : {}),
      ...(typeof d.lokiTenant === 'string' ? { lokiTenant: d.lokiTenant } : {}),
      ...(d.otlpEncoding === 'json' || d.otlpEncoding === 'protobuf' ? { otlpEncoding: d.otlpEncoding } : {}),
      ...(typeof d.compression === 'string' && d.compression !== '' ? { compression: d.compression as Codec } : {}),
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
