import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { DELIVERY_ANNOTATION, HOLD_ANNOTATION, LOGS_URL_ANNOTATION, STATUS_ANNOTATION } from '../../src/contract/harvest.ts';
import { keyFromText, keyId, PURPOSE, signedJson } from '../../src/contract/signature.ts';
import { readSigningKeys, type JobPage, type StatusApi } from '../../src/cli/status/cluster.ts';
import { parseStatusOptions } from '../../src/cli/status/options.ts';
import { checkRecord, cronJobRuns, exitCodeOf, renderJson, renderTable, renderYaml, statusRow, type JobLike } from '../../src/cli/status/rows.ts';
import { runStatusWith } from '../../src/cli/status/run.ts';

const KEY = keyFromText('status-test-signing-key-0123456789');
const OTHER = keyFromText('another-signing-key-abcdefghijklmnop');
const status = (o: Record<string, unknown> = {}) => JSON.stringify({ version: '0.1.0', mode: 'node', sink: 'loki', container: 'jobharvest', volumes: [], ttlSecondsAfterFinished: 60, terminationGracePeriodSeconds: null, defaultContainer: 'main', ...o });

function job(name: string, o: { uid?: string; ns?: string; record?: object; key?: typeof KEY; rawRecord?: string; held?: boolean; ttl?: number; finished?: boolean; created?: string; cron?: { name: string; uid: string }; logs?: string; status?: string | null } = {}): JobLike {
  const uid = o.uid ?? `uid-${name}`;
  const annotations: Record<string, string> = {};
  if (o.status !== null) annotations[STATUS_ANNOTATION] = o.status ?? status();
  if (o.record) annotations[DELIVERY_ANNOTATION] = signedJson(o.key ?? KEY, PURPOSE.delivery, uid, o.record);
  if (o.rawRecord) annotations[DELIVERY_ANNOTATION] = o.rawRecord;
  if (o.held) annotations[HOLD_ANNOTATION] = signedJson(KEY, PURPOSE.hold, uid, { originalTtl: 60, since: '2026-01-01T00:00:00Z', maxHoldSeconds: 86400 });
  if (o.logs) annotations[LOGS_URL_ANNOTATION] = o.logs;
  return {
    metadata: {
      name,
      namespace: o.ns ?? 'team-a',
      uid,
      annotations,
      ...(o.created ? { creationTimestamp: o.created } : {}),
      ...(o.cron ? { ownerReferences: [{ apiVersion: 'batch/v1', kind: 'CronJob', name: o.cron.name, uid: o.cron.uid, controller: true }] } : {}),
    },
    spec: { ...(o.ttl !== undefined ? { ttlSecondsAfterFinished: o.ttl } : {}) },
    status: { conditions: o.finished === false ? [] : [{ type: 'Complete', status: 'True' }] },
  };
}

// eslint-disable-next-line no-control-regex -- the characters a terminal acts on are the point
const RAW_CONTROLS = /[\x1b\x07\u009b]/;
const shipped = { sink: 'loki', pods: 1, shipped: 2000, lost: 0, unaccounted: 0 };

