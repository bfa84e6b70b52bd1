import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ENV, ENV_NAMES } from '../../src/contract/env.ts';
import { serviceLinksFor, type ServiceLink } from '../../src/contract/service-links.ts';
import { parseConfig, type Config } from '../../src/core/config.ts';
import { inject } from '../../src/core/inject.ts';
import type { Container, Obj } from '../../src/core/kube.ts';
import { globalSettings } from '../../src/core/settings.ts';
import { loadConfig } from '../../sidecar/config.ts';
import { job } from '../support/fixtures.ts';

interface Port {
  name?: string;
  port: number;
  protocol: 'TCP' | 'UDP' | 'SCTP';
}
interface Service {
  name: string;
  clusterIP: string;
  ports: Port[];
}

/**
 * The kubelet's service-link variables for the Services of a pod's namespace,
 * written from pkg/kubelet/envvars FromServices, independently of
 * src/contract/service-links.ts so that each checks the other.
 */
function kubeletServiceEnv(services: readonly Service[]): Record<string, string> {
  const out: Record<string, string> = {};
  const envName = (s: string) => s.toUpperCase().replaceAll('-', '_');
  for (const svc of services) {
    const n = envName(svc.name);
    const first = svc.ports[0];
    if (!first) continue;
    out[`${n}_SERVICE_HOST`] = svc.clusterIP;
    out[`${n}_SERVICE_PORT`] = String(first.port);
    for (const p of svc.ports) if (p.name) out[`${n}_SERVICE_PORT_${envName(p.name)}`] = String(p.port);
    out[`${n}_PORT`] = `${first.protocol.toLowerCase()}://${svc.clusterIP}:${first.port}`;
    for (const p of svc.ports) {
      const prefix = `${n}_PORT_${p.port}_${p.protocol}`;
      out[prefix] = `${p.protocol.toLowerCase()}://${svc.clusterIP}:${p.port}`;
      out[`${prefix}_PROTO`] = p.protocol.toLowerCase();
      out[`${prefix}_PORT`] = String(p.port);
      out[`${prefix}_ADDR`] = svc.clusterIP;
    }
  }
  return out;
}

function serviceOf(link: ServiceLink): Service {
  const port: Port = { port: link.port?.number ?? 8080, protocol: link.port?.protocol ?? 'TCP', ...(link.port?.name ? { name: link.port.name } : {}) };
  return { name: link.service, clusterIP: '10.96.7.7', ports: [port] };
}

const CONFIGS: Record<string, Config> = {
  'node mode, http sink': parseConfig({ sink: { type: 'http', endpoint: 'http://logs.example:8080/ingest' } }),
  'api mode, loki sink, shaping on': parseConfig({
    mode: 'api',
    sink: { type: 'loki', endpoint: 'http://loki.example:3100', lokiTenant: 'a' },
    sidecar: { parse: { format: 'json' }, mask: { builtin: ['bearer'] }, multiline: { rules: ['python'] } },
  }),
  'stdout sink': parseConfig({ sink: { type: 'stdout' } }),
};

function sidecarOf(config: Config): Container {
  const { job: out } = inject({ job: job('j') as never, settings: globalSettings(config), mode: config.mode === 'api' ? 'api' : 'node', ttlSecondsAfterFinished: null, config });
  const c = out.spec?.template?.spec?.initContainers?.[0];
  if (!c) throw new Error('no sidecar');
  return c;
}

