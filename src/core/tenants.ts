import { z } from 'zod';
import { parse } from './annotations.ts';

/**
 * Per-namespace credentials and log-store tenants (docs/security.md, "What a
 * shared credential allows"). The operator maps namespaces, by name or by a
 * namespace label only the operator may set, to their own Secrets and to the
 * log store's tenant: Loki's X-Scope-OrgID, VictoriaLogs' AccountID and
 * ProjectID, an Elasticsearch/OpenSearch index. The Secrets are named, never
 * held: each is read from the Job's own namespace (a secretKeyRef, or the
 * `jobharvest logs` user's kubeconfig), so a mapping gives a namespace no
 * other namespace's credential, only the names and tenant ids to use with
 * its own.
 *
 * Precedence, lowest first: the global configuration, this mapping, the
 * namespace's annotations (the operator's), then the Job's and the pod
 * template's. In a mapped namespace a Job cannot change the tenant ids the
 * mapping sets (a warning, and the mapping's value stays): the tenant a
 * record is written under is the operator's choice, as is the Secret a Job
 * may name, which is always one of its own namespace.
 */

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
// A label key (optional DNS subdomain prefix, a name of at most 63) and value, as the API server accepts them.
const LABEL_PREFIX = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const LABEL_NAME = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const LABEL_VALUE = /^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$/;

/** The headers VictoriaLogs reads a tenant from (lib/logstorage/tenant_id.go), each a uint32. */
export const VL_TENANT_HEADERS = { accountID: 'AccountID', projectID: 'ProjectID' } as const;

const uint32 = z.number().int().min(0).max(4_294_967_295);

export const tenantSchema = z
  .object({
    /** Names the mapping in warnings, --explain and logs. */
    name: z.string().max(63).regex(DNS_LABEL, 'a DNS label'),
    /** Namespaces by name. A name is in at most one tenant's list. */
    namespaces: z.array(z.string().max(63).regex(DNS_LABEL, 'a namespace name')).max(10_000).default([]),
    /** Namespaces with all these labels, for those not listed by name. Only labels a tenant cannot set on its own namespace. */
    namespaceSelector: z.object({ matchLabels: z.record(z.string(), z.string()) }).strict().optional(),
    /** The write credential: a Secret in each selected namespace (keys as sink.authSecret). */
    authSecret: z.string().optional(),
    /** TLS material: a Secret in each selected namespace (as sink.tlsSecret). */
    tlsSecret: z.string().optional(),
    /** loki: X-Scope-OrgID. */
    lokiTenant: z.string().optional(),
    /** elasticsearch: the index or data stream. */
    esIndex: z.string().optional(),
    /** VictoriaLogs: the AccountID and ProjectID headers (http, loki, elasticsearch and otlp sinks; `jobharvest logs`). */
    accountID: uint32.optional(),
    projectID: uint32.optional(),
    /** The read credential `jobharvest logs` uses: a Secret in each selected namespace (as query.authSecret). */
    queryAuthSecret: z.string().optional(),
  })
  .strict();

export type Tenant = z.infer<typeof tenantSchema>;

export const tenantsSchema = z.array(tenantSchema).max(1000).default([]);

function labelKeyProblem(key: string): string | undefined {
  const slash = key.indexOf('/');
  const prefix = slash < 0 ? undefined : key.slice(0, slash);
  const name = slash < 0 ? key : key.slice(slash + 1);
  if (prefix !== undefined && (prefix.length > 253 || !LABEL_PREFIX.test(prefix))) return 'not a label key (bad prefix)';
  return name.length <= 63 && LABEL_NAME.test(name) ? undefined : 'not a label key';
}