describe('jobharvest status: the delivery record and its signature', () => {
  it('verified only when a key read checks it; unverified without a key; never verified unchecked', () => {
    const j = job('a', { record: shipped });
    expect(checkRecord(j, [KEY]).state).toBe('verified');
    expect(checkRecord(j, undefined).state).toBe('unverified');
    expect(checkRecord(j, []).state).toBe('unverified');
    expect(checkRecord(job('b'), [KEY]).state).toBe('none');
  });

  it('a record signed with a key none of those read has names that key; one altered, copied from another Job or unsigned is invalid', () => {
    const other = checkRecord(job('a', { record: shipped, key: OTHER }), [KEY]);
    expect(other).toMatchObject({ state: 'other-key', keyId: keyId(OTHER) });
    const altered = job('a', { record: shipped });
    altered.metadata!.annotations![DELIVERY_ANNOTATION] = altered.metadata!.annotations![DELIVERY_ANNOTATION]!.replace('"lost":0', '"lost":5');
    expect(checkRecord(altered, [KEY]).state).toBe('invalid');
    const copied = job('c', { uid: 'uid-c', rawRecord: job('a', { record: shipped }).metadata!.annotations![DELIVERY_ANNOTATION] });
    expect(checkRecord(copied, [KEY]).state).toBe('invalid');
    expect(checkRecord(job('d', { rawRecord: JSON.stringify(shipped) }), [KEY]).state).toBe('invalid');
    expect(checkRecord(job('e', { rawRecord: '{"sink":"loki","pods":1,"shipped":-3,"lost":0,"unaccounted":0}' }), undefined).state).toBe('invalid');
  });

  it('a record written before usage existed still verifies, and one with usage carries it into the row', () => {
    const usage = { pods: 1, cpu_request_millicores: 510, memory_request_bytes: 160 * 2 ** 20, run_seconds: 12.5, cpu_core_seconds: 6.375, memory_gib_seconds: 1.953 };
    const row = statusRow(job('a', { record: { ...shipped, usage } }), [KEY]);
    expect(row).toMatchObject({ record: 'verified', usage });
    expect(statusRow(job('b', { record: shipped }), [KEY]).record).toBe('verified');
  });
});

