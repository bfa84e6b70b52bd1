import { describe, expect, it } from 'vitest';
import { buildQuery, formatLine, parseDuration, parseJobRef, resolve, selectLines, type ClusterView, type LogsFlags } from '../../src/cli/logs.ts';
import { defaultConfig, parseConfig } from '../../src/core/config.ts';
import { renderLogsUrl } from '../../src/contract/logs-url.ts';
import { mutateJob } from '../../src/core/mutate.ts';
import type { Job } from '../../src/core/kube.ts';
import type { LogLine, LogQuery, QueryClient } from '../../src/query/types.ts';

const flags = (f: Partial<LogsFlags> = {}): LogsFlags => ({ chartNamespace: 'jobharvest', ...f });

function view(v: Partial<ClusterView> = {}): ClusterView & { namespace: string } {
  return { namespace: 'team-a', jobFound: 'gone', namespaceNote: '', configNote: 'ConfigMap jobharvest/jobharvest', secret: async () => undefined, ...v };
}

const SECRET_TOKEN = 'tok-4f1e9d-do-not-print';

describe('jobharvest logs: arguments', () => {
  it.each([
    ['job/nightly', 'nightly'],
    ['jobs/nightly', 'nightly'],
    ['job.batch/nightly-2', 'nightly-2'],
    ['nightly', 'nightly'],
  ])('takes %s as kubectl does', (ref, name) => {
    expect(parseJobRef(ref)).toBe(name);
  });
  it('refuses other kinds', () => {
    expect(() => parseJobRef('pod/nightly')).toThrow(/expected job\/NAME/);
  });
  it('reads --since as a Go duration', () => {
    expect(parseDuration('90s')).toBe(90_000);
    expect(parseDuration('1h30m')).toBe(5_400_000);
    expect(() => parseDuration('3 days')).toThrow(/duration/);
    const q = buildQuery(flags({ since: '1m' }), { namespace: 'n', job: 'j', containers: ['main'] }, 1_000_000);
    expect(q).toEqual({ namespace: 'n', job: 'j', containers: ['main'], fromNs: 940_000n * 1_000_000n });
    expect(buildQuery(flags({ sinceTime: '2025-12-01T07:40:00.5Z', pod: 'j-1' }), { namespace: 'n', job: 'j', containers: undefined }, 0)).toEqual({ namespace: 'n', job: 'j', pod: 'j-1', fromNs: 1764574800500000000n });
    expect(() => buildQuery(flags({ since: '1m', sinceTime: '2025-12-01T07:40:00Z' }), { namespace: 'n', job: 'j', containers: undefined }, 0)).toThrow(/cannot both/);
  });
  it('starts at the existing Job\'s creation (less a minute of clock skew), so an earlier Job of the same name stays out', () => {
    const created = Date.parse('2025-12-01T07:40:00Z');
    expect(buildQuery(flags(), { namespace: 'n', job: 'j', containers: undefined, jobCreatedMs: created }, 0).fromNs).toBe(BigInt(created - 60_000) * 1_000_000n);
    // A later --since-time still narrows further; an earlier one does not widen past the Job.
    expect(buildQuery(flags({ sinceTime: '2025-12-01T08:00:00Z' }), { namespace: 'n', job: 'j', containers: undefined, jobCreatedMs: created }, 0).fromNs).toBe(1764576000000000000n);
    expect(buildQuery(flags({ sinceTime: '2025-01-01T00:00:00Z' }), { namespace: 'n', job: 'j', containers: undefined, jobCreatedMs: created }, 0).fromNs).toBe(BigInt(created - 60_000) * 1_000_000n);
  });
});

describe('jobharvest logs: output', () => {
  const l: LogLine = { ns: 1764574800000000120n, stream: 'stderr', message: 'done', pod: 'nightly-x7k2p', container: 'main', restart: 1, id: 'a-0' };
  it('prints the message as kubectl logs does, with its timestamp and prefix flags', () => {
    expect(formatLine(l, { namespace: 'n', job: 'j' }, {})).toBe('done\n');
    expect(formatLine(l, { namespace: 'n', job: 'j' }, { timestamps: true, prefix: true })).toBe('[pod/nightly-x7k2p/main] 2025-12-01T07:40:00.00000012Z done\n');
  });
  it('prints one JSON object per line with -o json', () => {
    expect(JSON.parse(formatLine(l, { namespace: 'n', job: 'j' }, { output: 'json' }))).toEqual({ time: '2025-12-01T07:40:00.00000012Z', namespace: 'n', job: 'j', pod: 'nightly-x7k2p', container: 'main', restart: 1, stream: 'stderr', message: 'done' });
  });
});

