import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { buildQuery, followLines, formatLine, parseDuration, parseJobRef, parseOptions, resolve, runLogs, selectLines, type ClusterView, type JobState, type LogsFlags } from '../../src/cli/logs.ts';
import { defaultConfig, parseConfig } from '../../src/core/config.ts';
import { renderLogsUrl } from '../../src/contract/logs-url.ts';
import { mutateJob } from '../../src/core/mutate.ts';
import type { Job } from '../../src/core/kube.ts';
import { compareLines, QueryError, type LogLine, type LogQuery, type QueryClient } from '../../src/query/types.ts';

const flags = (f: Partial<LogsFlags> = {}): LogsFlags => ({ chartNamespace: 'jobharvest', ...f });
const opts = (f: Partial<LogsFlags> = {}) => parseOptions('job/j', flags(f), {});

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
    const q = buildQuery(opts({ since: '1m' }), { namespace: 'n', job: 'j', containers: ['main'] }, 1_000_000);
    expect(q).toEqual({ namespace: 'n', job: 'j', containers: ['main'], fromNs: 940_000n * 1_000_000n });
    expect(buildQuery(opts({ sinceTime: '2025-12-01T07:40:00.5Z', pod: 'j-1' }), { namespace: 'n', job: 'j', containers: undefined }, 0)).toEqual({ namespace: 'n', job: 'j', pod: 'j-1', fromNs: 1764574800500000000n });
    expect(() => opts({ since: '1m', sinceTime: '2025-12-01T07:40:00Z' })).toThrow(/cannot both/);
  });
  it('starts at the existing Job\'s creation (less a minute of clock skew), so an earlier Job of the same name stays out', () => {
    const created = Date.parse('2025-12-01T07:40:00Z');
    expect(buildQuery(opts(), { namespace: 'n', job: 'j', containers: undefined, jobCreatedMs: created }, 0).fromNs).toBe(BigInt(created - 60_000) * 1_000_000n);
    // A later --since-time still narrows further; an earlier one does not widen past the Job.
    expect(buildQuery(opts({ sinceTime: '2025-12-01T08:00:00Z' }), { namespace: 'n', job: 'j', containers: undefined, jobCreatedMs: created }, 0).fromNs).toBe(1764576000000000000n);
    expect(buildQuery(opts({ sinceTime: '2025-01-01T00:00:00Z' }), { namespace: 'n', job: 'j', containers: undefined, jobCreatedMs: created }, 0).fromNs).toBe(BigInt(created - 60_000) * 1_000_000n);
  });
});

describe('jobharvest logs: every option is checked before any I/O', () => {
  // A kubeconfig that cannot be read: touching it would fail with its own message.
  const noCluster = { kubeconfig: '/nonexistent/kubeconfig', caFile: '/nonexistent/ca.pem' };
  it.each([
    [{ tail: 'x' }, /--tail x: expected a whole number, -1 for all/],
    [{ tail: '-2' }, /--tail -2/],
    [{ since: '3 days' }, /--since 3 days: expected a duration/],
    [{ sinceTime: 'yesterday' }, /--since-time yesterday: expected RFC 3339/],
    [{ since: '1m', sinceTime: '2025-12-01T07:40:00Z' }, /--since and --since-time cannot both be given/],
    [{ container: 'main', allContainers: true }, /--all-containers cannot be given with -c/],
    [{ username: 'u' }, /--username needs --password-file/],
    [{ passwordFile: '/p' }, /--password-file needs --username/],
    [{ username: 'u', passwordFile: '/p', tokenFile: '/t' }, /--token-file and --username cannot both be given/],
    [{ output: 'yaml' }, /-o yaml: only json is supported/],
    [{ queryType: 'splunk' }, /--query-type splunk/],
    [{ queryEndpoint: 'ftp://x' }, /--query-endpoint ftp:/],
    [{ trustEndpoint: 'not a url' }, /--trust-endpoint not a url: not a URL/],
    [{ pageSize: '0' }, /--page-size 0/],
  ] as Array<[Partial<LogsFlags>, RegExp]>)('%j', async (f, msg) => {
    await expect(runLogs('job/nightly', flags({ ...noCluster, ...f }), sink().stream, sink().stream)).rejects.toThrow(msg);
  });
  it('and the Job reference too', async () => {
    await expect(runLogs('pod/nightly', flags(noCluster), sink().stream, sink().stream)).rejects.toThrow(/expected job\/NAME/);
  });
});