describe('jobharvest status: rows', () => {
  it('injected, sink, lines shipped / harvested / lost, the TTL held, released or left to the owner, the logs link', () => {
    const rows = [
      statusRow(job('done', { record: shipped, ttl: 60, logs: 'https://grafana.example/d/x?var-job=done' }), [KEY]),
      statusRow(job('held', { held: true, ttl: 86460 }), [KEY]),
      statusRow(job('released', { record: { ...shipped, harvested: 200 }, ttl: 60 }), [KEY]),
      statusRow(job('child', { record: shipped, status: status({ ttlSecondsAfterFinished: null, ttlLeftTo: 'JobSet/train' }) }), [KEY]),
      statusRow(job('running', { finished: false, ttl: 60 }), [KEY]),
      statusRow(job('plain', { status: null }), [KEY]),
    ];
    expect(rows.map((r) => [r.name, r.injected, r.sink, r.shipped, r.harvested, r.lost, r.record, r.ttl.state])).toEqual([
      ['done', '0.1.0', 'loki', 2000, 0, 0, 'verified', 'set'],
      ['held', '0.1.0', 'loki', undefined, undefined, undefined, 'none', 'held'],
      ['released', '0.1.0', 'loki', 2000, 200, 0, 'verified', 'released'],
      ['child', '0.1.0', 'loki', 2000, 0, 0, 'verified', 'owner'],
      ['running', '0.1.0', 'loki', undefined, undefined, undefined, 'none', 'set'],
      ['plain', undefined, undefined, undefined, undefined, undefined, 'none', 'none'],
    ]);
    expect(renderTable(rows, { allNamespaces: false, wide: false, controls: 'keep' })).toBe(
      [
        'NAME      INJECTED  SINK  SHIPPED  HARVESTED  LOST  RECORD    TTL                 LOGS',
        'done      0.1.0     loki  2000     0          0     verified  60s                 https://grafana.example/d/x?var-job=done',
        'held      0.1.0     loki  -        -          -     pending   held 86460s         -',
        'released  0.1.0     loki  2000     200        0     verified  released 60s        -',
        'child     0.1.0     loki  2000     0          0     verified  owner JobSet/train  -',
        'running   0.1.0     loki  -        -          -     -         60s                 -',
        'plain     no        -     -        -          -     -         <none>              -',
        '',
      ].join('\n'),
    );
  });

  it('-A adds the namespace; -o wide the Job status, unaccounted pods and the usage', () => {
    const usage = { pods: 1, cpu_request_millicores: 510, memory_request_bytes: 160 * 2 ** 20, run_seconds: 12.5, cpu_core_seconds: 6.375, memory_gib_seconds: 1.953 };
    const rows = [statusRow(job('a', { ns: 'team-b', record: { ...shipped, unaccounted: 1, usage } }), [KEY])];
    expect(renderTable(rows, { allNamespaces: true, wide: true, controls: 'keep' }).split('\n')).toEqual([
      'NAMESPACE  NAME  INJECTED  SINK  SHIPPED  HARVESTED  LOST  RECORD    TTL     STATUS    UNACCOUNTED  CPU   MEMORY  RUN    LOGS',
      'team-b     a     0.1.0     loki  2000     0          0     verified  <none>  complete  1            510m  160Mi   12.5s  -',
      '',
    ]);
  });

  it("a tenant's control characters are escaped on a terminal, in the table, in JSON and in YAML", () => {
    const evil = '\x1b]52;c;Zm9v\x07\u009b2J';
    const rows = [statusRow(job('a', { record: { ...shipped, sink: evil }, logs: `https://x/${evil}` }), undefined)];
    const table = renderTable(rows, { allNamespaces: false, wide: false, controls: 'escape' });
    expect(table).not.toMatch(RAW_CONTROLS);
    expect(table).toContain('\\x1b]52;c;Zm9v\\x07\\u009b2J');
    const json = renderJson(rows);
    expect(json).not.toMatch(RAW_CONTROLS);
    expect(JSON.parse(json).items[0].sink).toBe(evil);
    const yaml = renderYaml(rows);
    expect(yaml).not.toMatch(RAW_CONTROLS);
    expect(parseYaml(yaml).items[0].sink).toBe(evil);
    expect(parseYaml(yaml).items[0].logs).toBe(`https://x/${evil}`);
  });

  it('-o json and -o yaml give the same items, absent fields left out', () => {
    const rows = [statusRow(job('a', { record: shipped, ttl: 60 }), [KEY]), statusRow(job('b', { finished: false }), undefined)];
    const fromJson = JSON.parse(renderJson(rows));
    expect(fromJson.kind).toBe('List');
    expect(fromJson.items[0]).toMatchObject({ namespace: 'team-a', name: 'a', injected: '0.1.0', sink: 'loki', record: 'verified', shipped: 2000, harvested: 0, lost: 0, ttl: { state: 'set', seconds: 60 } });
    expect(fromJson.items[1]).not.toHaveProperty('shipped');
    expect(parseYaml(renderYaml(rows))).toEqual(fromJson);
  });

  it('exit code 1 when a listed Job lost lines, 0 otherwise', () => {
    expect(exitCodeOf([statusRow(job('a', { record: shipped }), [KEY])])).toBe(0);
    expect(exitCodeOf([statusRow(job('a', { record: shipped }), [KEY]), statusRow(job('b', { record: { ...shipped, lost: 3 } }), [KEY])])).toBe(1);
    expect(exitCodeOf([])).toBe(0);
  });

  it("cronjob/NAME: the Jobs its controller reference names, by uid when known, newest first", () => {
    const cron = { name: 'nightly', uid: 'cj-1' };
    const jobs = [
      job('nightly-100', { cron, created: '2026-01-01T01:00:00Z' }),
      job('nightly-300', { cron, created: '2026-01-01T03:00:00Z' }),
      job('nightly-200', { cron: { name: 'nightly', uid: 'cj-old' }, created: '2026-01-01T02:00:00Z' }),
      job('nightly-999', { created: '2026-01-01T04:00:00Z' }),
      job('other-1', { cron: { name: 'other', uid: 'cj-2' }, created: '2026-01-01T05:00:00Z' }),
    ];
    expect(cronJobRuns(jobs, cron).map((j) => j.metadata!.name)).toEqual(['nightly-300', 'nightly-100']);
    expect(cronJobRuns(jobs, { name: 'nightly' }).map((j) => j.metadata!.name)).toEqual(['nightly-300', 'nightly-200', 'nightly-100']);
  });
});