describe('jobharvest logs: --tail and --previous', () => {
  const lines: LogLine[] = [];
  for (const [pod, restarts] of [['p-a', 3], ['p-b', 1]] as const) for (let r = 0; r < restarts; r++) for (let i = 0; i < 3; i++) lines.push({ ns: BigInt(lines.length), stream: 'stdout', message: `${pod} run ${r} line ${i}`, pod, container: 'main', restart: r, id: `${pod}${r}-${i}` });
  let passes = 0;
  const client: QueryClient = {
    kind: 'fake',
    async *lines(_q: LogQuery) {
      passes++;
      yield* lines;
    },
  };
  const q = { namespace: 'n', job: 'j' };
  const run = async (f: Partial<LogsFlags>) => {
    const out: string[] = [];
    for await (const x of selectLines(client, q, f)) out.push(x.message);
    return out;
  };
  it('--tail keeps the last N', async () => {
    expect(await run({ tail: '2' })).toEqual(['p-b run 0 line 1', 'p-b run 0 line 2']);
    expect(await run({ tail: '0' })).toEqual([]);
    expect(await run({ tail: '100' })).toHaveLength(lines.length);
    expect(await run({})).toHaveLength(lines.length);
  });
  it('--previous prints each container\'s run before its latest restart, reading twice instead of holding the lines', async () => {
    passes = 0;
    expect(await run({ previous: true })).toEqual(['p-a run 1 line 0', 'p-a run 1 line 1', 'p-a run 1 line 2']);
    expect(passes).toBe(2);
    expect(await run({ previous: true, tail: '1' })).toEqual(['p-a run 1 line 2']);
  });
  it('--previous without any restart fails like kubectl', async () => {
    const none: QueryClient = { kind: 'fake', async *lines() { yield lines[0]!; } };
    await expect(async () => {
      for await (const _ of selectLines(none, q, { previous: true })) void _;
    }).rejects.toThrow(/previous terminated container not found/);
  });
});

describe('jobharvest logs: where to look', () => {
  const config = parseConfig({ sink: { type: 'loki', endpoint: 'http://loki.logging:3100', authSecret: 'loki-writer' }, query: { authSecret: 'loki-reader' } });

  it('takes the chart configuration when the Job and the namespace say nothing', async () => {
    const r = await resolve(flags(), 'nightly', view({ config, namespaceAnnotations: {} }));
    expect(r.target).toMatchObject({ type: 'loki', endpoint: 'http://loki.logging:3100', how: 'derived from the loki sink endpoint' });
    expect(r.sources).toContain('sink: loki (chart configuration)');
    expect(r.containers).toBeUndefined();
  });

  it('namespace annotations override the chart, the Job\'s override the namespace, flags override all', async () => {
    const namespaceAnnotations = { 'jobharvest.io/sink': 'elasticsearch', 'jobharvest.io/endpoint': 'https://es.logging:9200', 'jobharvest.io/es-index': 'team-a-logs' };
    const ns = await resolve(flags(), 'nightly', view({ config, namespaceAnnotations }));
    expect(ns.target).toMatchObject({ type: 'elasticsearch', endpoint: 'https://es.logging:9200', index: 'team-a-logs' });
    expect(ns.sources).toContain('sink: elasticsearch (namespace annotation jobharvest.io/sink)');

    const job = { annotations: { 'jobharvest.io/sink': 'loki', 'jobharvest.io/endpoint': 'http://vl.logging:9428/insert/loki/api/v1/push' }, template: { 'kubectl.kubernetes.io/default-container': 'worker' }, uid: 'u-1', containers: ['setup', 'worker'] };
    const j = await resolve(flags(), 'nightly', view({ config, namespaceAnnotations, job, jobFound: 'exists' }));
    expect(j.target).toMatchObject({ type: 'victorialogs', endpoint: 'http://vl.logging:9428', fields: 'loki' });
    expect(j.sources).toContain('sink: loki (Job annotation jobharvest.io/sink)');
    expect(j.containers).toEqual(['worker']);

    const f = await resolve(flags({ queryEndpoint: 'http://other:3100', queryType: 'loki', container: 'setup' }), 'nightly', view({ config, namespaceAnnotations, job, jobFound: 'exists' }));
    expect(f.target).toMatchObject({ type: 'loki', endpoint: 'http://other:3100', how: 'query endpoint from --query-endpoint' });
    expect(f.containers).toEqual(['setup']);
    expect((await resolve(flags({ allContainers: true }), 'nightly', view({ config, job, jobFound: 'exists' }))).containers).toBeUndefined();
  });

  it('reads a query endpoint annotation on the namespace', async () => {
    const r = await resolve(flags(), 'nightly', view({ config: parseConfig({ sink: { type: 'otlp', endpoint: 'http://collector:4318' } }), namespaceAnnotations: { 'jobharvest.io/query-endpoint': 'http://vl:9428', 'jobharvest.io/query-type': 'victorialogs' } }));
    expect(r.target).toMatchObject({ type: 'victorialogs', endpoint: 'http://vl:9428', fields: 'otlp', how: 'query endpoint from namespace annotation jobharvest.io/query-endpoint' });
  });

  it('says which key to set when the sink cannot be queried', async () => {
    const r = await resolve(flags(), 'nightly', view({ config: parseConfig({ sink: { type: 'syslog', endpoint: 'tls://syslog:6514' } }) }));
    expect(r.target).toMatch(/^the syslog sink .*query\.endpoint and query\.type/);
  });

  it('takes credentials from the query Secret, and never shows them', async () => {
    const asked: string[] = [];
    const secret = async (name: string) => {
      asked.push(name);
      return { token: SECRET_TOKEN };
    };
    const r = await resolve(flags(), 'nightly', view({ config, secret }));
    expect(asked).toEqual(['loki-reader']);
    expect(r.credentials.creds).toEqual({ token: SECRET_TOKEN });
    expect(r.credentials.from).toBe('Secret team-a/loki-reader (token)');
    expect(JSON.stringify([r.sources, r.warnings, r.credentials.from, r.target])).not.toContain(SECRET_TOKEN);
  });

  it('falls back to the sink\'s Secret, and warns when it cannot be read', async () => {
    const r = await resolve(flags(), 'nightly', view({ config: parseConfig({ sink: { type: 'loki', endpoint: 'http://loki:3100', authSecret: 'loki-writer' } }) }));
    expect(r.credentials.from).toBe('none');
    expect(r.warnings).toEqual(['Secret team-a/loki-writer could not be read or holds no token or username/password; querying without credentials']);
  });

  it('shows no credential that sits in an endpoint', async () => {
    const r = await resolve(flags({ queryEndpoint: 'https://reader:hunter2@vl:9428', queryType: 'victorialogs' }), 'nightly', view({ config: defaultConfig() }));
    expect(JSON.stringify(r.sources)).not.toContain('hunter2');
  });
});

