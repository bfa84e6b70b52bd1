import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { resolve, runLogs, type ClusterView, type LogsFlags } from '../../src/cli/logs.ts';
import { parseConfig, type Config } from '../../src/core/config.ts';
import { decide } from '../../src/core/decide.ts';
import { mutateJob } from '../../src/core/mutate.ts';
import type { NamespaceMeta } from '../../src/core/kube.ts';
import { tenantOf } from '../../src/core/tenants.ts';
import { job, optedIn } from '../support/fixtures.ts';

/**
 * Per-namespace credentials and log-store tenants (src/core/tenants.ts): the
 * chart's `tenants` mapping applied by the webhook's core and by `jobharvest
 * logs`. The e2e test with real VictoriaLogs behind vmauth is
 * test/e2e/tenants.test.ts.
 */

const TEAM_LABEL = 'example.com/team';

function config(over: Record<string, unknown> = {}): Config {
  return parseConfig({
    sink: { type: 'loki', endpoint: 'http://vmauth.logging:8427/insert/loki/api/v1/push', authSecret: 'shared-writer', lokiTenant: 'shared' },
    query: { authSecret: 'shared-reader' },
    tenants: [
      { name: 'team-a', namespaces: ['team-a', 'team-a-ci'], authSecret: 'a-writer', tlsSecret: 'a-tls', queryAuthSecret: 'a-reader', lokiTenant: 'tenant-a', accountID: 11, projectID: 1, esIndex: 'logs-a' },
      { name: 'team-b', namespaceSelector: { matchLabels: { [TEAM_LABEL]: 'b' } }, authSecret: 'b-writer', queryAuthSecret: 'b-reader', lokiTenant: 'tenant-b', accountID: 22 },
      { name: 'team-b2', namespaceSelector: { matchLabels: { [TEAM_LABEL]: 'b' } }, authSecret: 'never-chosen' },
      { name: 'ids-only', namespaces: ['ids-only'], lokiTenant: 'tenant-c' },
    ],
    ...over,
  });
}

type Env = Array<{ name: string; value?: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } }>;

function sidecarEnv(j: Record<string, any>, ns: NamespaceMeta, cfg = config()): { env: Env; volumes: Array<Record<string, any>>; warnings: string[] } {
  const r = mutateJob(j as never, { config: cfg, namespace: ns });
  expect(r.decision.action).toBe('inject');
  const spec = r.job.spec!.template!.spec!;
  const sidecar = [...(spec.initContainers ?? []), ...(spec.containers ?? [])].find((c) => c.name === 'jobharvest')!;
  return { env: sidecar.env as Env, volumes: spec.volumes ?? [], warnings: r.warnings };
}

const value = (env: Env, name: string) => env.find((e) => e.name === name)?.value;
const secretOf = (env: Env, name: string) => env.find((e) => e.name === name)?.valueFrom?.secretKeyRef?.name;