describe('jobharvest logs: output', () => {
  const l: LogLine = { ns: 1764574800000000120n, stream: 'stderr', message: 'done', pod: 'nightly-x7k2p', container: 'main', restart: 1, id: 'a-0' };
  it('prints the message as kubectl logs does, with its timestamp and prefix flags', () => {
    expect(formatLine(l, { namespace: 'n', job: 'j' }, {})).toBe('done\n');
    expect(formatLine(l, { namespace: 'n', job: 'j' }, { timestamps: true, prefix: true })).toBe('[pod/nightly-x7k2p/main] 2025-12-01T07:40:00.00000012Z done\n');
  });
  it('prints a joined multiline record as its lines, in order, each with the prefix and timestamp', () => {
    const trace: LogLine = { ...l, message: 'Traceback (most recent call last):\n  File "a.py", line 1\n\nValueError: x' };
    expect(formatLine(trace, { namespace: 'n', job: 'j' }, {})).toBe('Traceback (most recent call last):\n  File "a.py", line 1\n\nValueError: x\n');
    expect(formatLine(trace, { namespace: 'n', job: 'j' }, { timestamps: true, prefix: true }).split('\n')).toEqual([
      '[pod/nightly-x7k2p/main] 2025-12-01T07:40:00.00000012Z Traceback (most recent call last):',
      '[pod/nightly-x7k2p/main] 2025-12-01T07:40:00.00000012Z   File "a.py", line 1',
      '[pod/nightly-x7k2p/main] 2025-12-01T07:40:00.00000012Z ',
      '[pod/nightly-x7k2p/main] 2025-12-01T07:40:00.00000012Z ValueError: x',
      '',
    ]);
    // -o json keeps the record one object: its message holds the newlines.
    const json = formatLine(trace, { namespace: 'n', job: 'j' }, { output: 'json' });
    expect(json.split('\n')).toHaveLength(2);
    expect((JSON.parse(json) as { message: string }).message).toBe(trace.message);
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
    for await (const x of selectLines(client, q, opts(f))) out.push(x.message);
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
      for await (const _ of selectLines(none, q, opts({ previous: true }))) void _;
    }).rejects.toThrow(/previous terminated container not found/);
  });
});