/** The sidecar's environment as the kubelet builds it: service links first, the container's env over them. */
function kubeletEnv(sidecar: Container, services: readonly Service[]): Record<string, string> {
  const downward: Record<string, string> = { 'metadata.name': 'j-abcde', 'metadata.namespace': 'team-a', 'metadata.uid': 'u-1', 'spec.nodeName': 'n1' };
  const env: Record<string, string> = { KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443', ...kubeletServiceEnv(services) };
  for (const e of (sidecar.env ?? []) as Obj[]) {
    const name = e.name as string;
    if (typeof e.value === 'string') env[name] = e.value;
    else {
      const path = (e.valueFrom as any)?.fieldRef?.fieldPath as string | undefined;
      if (path !== undefined) env[name] = downward[path] ?? 'job-label';
      else delete env[name]; // a secretKeyRef to an absent key: left unset
    }
  }
  return env;
}

const explicit = (c: Container): Set<string> => new Set(((c.env ?? []) as Obj[]).map((e) => e.name as string));

describe('service links', () => {
  it('derives the Service that sets a variable', () => {
    expect(serviceLinksFor('JOBHARVEST_METRICS_PORT')).toContainEqual({ service: 'jobharvest-metrics' });
    expect(serviceLinksFor('FOO_PORT_53_UDP_ADDR')).toContainEqual({ service: 'foo', port: { number: 53, protocol: 'UDP' } });
    expect(serviceLinksFor('A_B_SERVICE_PORT_HTTP_ALT')).toEqual([{ service: 'a-b', port: { name: 'http-alt' } }]);
    expect(serviceLinksFor('A_SERVICE_PORT_B_SERVICE_PORT')).toEqual([{ service: 'a', port: { name: 'b-service-port' } }, { service: 'a-service-port-b' }, { service: 'a-service-port-b-service' }]);
    expect(serviceLinksFor('JOBHARVEST_MODE')).toEqual([]);
    expect(serviceLinksFor('POD_NAME')).toEqual([]);
    // A name no DNS label upper-cases to: lower case, a leading digit, a trailing `_`.
    expect(serviceLinksFor('jobharvest_metrics_PORT')).toEqual([]);
    expect(serviceLinksFor('9X_PORT')).toEqual([]);
    expect(serviceLinksFor('X__PORT')).toEqual([]);
    expect(serviceLinksFor('X_PORT_70000_TCP')).toEqual([]);
  });

  it('every derived Service really makes the kubelet set the variable', () => {
    const linkable = ENV_NAMES.filter((n) => serviceLinksFor(n).length > 0);
    // Today: JOBHARVEST_METRICS_PORT only; a new contract variable that ends like a service link joins this list.
    expect(linkable).toContain(ENV.METRICS_PORT.name);
    for (const name of linkable) for (const link of serviceLinksFor(name)) expect(Object.keys(kubeletServiceEnv([serviceOf(link)]))).toContain(name);
  });

  for (const [what, config] of Object.entries(CONFIGS)) {
    describe(what, () => {
      const sidecar = sidecarOf(config);
      const baseline = loadConfig(kubeletEnv(sidecar, []));

      it('sets every contract variable a Service could produce, and the sidecar reads the same settings with those Services present', () => {
        for (const name of ENV_NAMES) {
          for (const link of serviceLinksFor(name)) {
            expect(explicit(sidecar), `${name} (from a Service '${link.service}')`).toContain(name);
            const env = kubeletEnv(sidecar, [serviceOf(link)]);
            expect(loadConfig(env), `with a Service '${link.service}'`).toEqual(baseline);
          }
        }
      });

      it('no Service name or port the API server accepts produces a contract variable the sidecar does not set', () => {
        const label = fc.stringMatching(/^[a-z]([-a-z0-9]{0,20}[a-z0-9])?$/);
        const names = fc.oneof(label, fc.constantFrom('jobharvest', 'jobharvest-metrics', 'jobharvest-auth', 'jobharvest-kube-api', 'jobharvest-metrics-port-9090-tcp'));
        const port = fc.record({
          name: fc.option(fc.stringMatching(/^[a-z]([-a-z0-9]{0,12}[a-z0-9])?$/), { nil: undefined }),
          port: fc.integer({ min: 1, max: 65_535 }),
          protocol: fc.constantFrom('TCP' as const, 'UDP' as const, 'SCTP' as const),
        });
        const contract = new Set(ENV_NAMES);
        fc.assert(
          fc.property(fc.array(fc.record({ name: names, clusterIP: fc.constant('10.96.1.2'), ports: fc.array(port, { minLength: 1, maxLength: 3 }) }), { maxLength: 4 }), (services) => {
            const produced = Object.keys(kubeletServiceEnv(services as Service[])).filter((n) => contract.has(n));
            for (const n of produced) expect(explicit(sidecar), n).toContain(n);
            expect(loadConfig(kubeletEnv(sidecar, services as Service[]))).toEqual(baseline);
          }),
          { numRuns: 300 },
        );
      });
    });
  }

  it('a Service jobharvest-metrics no longer stops the sidecar', () => {
    const sidecar = sidecarOf(CONFIGS['node mode, http sink']!);
    const env = kubeletEnv(sidecar, [{ name: 'jobharvest-metrics', clusterIP: '10.96.3.4', ports: [{ port: 9090, protocol: 'TCP' }] }]);
    expect(env[ENV.METRICS_PORT.name]).toBe(ENV.METRICS_PORT.default);
    expect(loadConfig(env).metricsPort).toBe(0);
    // Without the explicit value it is the service link's, which the sidecar refuses (exit 2).
    const { [ENV.METRICS_PORT.name]: _pinned, ...rest } = Object.fromEntries(((sidecar.env ?? []) as Obj[]).map((e) => [e.name, e]));
    const unpinned = kubeletEnv({ ...sidecar, env: Object.values(rest) }, [{ name: 'jobharvest-metrics', clusterIP: '10.96.3.4', ports: [{ port: 9090, protocol: 'TCP' }] }]);
    expect(unpinned[ENV.METRICS_PORT.name]).toBe('tcp://10.96.3.4:9090');
    expect(() => loadConfig(unpinned)).toThrow(/JOBHARVEST_METRICS_PORT/);
  });
});