describe('tenants: which mapping a namespace falls under', () => {
  const tenants = config().tenants;

  it('a namespace listed by name, whatever its labels; else the first mapping whose labels it carries; else none', () => {
    expect(tenantOf(tenants, { name: 'team-a-ci', labels: {} })).toMatchObject({ kind: 'tenant', tenant: { name: 'team-a' }, by: 'namespace team-a-ci is listed by name' });
    // Listed by name for A, labelled as B's: the name decides, so a label cannot move a listed namespace.
    expect(tenantOf(tenants, { name: 'team-a', labels: { [TEAM_LABEL]: 'b' } })).toMatchObject({ kind: 'tenant', tenant: { name: 'team-a' } });
    expect(tenantOf(tenants, { name: 'b-one', labels: { [TEAM_LABEL]: 'b', other: 'x' } })).toMatchObject({ kind: 'tenant', tenant: { name: 'team-b' }, by: `namespace b-one has the labels ${TEAM_LABEL}=b` });
    expect(tenantOf(tenants, { name: 'b-one', labels: { [TEAM_LABEL]: 'c' } })).toEqual({ kind: 'none' });
    expect(tenantOf(tenants, { name: 'unmapped', labels: {} })).toEqual({ kind: 'none' });
    expect(tenantOf([], { name: 'team-a', labels: undefined })).toEqual({ kind: 'none' });
  });

  it('labels not known: a name still decides; otherwise the mapping is unknown, never guessed', () => {
    expect(tenantOf(tenants, { name: 'team-a', labels: undefined })).toMatchObject({ kind: 'tenant', tenant: { name: 'team-a' } });
    expect(tenantOf(tenants, { name: 'b-one', labels: undefined })).toEqual({ kind: 'unknown', why: 'the labels of namespace b-one are not known, and tenant mappings team-b, team-b2 select namespaces by label' });
    expect(tenantOf(tenants.filter((t) => t.namespaceSelector === undefined), { name: 'b-one', labels: undefined })).toEqual({ kind: 'none' });
  });

  it.each<[string, unknown[], RegExp]>([
    ['two mappings of one name', [{ name: 't', namespaces: ['a'] }, { name: 't', namespaces: ['b'] }], /tenants\[1\]\.name: t is also tenants\[0\]'s name/],
    ['a namespace listed by two mappings', [{ name: 't1', namespaces: ['a'] }, { name: 't2', namespaces: ['b', 'a'] }], /tenants\[1\]\.namespaces: a is listed by tenant t1 too/],
    ['a mapping that selects no namespace (an empty selector would select them all)', [{ name: 't', namespaceSelector: { matchLabels: {} } }], /tenants\[0\]: selects no namespace/],
    ['an invalid Secret name', [{ name: 't', namespaces: ['a'], queryAuthSecret: 'Not_A_Secret' }], /tenants\[0\]\.queryAuthSecret: not a valid Secret name/],
    ['a Loki tenant Loki refuses', [{ name: 't', namespaces: ['a'], lokiTenant: 'team a' }], /tenants\[0\]\.lokiTenant:/],
    ['an uppercase index', [{ name: 't', namespaces: ['a'], esIndex: 'Logs' }], /tenants\[0\]\.esIndex: an index name must be lowercase/],
    ['a label key the API server refuses', [{ name: 't', namespaceSelector: { matchLabels: { 'bad key': 'x' } } }], /matchLabels\["bad key"\]: not a label key/],
    ['an AccountID beyond uint32', [{ name: 't', namespaces: ['a'], accountID: 4_294_967_296 }], /tenants\.0\.accountID/],
    ['an unknown key', [{ name: 't', namespaces: ['a'], endpoint: 'http://x' }], /tenants\.0: Unrecognized key/],
  ])('refuses %s at start-up', (_what, tenants, why) => {
    expect(() => parseConfig({ tenants })).toThrow(why);
  });
});

describe('tenants: the webhook applies a namespace\'s mapping as its defaults', () => {
  it('a namespace listed by name: its own Secrets, Loki tenant and VictoriaLogs tenant, never the global ones', () => {
    const { env, volumes, warnings } = sidecarEnv(job('j'), optedIn('team-a'));
    for (const v of ['JOBHARVEST_AUTH_TOKEN', 'JOBHARVEST_AUTH_USERNAME', 'JOBHARVEST_AUTH_PASSWORD']) expect(secretOf(env, v)).toBe('a-writer');
    expect(volumes.find((v) => v.name === 'jobharvest-tls')?.secret).toEqual({ secretName: 'a-tls' });
    expect(value(env, 'JOBHARVEST_LOKI_TENANT')).toBe('tenant-a');
    expect(value(env, 'JOBHARVEST_HEADERS')).toBe('AccountID=11,ProjectID=1');
    expect(JSON.stringify(env)).not.toMatch(/shared-writer|"shared"/);
    expect(warnings).toEqual([]);
  });

  it('a namespace selected by its label', () => {
    const { env } = sidecarEnv(job('j'), optedIn('b-one', { labels: { [TEAM_LABEL]: 'b' } }));
    expect(secretOf(env, 'JOBHARVEST_AUTH_TOKEN')).toBe('b-writer');
    expect(value(env, 'JOBHARVEST_LOKI_TENANT')).toBe('tenant-b');
    // ProjectID left out is 0, as VictoriaLogs reads it.
    expect(value(env, 'JOBHARVEST_HEADERS')).toBe('AccountID=22,ProjectID=0');
  });

  it('an unmapped namespace keeps the global configuration, as before', () => {
    const { env } = sidecarEnv(job('j'), optedIn('elsewhere'));
    expect(secretOf(env, 'JOBHARVEST_AUTH_TOKEN')).toBe('shared-writer');
    expect(value(env, 'JOBHARVEST_LOKI_TENANT')).toBe('shared');
    expect(value(env, 'JOBHARVEST_HEADERS')).toBeUndefined();
  });

  it('a mapping sets only what it names: the rest stays global', () => {
    const { env } = sidecarEnv(job('j'), optedIn('ids-only'));
    expect(value(env, 'JOBHARVEST_LOKI_TENANT')).toBe('tenant-c');
    expect(secretOf(env, 'JOBHARVEST_AUTH_TOKEN')).toBe('shared-writer');
  });

  it('precedence: global < mapping < the namespace\'s annotations (the operator\'s) < the Job\'s Secret of its own namespace', () => {
    const ns = optedIn('team-a', { annotations: { 'jobharvest.io/auth-secret': 'ns-writer', 'jobharvest.io/loki-tenant': 'ns-tenant' } });
    const byNs = sidecarEnv(job('j'), ns);
    expect(secretOf(byNs.env, 'JOBHARVEST_AUTH_TOKEN')).toBe('ns-writer');
    expect(value(byNs.env, 'JOBHARVEST_LOKI_TENANT')).toBe('ns-tenant');
    const j = job('j');
    j.metadata.annotations = { 'jobharvest.io/auth-secret': 'job-writer' };
    const byJob = sidecarEnv(j, ns);
    // A secretKeyRef: the kubelet resolves it in the pod's own namespace, never another's.
    expect(secretOf(byJob.env, 'JOBHARVEST_AUTH_TOKEN')).toBe('job-writer');
  });

  it('a Job or pod template cannot move its records to another tenant where the mapping names one', () => {
    const j = job('j');
    j.metadata.annotations = { 'jobharvest.io/loki-tenant': 'tenant-b' };
    j.spec.template.metadata = { annotations: { 'jobharvest.io/es-index': 'logs-b' } };
    const d = decide(j, { config: config(), namespace: optedIn('team-a') });
    expect(d.action).toBe('inject');
    if (d.action !== 'inject') return;
    expect(d.settings).toMatchObject({ tenant: 'team-a', lokiTenant: 'tenant-a', esIndex: 'logs-a', accountID: 11, projectID: 1 });
    expect(d.warnings).toEqual([
      'Job annotation jobharvest.io/loki-tenant="tenant-b" ignored: the namespace\'s log-store tenant is the operator\'s (tenant mapping team-a); using tenant-a',
      'pod template annotation jobharvest.io/es-index="logs-b" ignored: the namespace\'s log-store tenant is the operator\'s (tenant mapping team-a); using logs-a',
    ]);
    // Where the mapping names no index, or the namespace is unmapped, the Job's word stands as before.
    const free = decide(j, { config: config(), namespace: optedIn('ids-only') });
    expect(free.action === 'inject' && free.settings.esIndex).toBe('logs-b');
    const unmapped = decide(j, { config: config(), namespace: optedIn('elsewhere') });
    expect(unmapped.action === 'inject' && unmapped.settings.lokiTenant).toBe('tenant-b');
  });

  it('the tenant headers follow the operator\'s own headers, so a header of that name there does not win; no headers for sinks without HTTP', () => {
    const cfg = config({ sink: { type: 'http', endpoint: 'http://vmauth:8427/insert/jsonline', headers: 'X-Env=prod,AccountID=0' } });
    expect(value(sidecarEnv(job('j'), optedIn('team-a'), cfg).env, 'JOBHARVEST_HEADERS')).toBe('X-Env=prod,AccountID=0,AccountID=11,ProjectID=1');
    const syslog = config({ sink: { type: 'syslog', endpoint: 'tls://syslog:6514' } });
    expect(value(sidecarEnv(job('j'), optedIn('team-a'), syslog).env, 'JOBHARVEST_HEADERS')).toBeUndefined();
  });

  it('offline (jobharvest inject), only a mapping by name applies, and a label mapping that might is said', () => {
    const a = mutateJob(job('j') as never, { config: config(), namespace: undefined, assumeOptedIn: true });
    expect(a.decision.action === 'inject' && a.decision.settings.tenant).toBe('team-a');
    const other = job('j');
    other.metadata.namespace = 'b-one';
    const b = mutateJob(other as never, { config: config(), namespace: undefined, assumeOptedIn: true });
    expect(b.decision.action === 'inject' && b.decision.settings.tenant).toBeUndefined();
    expect(b.warnings).toContain('the labels of namespace b-one are not known, and tenant mappings team-b, team-b2 select namespaces by label: no tenant mapping applied');
  });
});

const flags = (f: Partial<LogsFlags> = {}): LogsFlags => ({ chartNamespace: 'jobharvest', ...f });

function view(v: Partial<ClusterView> = {}): ClusterView {
  return { namespace: 'team-a', jobFound: 'gone', namespaceNote: '', configNote: 'ConfigMap jobharvest/jobharvest', secret: async () => undefined, namespaceAnnotations: {}, namespaceLabels: {}, ...v };
}

function recordSecrets() {
  const asked: string[] = [];
  return { asked, secret: async (name: string) => (asked.push(name), { token: `${name}-token` }) };
}

describe("tenants: jobharvest logs reads a mapped namespace's lines with its own credential only", () => {
  it("uses the mapping's queryAuthSecret and tenant, never the chart's query.authSecret", async () => {
    const s = recordSecrets();
    const r = await resolve(flags(), 'nightly', view({ config: config(), secret: s.secret }));
    expect(s.asked).toEqual(['a-reader']);
    expect(r.credentials.from).toBe('Secret team-a/a-reader (token)');
    expect(r.target).toMatchObject({ type: 'victorialogs', endpoint: 'http://vmauth.logging:8427', vlTenant: { accountID: 11, projectID: 1 } });
    expect(r.sources).toContain('tenant mapping: team-a (chart configuration tenants: namespace team-a is listed by name)');
    expect(r.sources).toContain('tenant: AccountID 11, ProjectID 1 (tenant mapping team-a)');
  });

  it("a namespace selected by label: its mapping's; a mapping with no queryAuthSecret: its authSecret", async () => {
    const s = recordSecrets();
    const b = await resolve(flags(), 'nightly', view({ config: config(), namespace: 'b-one', namespaceLabels: { [TEAM_LABEL]: 'b' }, secret: s.secret }));
    expect(b.credentials.from).toBe('Secret b-one/b-reader (token)');
    const cfg = config({ tenants: [{ name: 'team-a', namespaces: ['team-a'], authSecret: 'a-writer' }] });
    const a = await resolve(flags(), 'nightly', view({ config: cfg, secret: s.secret }));
    expect(a.credentials.from).toBe('Secret team-a/a-writer (token)');
    expect(s.asked).toEqual(['b-reader', 'a-writer']);
  });

  it('a mapping that names no credential: none, and a warning that the global one is not used', async () => {
    const s = recordSecrets();
    const r = await resolve(flags(), 'nightly', view({ config: config(), namespace: 'ids-only', secret: s.secret }));
    expect(s.asked).toEqual([]);
    expect(r.credentials.creds).toBeUndefined();
    expect(r.warnings).toContain("tenant mapping ids-only names no queryAuthSecret or authSecret for namespace ids-only: the chart's global query.authSecret is not used for it");
  });

  it('a namespace whose labels could not be read while a mapping selects by label: no chart credential at all', async () => {
    const s = recordSecrets();
    const r = await resolve(flags(), 'nightly', view({ config: config(), namespace: 'b-one', namespaceLabels: undefined, namespaceAnnotations: undefined, namespaceNote: 'namespace b-one: forbidden', secret: s.secret }));
    expect(s.asked).toEqual([]);
    expect(r.credentials.creds).toBeUndefined();
    expect(r.warnings.join('\n')).toMatch(/the labels of namespace b-one are not known.*none is read; --token-file or --username\/--password-file sends your own/);
    // The user's own credential still goes: it is not the chart's guess.
    const tokenFile = join(mkdtempSync(join(tmpdir(), 'jh-tenants-')), 'token');
    writeFileSync(tokenFile, 'mine\n');
    const own = await resolve(flags({ tokenFile }), 'nightly', view({ config: config(), namespace: 'b-one', namespaceLabels: undefined, secret: s.secret }));
    expect(own.credentials).toEqual({ creds: { token: 'mine' }, from: '--token-file' });
    expect(s.asked).toEqual([]);
  });

  it("an unmapped namespace keeps the chart's query.authSecret, as before", async () => {
    const s = recordSecrets();
    const r = await resolve(flags(), 'nightly', view({ config: config(), namespace: 'elsewhere', secret: s.secret }));
    expect(s.asked).toEqual(['shared-reader']);
    expect(r.target).toMatchObject({ type: 'victorialogs' });
    expect((r.target as { vlTenant?: unknown }).vlTenant).toBeUndefined();
  });

  it('a Job annotation cannot choose the loki tenant the query sends where the mapping names one', async () => {
    const cfg = config({ sink: { type: 'loki', endpoint: 'http://loki.logging:3100' } });
    const job = { annotations: { 'jobharvest.io/loki-tenant': 'tenant-b' }, template: {}, uid: 'u', containers: ['main'] };
    const r = await resolve(flags(), 'nightly', view({ config: cfg, job, jobFound: 'exists' }));
    expect(r.target).toMatchObject({ type: 'loki', tenant: 'tenant-a' });
    expect(r.sources).toContain('tenant: tenant-a (tenant mapping team-a lokiTenant)');
  });

  it('sends the VictoriaLogs tenant headers and the mapped credential to the query API', async () => {
    const seen: IncomingHttpHeaders[] = [];
    const server = createServer((req, res) => {
      seen.push(req.headers);
      req.resume();
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      res.end('');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const cfg = config({ sink: { type: 'http', endpoint: `${url}/insert/jsonline`, authSecret: 'shared-writer' } });
      const err = sink();
      expect(await runLogs('job/nightly', flags(), sink().stream, err.stream, view({ config: cfg, secret: recordSecrets().secret }))).toBe(0);
      expect(seen.length).toBeGreaterThan(0);
      for (const h of seen) expect(h).toMatchObject({ authorization: 'Bearer a-reader-token', accountid: '11', projectid: '1' });
    } finally {
      await new Promise((r) => server.close(r));
    }
  });
});

function sink() {
  const chunks: string[] = [];
  const stream = new Writable({
    write(c: Buffer, _e, cb) {
      chunks.push(c.toString());
      cb();
    },
  });
  return { stream, text: () => chunks.join('') };
}
