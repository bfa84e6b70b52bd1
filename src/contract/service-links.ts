/**
 * Service links: unless a pod sets `enableServiceLinks: false` (the pod is the
 * tenant's, so the webhook cannot), the kubelet puts variables for every
 * Service of the pod's namespace into every container, the sidecar included.
 * Whoever can create a Service there chooses their names' prefix and their
 * values: a Service `jobharvest-metrics` sets JOBHARVEST_METRICS_PORT=tcp://…
 * A variable set in the container's own `env` wins over a service link, so
 * the webhook sets every contract variable a Service could produce.
 *
 * The forms follow the kubelet (pkg/kubelet/envvars): for a Service whose name
 * upper-cased with `-` as `_` is N,
 *   N_SERVICE_HOST, N_SERVICE_PORT, N_SERVICE_PORT_<PORT NAME>,
 *   N_PORT, N_PORT_<port>_<PROTO>, and that with _PROTO, _PORT or _ADDR.
 */

export interface ServiceLink {
  /** The Service name that produces the variable. */
  readonly service: string;
  /** A port of that Service the variable needs, when the form names one. */
  readonly port?: { readonly number?: number; readonly name?: string; readonly protocol?: 'TCP' | 'UDP' | 'SCTP' };
}

// A Service name is a DNS-1035 label of at most 63 characters.
const SERVICE_NAME = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
// A port name is an IANA service name: at most 15 of [a-z0-9-], a letter among them, no `--`, no `-` at either end.
const PORT_NAME = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const PROTOCOLS = ['TCP', 'UDP', 'SCTP'] as const;

function serviceName(prefix: string): string | undefined {
  const name = prefix.toLowerCase().replaceAll('_', '-');
  if (name.length > 63 || !SERVICE_NAME.test(name) || prefix !== name.toUpperCase().replaceAll('-', '_')) return undefined;
  return name;
}

function portName(suffix: string): string | undefined {
  const name = suffix.toLowerCase().replaceAll('_', '-');
  if (name.length > 15 || !PORT_NAME.test(name) || name.includes('--') || !/[a-z]/.test(name)) return undefined;
  if (suffix !== name.toUpperCase().replaceAll('-', '_')) return undefined;
  return name;
}

type LinkPort = NonNullable<ServiceLink['port']>;

function suffixLink(suffix: string): LinkPort | null {
  if (suffix === '_SERVICE_HOST' || suffix === '_SERVICE_PORT' || suffix === '_PORT') return {};
  if (suffix.startsWith('_SERVICE_PORT_')) {
    const name = portName(suffix.slice('_SERVICE_PORT_'.length));
    return name === undefined ? null : { name };
  }
  const m = /^_PORT_([1-9][0-9]{0,4})_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?$/.exec(suffix);
  if (m) {
    const number = Number(m[1]);
    const protocol = PROTOCOLS.find((p) => p === m[2]);
    return number <= 65_535 && protocol ? { number, protocol } : null;
  }
  return null;
}

/**
 * Every way a Service in the pod's namespace could make the kubelet set
 * `variable`; empty when none can.
 */
export function serviceLinksFor(variable: string): ServiceLink[] {
  const out: ServiceLink[] = [];
  for (let i = variable.indexOf('_'); i > 0; i = variable.indexOf('_', i + 1)) {
    const service = serviceName(variable.slice(0, i));
    if (service === undefined) continue;
    const port = suffixLink(variable.slice(i));
    if (port === null) continue;
    out.push(Object.keys(port).length ? { service, port } : { service });
  }
  return out;
}

/** Whether some Service name could make the kubelet set `variable`. */
export function serviceLinkCanSet(variable: string): boolean {
  return serviceLinksFor(variable).length > 0;
}