describe('jobharvest logs --follow', () => {
  /** A log server whose lines become visible at their arrival time, on a clock that moves only when the command sleeps. */
  function world(total: number, opts: { deliveredAt: number; lateMs?: number }) {
    let now = 1_000_000;
    const start = now;
    const all = Array.from({ length: total }, (_, i) => {
      // Two pods writing every 100 ms; pod b's lines reach the server up to lateMs later than pod a's.
      const written = start + i * 100;
      const pod = i % 2 ? 'b' : 'a';
      return { line: { ns: BigInt(written) * 1_000_000n, stream: 'stdout', message: `line ${i}`, pod, container: 'main', restart: 0, id: `${pod}-${i * 10}` } as LogLine, arrives: written + 300 + (pod === 'b' ? (opts.lateMs ?? 0) : 0) };
    });
    const queries: LogQuery[] = [];
    const client: QueryClient = {
      kind: 'fake',
      async *lines(q: LogQuery) {
        queries.push(q);
        yield* all
          .filter((x) => x.arrives <= now && (q.fromNs === undefined || x.line.ns >= q.fromNs) && (q.toNs === undefined || x.line.ns < q.toNs))
          .map((x) => x.line)
          .sort(compareLines);
      },
    };
    const clock = { nowMs: () => now, sleep: async (ms: number) => void (now += ms) };
    const jobState = async (): Promise<JobState> => (now >= start + opts.deliveredAt ? 'delivered' : now >= start + total * 100 ? 'finished' : 'running');
    return { all, client, clock, jobState, queries, now: () => now - start };
  }
  const o = (f: Partial<LogsFlags> = {}) => opts({ follow: true, ...f });

  it('prints every line once, in order, while they arrive, and ends once the Job\'s delivery is recorded', async () => {
    const w = world(200, { deliveredAt: 22_000, lateMs: 2000 });
    const got: string[] = [];
    const at: number[] = [];
    for await (const l of followLines(w.client, { namespace: 'n', job: 'j' }, o(), w.jobState, w.clock)) {
      got.push(l.message);
      at.push(w.now());
    }
    expect(got).toEqual(w.all.map((x) => x.line.message));
    // Printed while the Job ran, not all at the end.
    expect(at.filter((t) => t < 20_000).length).toBeGreaterThan(100);
    expect(w.now()).toBeLessThan(22_000 + 10_000);
  });

  it('goes on past a server that answers 503 for a while (an index still being created), and stops on other errors', async () => {
    const w = world(50, { deliveredAt: 12_000 });
    let calls = 0;
    const flaky: QueryClient = {
      kind: 'flaky',
      lines(q: LogQuery) {
        calls++;
        if (calls <= 3) throw new QueryError('POST /x/_search: HTTP 503: all shards failed', 503);
        return w.client.lines(q);
      },
    };
    const notes: string[] = [];
    const got: string[] = [];
    for await (const l of followLines(flaky, { namespace: 'n', job: 'j' }, o(), w.jobState, w.clock, (n) => notes.push(n))) got.push(l.message);
    expect(got).toEqual(w.all.map((x) => x.line.message));
    // A few seconds of 503s pass quietly; one that lasts gets a note.
    expect(notes).toEqual([]);
    const down = world(50, { deliveredAt: 25_000 });
    let downCalls = 0;
    const long: QueryClient = {
      kind: 'down',
      lines(q: LogQuery) {
        if (++downCalls <= 20) throw new QueryError('POST /x/_search: HTTP 503: all shards failed', 503);
        return down.client.lines(q);
      },
    };
    const longNotes: string[] = [];
    const all: string[] = [];
    for await (const l of followLines(long, { namespace: 'n', job: 'j' }, o(), down.jobState, down.clock, (n) => longNotes.push(n))) all.push(l.message);
    expect(all).toEqual(down.all.map((x) => x.line.message));
    // About 20 s down: a note every 10 s of it, and nothing else.
    expect(longNotes.length).toBeGreaterThan(0);
    expect(new Set(longNotes)).toEqual(new Set(['POST /x/_search: HTTP 503: all shards failed; trying again']));
    const broken: QueryClient = { kind: 'broken', lines: () => { throw new QueryError('HTTP 400: bad query', 400); } };
    await expect(async () => {
      for await (const _ of followLines(broken, { namespace: 'n', job: 'j' }, o(), w.jobState, w.clock)) void _;
    }).rejects.toThrow(/HTTP 400/);
  });

  it('prints, once, a line that became visible later than the lag (a busy server), instead of losing it', async () => {
    // Pod b's lines reach the server 8 s after they were written: more than the 5 s lag, less than twice it.
    const w = world(100, { deliveredAt: 20_000, lateMs: 8000 });
    const got: string[] = [];
    for await (const l of followLines(w.client, { namespace: 'n', job: 'j' }, o(), w.jobState, w.clock)) got.push(l.message);
    expect([...got].sort()).toEqual(w.all.map((x) => x.line.message).sort());
    expect(new Set(got).size).toBe(got.length);
  });

  it('starts with the last N lines for --tail, then follows', async () => {
    const w = world(100, { deliveredAt: 15_000 });
    const got: string[] = [];
    for await (const l of followLines(w.client, { namespace: 'n', job: 'j' }, o({ tail: '2' }), w.jobState, w.clock)) got.push(l.message);
    expect(got).toEqual(w.all.map((x) => x.line.message));
    const late = world(100, { deliveredAt: 15_000 });
    for (let i = 0; i < 60; i++) await late.clock.sleep(100);
    const tailFirst: string[] = [];
    for await (const l of followLines(late.client, { namespace: 'n', job: 'j' }, o({ tail: '2' }), late.jobState, late.clock)) tailFirst.push(l.message);
    // 6 s in, with the 5 s lag: lines 0-9 are settled, and the last two of them come first.
    expect(tailFirst.slice(0, 2)).toEqual(['line 8', 'line 9']);
    expect(tailFirst.slice(2)).toEqual(late.all.slice(10).map((x) => x.line.message));
  });

  it('prints what is there and ends at once when the Job is already delivered or gone, and refuses --previous', async () => {
    const w = world(10, { deliveredAt: 0 });
    for (let i = 0; i < 20; i++) await w.clock.sleep(100);
    const got: string[] = [];
    for await (const l of followLines(w.client, { namespace: 'n', job: 'j' }, o(), w.jobState, w.clock)) got.push(l.message);
    expect(got).toHaveLength(10);
    expect(w.queries).toHaveLength(1);
    expect(() => o({ previous: true })).toThrow(/--follow cannot be given with --previous/);
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

describe('jobharvest logs: credentials go only where the operator said', () => {
  const config = parseConfig({ sink: { type: 'loki', endpoint: 'http://vl.logging:9428/insert/loki/api/v1/push' }, query: { authSecret: 'query-reader' } });
  const tenantJob = (annotations: Record<string, string>) => ({ annotations, template: {}, uid: 'u-1', containers: ['main'] });
  const env = process.env.JOBHARVEST_QUERY_TOKEN;
  afterEach(() => {
    if (env === undefined) delete process.env.JOBHARVEST_QUERY_TOKEN;
    else process.env.JOBHARVEST_QUERY_TOKEN = env;
  });

  it('sends no credentials to a query endpoint a Job annotation chose, and says so', async () => {
    process.env.JOBHARVEST_QUERY_TOKEN = 'operator-query-token';
    const asked: string[] = [];
    const job = tenantJob({ 'jobharvest.io/query-endpoint': 'http://tenant.team-a:9428', 'jobharvest.io/query-type': 'victorialogs' });
    const r = await resolve(flags(), 'nightly', view({ config, job, jobFound: 'exists', secret: async (n) => (asked.push(n), { token: 'sa-token' }) }));
    expect(r.target).toMatchObject({ type: 'victorialogs', endpoint: 'http://tenant.team-a:9428' });
    expect(r.credentials.creds).toBeUndefined();
    expect(asked).toEqual([]);
    expect(r.sources).toContain('query endpoint: http://tenant.team-a:9428 (Job annotation jobharvest.io/query-endpoint)');
    expect(r.sources).toContain('query type: victorialogs (Job annotation jobharvest.io/query-type)');
    expect(r.warnings.join('\n')).toMatch(/Job annotation jobharvest.io\/query-endpoint chose the query endpoint http:\/\/tenant.team-a:9428: no credentials are sent there \(JOBHARVEST_QUERY_TOKEN held back\); --trust-endpoint http:\/\/tenant.team-a:9428 sends them/);
  });

  it('treats a sink endpoint from an annotation, and a namespace annotation, the same way', async () => {
    const tokenFile = join(mkdtempSync(join(tmpdir(), 'jh-logs-')), 'token');
    writeFileSync(tokenFile, 'operator-query-token\n');
    const sinkJob = tenantJob({ 'jobharvest.io/endpoint': 'http://tenant.team-a:9428/insert/loki/api/v1/push' });
    const a = await resolve(flags({ tokenFile }), 'nightly', view({ config, job: sinkJob, jobFound: 'exists' }));
    expect(a.target).toMatchObject({ endpoint: 'http://tenant.team-a:9428' });
    expect(a.credentials.creds).toBeUndefined();
    const nsAnnotations = { 'jobharvest.io/query-endpoint': 'http://vl.team-a:9428', 'jobharvest.io/query-type': 'victorialogs' };
    const b = await resolve(flags({ tokenFile }), 'nightly', view({ config, namespaceAnnotations: nsAnnotations }));
    expect(b.credentials.creds).toBeUndefined();
    expect(b.warnings.join('\n')).toMatch(/namespace annotation jobharvest.io\/query-endpoint chose the query endpoint .*\(--token-file held back\)/);
    // With nothing to hold back a run stays quiet; --explain still says who chose the endpoint.
    const plain = parseConfig({ sink: { type: 'loki', endpoint: 'http://vl.logging:9428/insert/loki/api/v1/push' } });
    const quiet = await resolve(flags(), 'nightly', view({ config: plain, namespaceAnnotations: nsAnnotations }));
    expect(quiet.warnings).toEqual([]);
    expect(quiet.explainWarnings.join('\n')).toMatch(/^namespace annotation jobharvest.io\/query-endpoint chose the query endpoint http:\/\/vl.team-a:9428: no credentials are sent there; --trust-endpoint/);
    // Trusted by name, with the flag: then they go.
    const c = await resolve(flags({ tokenFile, trustEndpoint: 'http://vl.team-a:9428' }), 'nightly', view({ config, namespaceAnnotations: nsAnnotations }));
    expect(c.credentials).toEqual({ creds: { token: 'operator-query-token' }, from: '--token-file' });
    // Trusting another URL trusts nothing here.
    const d = await resolve(flags({ tokenFile, trustEndpoint: 'http://elsewhere:9428' }), 'nightly', view({ config, namespaceAnnotations: nsAnnotations }));
    expect(d.credentials.creds).toBeUndefined();
  });

  it('never reads a Secret named by a Job annotation, even for the chart\'s own endpoint', async () => {
    const asked: string[] = [];
    const secret = async (n: string) => (asked.push(n), { token: 'sa-token' });
    const plain = parseConfig({ sink: { type: 'loki', endpoint: 'http://vl.logging:9428/insert/loki/api/v1/push' } });
    const r = await resolve(flags(), 'nightly', view({ config: plain, job: tenantJob({ 'jobharvest.io/auth-secret': 'legacy-sa-token' }), jobFound: 'exists', secret }));
    expect(asked).toEqual([]);
    expect(r.credentials.creds).toBeUndefined();
    expect(r.warnings.join('\n')).toMatch(/Secret legacy-sa-token named by the Job annotation jobharvest.io\/auth-secret is not read/);
    // The chart's own Secret for its own endpoint is.
    const ok = await resolve(flags(), 'nightly', view({ config, secret }));
    expect(asked).toEqual(['query-reader']);
    expect(ok.credentials.from).toBe('Secret team-a/query-reader (token)');
  });

  it('a tenant listener named by a Job annotation receives no Authorization header, and --explain warns', async () => {
    process.env.JOBHARVEST_QUERY_TOKEN = 'operator-query-token';
    const seen: Array<string | undefined> = [];
    const server = createServer((req, res) => {
      seen.push(req.headers.authorization);
      req.resume();
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      res.end('');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const cluster = view({ config, job: tenantJob({ 'jobharvest.io/query-endpoint': url, 'jobharvest.io/query-type': 'victorialogs' }), jobFound: 'exists', secret: async () => ({ token: 'sa-token' }) });
      const out = sink();
      const err = sink();
      expect(await runLogs('job/nightly', flags(), out.stream, err.stream, cluster)).toBe(0);
      expect(seen.length).toBeGreaterThan(0);
      expect(seen.filter((h) => h !== undefined)).toEqual([]);
      expect(err.text()).toMatch(/warning: Job annotation jobharvest.io\/query-endpoint chose the query endpoint/);
      const explain = sink();
      await runLogs('job/nightly', flags({ explain: true }), explain.stream, sink().stream, cluster);
      expect(explain.text()).toMatch(/credentials: none \(the query endpoint is not the operator's\)/);
      expect(explain.text()).toMatch(/warning: Job annotation jobharvest.io\/query-endpoint chose the query endpoint/);
      expect(explain.text()).not.toContain('operator-query-token');
    } finally {
      await new Promise((r) => server.close(r));
    }
  });
});

function sink() {
  const chunks: string[] = [];
  const stream = new Writable({ write(c: Buffer, _e, cb) { chunks.push(c.toString()); cb(); } });
  return { stream, text: () => chunks.join('') };
}

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

  it("replaces a link set in advance (a tenant's would pass for jobharvest's), with a warning; absent without a template", () => {
    const preset = admit(job({ name: 'x', annotations: { 'jobharvest.io/logs-url': 'https://phish.example/login' } }));
    expect(preset.job.metadata?.annotations?.['jobharvest.io/logs-url']).toBe('https://grafana.example/explore?ns=team-a&job=x&from=1764574800000&to=now');
    expect(preset.warnings).toContainEqual(expect.stringContaining('jobharvest.io/logs-url set on the Job is replaced'));
    const plainConfig = { config: parseConfig({ sink: { type: 'loki', endpoint: 'http://loki:3100' } }), namespace: { name: 'team-a', annotations: { 'jobharvest.io/inject': 'enabled' } } };
    expect(mutateJob(job({ name: 'x' }), plainConfig).job.metadata?.annotations?.['jobharvest.io/logs-url']).toBeUndefined();
    const removed = mutateJob(job({ name: 'x', annotations: { 'jobharvest.io/logs-url': 'https://phish.example/login' } }), plainConfig);
    expect(removed.job.metadata?.annotations?.['jobharvest.io/logs-url']).toBeUndefined();
    expect(removed.warnings).toContainEqual(expect.stringContaining('is removed'));
  });

  it('refuses a template with an unknown placeholder at configuration time', () => {
    expect(() => parseConfig({ logsUrlTemplate: 'https://x/{pod}' })).toThrow(/unknown placeholder \{pod\}/);
  });
});