describe('jobharvest status: options', () => {
  it("kubectl's habits, checked before the cluster is touched", () => {
    expect(parseStatusOptions('job/x', { namespace: 'a' }).target).toEqual({ kind: 'job', name: 'x' });
    expect(parseStatusOptions('cronjob/nightly', {}).target).toEqual({ kind: 'cronjob', name: 'nightly' });
    expect(parseStatusOptions(undefined, { allNamespaces: true, selector: 'team=a', output: 'wide' })).toMatchObject({ target: { kind: 'jobs' }, allNamespaces: true, selector: 'team=a', output: 'wide', pageSize: 500 });
    expect(() => parseStatusOptions(undefined, { output: 'name' })).toThrow(/-o name: expected wide, json or yaml/);
    expect(() => parseStatusOptions('job/x', { allNamespaces: true })).toThrow(/-A/);
    expect(() => parseStatusOptions('job/x', { selector: 'a=b' })).toThrow(/-l/);
    expect(() => parseStatusOptions(undefined, { allNamespaces: true, namespace: 'a' })).toThrow(/-A and -n/);
  });
});

function sink(): { stream: Writable; text: () => string } {
  let buf = '';
  const stream = new Writable({ write: (c, _e, cb) => ((buf += String(c)), cb()) });
  return { stream, text: () => buf };
}

/** A fake API server's Job list, paged by limit and continue as the real one pages. */
function fakeApi(jobs: JobLike[], keys: typeof KEY[] | undefined): StatusApi & { calls: Array<{ limit: number; continue: string | undefined; namespace: string | undefined }> } {
  const calls: Array<{ limit: number; continue: string | undefined; namespace: string | undefined }> = [];
  return {
    namespace: 'team-a',
    calls,
    async listJobs({ namespace, limit, continue: cont }): Promise<JobPage> {
      calls.push({ limit, continue: cont, namespace });
      const all = jobs.filter((j) => namespace === undefined || j.metadata?.namespace === namespace);
      const from = cont ? Number(cont) : 0;
      const next = from + limit < all.length ? String(from + limit) : undefined;
      return { items: all.slice(from, from + limit), continue: next, resourceVersion: '42' };
    },
    readJob: async (ns, name) => jobs.find((j) => j.metadata?.namespace === ns && j.metadata?.name === name),
    cronJobUid: async () => undefined,
    signingKeys: async () => ({ keys, note: keys ? 'Secret jobharvest/jobharvest-signing' : 'Secret jobharvest/jobharvest-signing: forbidden' }),
    watchJobs: async () => undefined,
  };
}

describe('jobharvest status: listing', () => {
  it('lists in pages of --page-size, following the continue token, and says why records are unverified', async () => {
    const jobs = Array.from({ length: 7 }, (_, i) => job(`j${i}`, { record: { ...shipped, lost: i === 5 ? 2 : 0 } }));
    const api = fakeApi(jobs, undefined);
    const out = sink();
    const err = sink();
    const code = await runStatusWith(api, parseStatusOptions(undefined, { pageSize: '3', output: 'json' }), { out: out.stream, err: err.stream });
    expect(api.calls).toEqual([
      { limit: 3, continue: undefined, namespace: 'team-a' },
      { limit: 3, continue: '3', namespace: 'team-a' },
      { limit: 3, continue: '6', namespace: 'team-a' },
    ]);
    const items = JSON.parse(out.text()).items as Array<{ name: string; record: string }>;
    expect(items.map((r) => r.name)).toEqual(['j0', 'j1', 'j2', 'j3', 'j4', 'j5', 'j6']);
    expect(new Set(items.map((r) => r.record))).toEqual(new Set(['unverified']));
    expect(err.text()).toBe('records unverified: Secret jobharvest/jobharvest-signing: forbidden\n');
    expect(code).toBe(1);
  });

  it('-A asks for every namespace; with the key, records verify and the exit code is 0', async () => {
    const api = fakeApi([job('a', { record: shipped }), job('b', { ns: 'team-b', record: shipped })], [KEY]);
    const out = sink();
    const err = sink();
    const code = await runStatusWith(api, parseStatusOptions(undefined, { allNamespaces: true }), { out: out.stream, err: err.stream });
    expect(api.calls.map((c) => c.namespace)).toEqual([undefined]);
    expect(out.text().split('\n').slice(1, 3).map((l) => l.split(/\s+/).slice(0, 2).concat(l.split(/\s+/)[7]!))).toEqual([
      ['team-a', 'a', 'verified'],
      ['team-b', 'b', 'verified'],
    ]);
    expect(err.text()).toBe('');
    expect(code).toBe(0);
  });
});