/** Problems the schema cannot see, each with its path; the same checks as the annotations for every value that reaches a pod. */
export function tenantsProblems(tenants: readonly Tenant[]): string[] {
  const problems: string[] = [];
  const names = new Map<string, number>();
  const listedBy = new Map<string, string>();
  tenants.forEach((t, i) => {
    const at = `tenants[${i}]`;
    const seen = names.get(t.name);
    if (seen !== undefined) problems.push(`${at}.name: ${t.name} is also tenants[${seen}]'s name`);
    else names.set(t.name, i);
    const labels = Object.entries(t.namespaceSelector?.matchLabels ?? {});
    if (t.namespaces.length === 0 && labels.length === 0) {
      // An empty selector would select every namespace.
      problems.push(`${at}: selects no namespace: list namespaces or namespaceSelector.matchLabels`);
    }
    for (const ns of t.namespaces) {
      const other = listedBy.get(ns);
      if (other !== undefined && other !== t.name) problems.push(`${at}.namespaces: ${ns} is listed by tenant ${other} too`);
      else listedBy.set(ns, t.name);
    }
    for (const [k, v] of labels) {
      const why = labelKeyProblem(k) ?? (v.length <= 63 && LABEL_VALUE.test(v) ? undefined : `${JSON.stringify(v.slice(0, 70))} is not a label value`);
      if (why) problems.push(`${at}.namespaceSelector.matchLabels[${JSON.stringify(k.slice(0, 80))}]: ${why}`);
    }
    const checks: Array<[string, string | undefined, (v: string) => { ok: boolean; why?: string }]> = [
      ['authSecret', t.authSecret, parse.secretName],
      ['tlsSecret', t.tlsSecret, parse.secretName],
      ['queryAuthSecret', t.queryAuthSecret, parse.secretName],
      ['lokiTenant', t.lokiTenant, parse.lokiTenant],
      ['esIndex', t.esIndex, parse.esIndex],
    ];
    for (const [key, value, check] of checks) {
      if (value === undefined) continue;
      const r = check(value);
      if (!r.ok) problems.push(`${at}.${key}: ${(r as { why: string }).why}`);
    }
  });
  return problems;
}

/**
 * The mapping a namespace falls under: `tenant` (by its name, or by its
 * labels), `none`, or `unknown` when the namespace's labels are not known
 * (the offline CLI; a namespace `jobharvest logs` could not read) and a
 * mapping selects by labels.
 */
export type TenantMatch = { kind: 'tenant'; tenant: Tenant; by: string } | { kind: 'none' } | { kind: 'unknown'; why: string };

/**
 * A namespace listed by name takes that mapping, whatever its labels; else
 * the first mapping, in list order, whose matchLabels it all carries.
 */
export function tenantOf(tenants: readonly Tenant[], ns: { name: string | undefined; labels: Readonly<Record<string, string>> | undefined }): TenantMatch {
  if (tenants.length === 0 || ns.name === undefined) return { kind: 'none' };
  const named = tenants.find((t) => t.namespaces.includes(ns.name!));
  if (named) return { kind: 'tenant', tenant: named, by: `namespace ${ns.name} is listed by name` };
  const bySelector = tenants.filter((t) => Object.keys(t.namespaceSelector?.matchLabels ?? {}).length > 0);
  if (bySelector.length === 0) return { kind: 'none' };
  if (ns.labels === undefined) return { kind: 'unknown', why: `the labels of namespace ${ns.name} are not known, and tenant mappings ${bySelector.map((t) => t.name).join(', ')} select namespaces by label` };
  const labels = ns.labels;
  const hit = bySelector.find((t) => Object.entries(t.namespaceSelector!.matchLabels).every(([k, v]) => labels[k] === v));
  if (!hit) return { kind: 'none' };
  const shown = Object.entries(hit.namespaceSelector!.matchLabels)
    .map(([k, v]) => `${k}=${v}`)
    .join(',');
  return { kind: 'tenant', tenant: hit, by: `namespace ${ns.name} has the labels ${shown}` };
}

/** `AccountID=…,ProjectID=…` for JOBHARVEST_HEADERS, when a VictoriaLogs tenant is set (an id left out is 0, as VictoriaLogs reads it). */
export function vlTenantHeaders(s: { accountID: number | undefined; projectID: number | undefined }): Record<string, string> | undefined {
  if (s.accountID === undefined && s.projectID === undefined) return undefined;
  return { [VL_TENANT_HEADERS.accountID]: String(s.accountID ?? 0), [VL_TENANT_HEADERS.projectID]: String(s.projectID ?? 0) };
}