describe('the jobharvest.io/logs-url annotation', () => {
  const tpl = 'https://grafana.example/explore?ns={namespace}&job={job}&from={from}&to={to}';
  const job = (meta: Record<string, unknown>): Job => ({ apiVersion: 'batch/v1', kind: 'Job', metadata: { namespace: 'team-a', ...meta }, spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: 'busybox' }] } } } });
  const config = parseConfig({ sink: { type: 'loki', endpoint: 'http://loki:3100' }, logsUrlTemplate: tpl });
  const admit = (j: Job) => mutateJob(j, { config, namespace: { name: 'team-a', annotations: { 'jobharvest.io/inject': 'enabled' } }, now: 1764574800000 });

  it('is written at admission with the namespace, name and admission time; the end is open', () => {
    const out = admit(job({ name: 'nightly report' }));
    expect(out.job.metadata?.annotations?.['jobharvest.io/logs-url']).toBe('https://grafana.example/explore?ns=team-a&job=nightly%20report&from=1764574800000&to=now');
  });

  it('is left out for a generateName Job, whose name is not known yet', () => {
    expect(admit(job({ generateName: 'nightly-' })).job.metadata?.annotations?.['jobharvest.io/logs-url']).toBeUndefined();
  });

  it('is left out when the template needs the uid, which admission does not know', () => {
    expect(renderLogsUrl('https://x/{uid}', { namespace: 'n', job: 'j', uid: undefined, from: 1, to: undefined })).toBeUndefined();
    expect(renderLogsUrl('https://x/{uid}?to={to}', { namespace: 'n', job: 'j', uid: 'u-1', from: 1, to: 2 })).toBe('https://x/u-1?to=2');
  });

  it('keeps a link the Job already has, and is absent without a template', () => {
    expect(admit(job({ name: 'x', annotations: { 'jobharvest.io/logs-url': 'https://mine' } })).job.metadata?.annotations?.['jobharvest.io/logs-url']).toBe('https://mine');
    const plain = mutateJob(job({ name: 'x' }), { config: parseConfig({ sink: { type: 'loki', endpoint: 'http://loki:3100' } }), namespace: { name: 'team-a', annotations: { 'jobharvest.io/inject': 'enabled' } } });
    expect(plain.job.metadata?.annotations?.['jobharvest.io/logs-url']).toBeUndefined();
  });

  it('refuses a template with an unknown placeholder at configuration time', () => {
    expect(() => parseConfig({ logsUrlTemplate: 'https://x/{pod}' })).toThrow(/unknown placeholder \{pod\}/);
  });
});