describe('jobharvest status: the signing key', () => {
  const mwc = { items: [{ metadata: { name: 'jh', annotations: { 'meta.helm.sh/release-name': 'jh', 'meta.helm.sh/release-namespace': 'ops' } }, webhooks: [{ name: 'jobs.jobharvest.io', clientConfig: { service: { name: 'jh-jobharvest', namespace: 'ops' } } }] }] };
  const secret = { data: { key: Buffer.from('status-test-signing-key-0123456789').toString('base64') } };

  it("reads the release's <release>-signing Secret, found through its webhook configuration", async () => {
    const read: string[] = [];
    const r = await readSigningKeys(async () => mwc, async (name, ns) => (read.push(`${ns}/${name}`), secret), {});
    expect(read).toEqual(['ops/jh-jobharvest-signing']);
    expect(r.keys?.map(keyId)).toEqual([keyId(KEY)]);
    const named = await readSigningKeys(async () => mwc, async (name, ns) => (read.push(`${ns}/${name}`), secret), { signingSecret: 'vault-signing' });
    expect(read.at(-1)).toBe('ops/vault-signing');
    expect(named.keys).toHaveLength(1);
  });

  it('no key, and why, when the Secret, the webhook configurations or a release cannot be had', async () => {
    const forbidden = Object.assign(new Error('forbidden'), { code: 403 });
    expect(await readSigningKeys(async () => mwc, async () => Promise.reject(forbidden), {})).toEqual({ keys: undefined, note: 'Secret ops/jh-jobharvest-signing: forbidden' });
    expect(await readSigningKeys(async () => Promise.reject(forbidden), async () => secret, {})).toEqual({ keys: undefined, note: 'MutatingWebhookConfigurations: forbidden, so no release and no signing key' });
    expect((await readSigningKeys(async () => ({ items: [] }), async () => secret, {})).keys).toBeUndefined();
    expect(await readSigningKeys(async () => mwc, async () => ({ data: {} }), {})).toEqual({ keys: undefined, note: 'Secret ops/jh-jobharvest-signing has no "key"' });
  });
});

describe('jobharvest status --watch', () => {
  it('prints a row for each change after the list, lined up under it; a version the server no longer has (410) lists again and watches on', async () => {
    const ac = new AbortController();
    const api = fakeApi([job('a', { finished: false })], [KEY]);
    const watches: Array<string | undefined> = [];
    api.watchJobs = async ({ resourceVersion }, on) => {
      watches.push(resourceVersion);
      if (watches.length === 1) {
        on({ type: 'MODIFIED', job: { ...job('a', { record: shipped }), metadata: { ...job('a', { record: shipped }).metadata, resourceVersion: '43' } as never } });
        on({ type: 'BOOKMARK', resourceVersion: '50' });
        throw Object.assign(new Error('too old resource version'), { code: 410 });
      }
      on({ type: 'ADDED', job: job('b', { record: { ...shipped, lost: 1 } }) });
      ac.abort();
    };
    const out = sink();
    const code = await runStatusWith(api, parseStatusOptions(undefined, { watch: true }), { out: out.stream, err: sink().stream, signal: ac.signal });
    // Listed at 42, watched from 42; after the 410 listed again (42 in this fake) and watched from there.
    expect(watches).toEqual(['42', '42']);
    expect(out.text().split('\n')).toEqual([
      'NAME  INJECTED  SINK  SHIPPED  HARVESTED  LOST  RECORD  TTL     LOGS',
      'a     0.1.0     loki  -        -          -     -       <none>  -',
      'a     0.1.0     loki  2000     0          0     verified  <none>  -',
      'b     0.1.0     loki  2000     0          1     verified  <none>  -',
      '',
    ]);
    // The exit code is the first list's: a watch runs until it is stopped.
    expect(code).toBe(0);
  });
});
