// The harvester's list-watch against a fake API server over HTTP: it resumes
// a watch the server ends from the last resourceVersion (bookmarks too)
// without listing again, lists again only after a 410, backs off on failures,
// keeps a refused namespace (403) at debug for a grace period, and stops for good.
import { HttpMethod, KubeConfig, RequestContext, type V1Pod } from '@kubernetes/client-node';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { LIST_PAGE_LIMIT, ListWatch, REFUSED_GRACE_MS, sharedConnections, watchJobPods, type JobWatch } from '../kube.ts';
import type { LogLevel } from '../log.ts';
import { WatchStats } from '../metrics.ts';
import { namespaceGoing } from '../api-errors.ts';

type Answer = (res: ServerResponse, q: URLSearchParams) => void;

interface Fake {
  kc: KubeConfig;
  lists: URLSearchParams[];
  /** When each list arrived (ms, monotonic). */
  listAt: number[];
  watches: URLSearchParams[];
  /** What the next list and watch requests get, in order; the last one repeats. */
  listAnswers: Answer[];
  watchAnswers: Answer[];
  close(): Promise<void>;
}

const servers: Server[] = [];
const watchesToStop: JobWatch[] = [];
afterEach(async () => {
  for (const w of watchesToStop.splice(0)) w.stop();
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

async function fake(): Promise<Fake> {
  const f = { lists: [] as URLSearchParams[], listAt: [] as number[], watches: [] as URLSearchParams[], listAnswers: [] as Answer[], watchAnswers: [] as Answer[] };
  const next = (answers: Answer[]): Answer => (answers.length > 1 ? answers.shift()! : answers[0]!);
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const q = url.searchParams;
    if (q.get('watch') === 'true') {
      f.watches.push(q);
      next(f.watchAnswers)(res, q);
    } else {
      f.lists.push(q);
      f.listAt.push(performance.now());
      next(f.listAnswers)(res, q);
    }
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, skipTLSVerify: true }],
    users: [{ name: 'u', token: 't' }],
    contexts: [{ name: 'c', cluster: 'c', user: 'u' }],
    currentContext: 'c',
  });
  return { ...f, kc, close: async () => undefined };
}

const pod = (name: string, rv: string): V1Pod => ({ apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace: 'ns', uid: `${name}-uid`, resourceVersion: rv } });

const list = (rv: string, items: V1Pod[] = []): Answer => (res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ kind: 'PodList', apiVersion: 'v1', metadata: { resourceVersion: rv }, items }));

/** A watch stream: these events, then the server ends it (its timeout). */
const stream = (events: Array<{ type: string; object: unknown }>, endAfterMs = 1100): Answer => (res) => {
  res.writeHead(200, { 'content-type': 'application/json' });
  for (const e of events) res.write(JSON.stringify(e) + '\n');
  setTimeout(() => res.end(), endAfterMs);
};

const refuse = (code: number): Answer => (res) => res.writeHead(code, { 'content-type': 'application/json' }).end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', code, reason: code === 403 ? 'Forbidden' : 'NotFound' }));

const hang: Answer = (res) => res.writeHead(200, { 'content-type': 'application/json' });

async function until(what: string, f: () => boolean, ms = 8000): Promise<void> {
  const end = Date.now() + ms;
  while (!f()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function start(f: Fake, o: { retryMs?: number; now?: () => number } = {}) {
  const seen: string[] = [];
  const logs: Array<{ level: LogLevel; msg: string }> = [];
  const stats = new WatchStats();
  const abort = new AbortController();
  const w = watchJobPods(f.kc, 'ns', {
    log: (level, msg) => logs.push({ level, msg }),
    onPod: (p) => seen.push(`${p.metadata?.name}@${p.metadata?.resourceVersion}`),
    signal: abort.signal,
    retryMs: o.retryMs ?? 20,
    maxRetryMs: 200,
    stats,
    ...(o.now ? { now: o.now } : {}),
  });
  watchesToStop.push(w);
  return { w, seen, logs, stats, abort };
}

describe('listWatch', () => {
  it('resumes a watch the server ended from the last resourceVersion, a bookmark\'s included, without listing again', async () => {
    const f = await fake();
    f.listAnswers.push(list('10', [pod('a', '9')]));
    f.watchAnswers.push(
      stream([{ type: 'ADDED', object: pod('b', '11') }, { type: 'BOOKMARK', object: { kind: 'Pod', apiVersion: 'v1', metadata: { resourceVersion: '15' } } }]),
      stream([{ type: 'MODIFIED', object: pod('b', '16') }]),
      hang,
    );
    const { seen, logs, stats } = start(f);
    await until('the third watch', () => f.watches.length >= 3);
    expect(f.lists).toHaveLength(1);
    expect(f.watches.map((q) => q.get('resourceVersion'))).toEqual(['10', '15', '16']);
    expect(f.watches.every((q) => q.get('allowWatchBookmarks') === 'true' && Number(q.get('timeoutSeconds')) >= 300 && Number(q.get('timeoutSeconds')) < 600)).toBe(true);
    expect(seen).toEqual(['a@9', 'b@11', 'b@16']);
    expect(logs.filter((l) => l.level !== 'debug')).toEqual([]);
    expect(stats.lists.pods).toBe(1);
    expect(stats.watches.pods).toBe(3);
  });

  it('lists in pages of LIST_PAGE_LIMIT, following the continue token, and watches from the list\'s resourceVersion', async () => {
    const f = await fake();
    const page = (rv: string, items: V1Pod[], cont?: string): Answer => (res) =>
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ kind: 'PodList', apiVersion: 'v1', metadata: { resourceVersion: rv, ...(cont ? { continue: cont } : {}) }, items }));
    f.listAnswers.push(page('10', [pod('a', '8')], 'token-2'), page('10', [pod('b', '9')], 'token-3'), page('10', [pod('c', '7')]));
    f.watchAnswers.push(hang);
    const { seen } = start(f);
    await until('the watch', () => f.watches.length >= 1);
    expect(f.lists.map((q) => [q.get('limit'), q.get('continue')])).toEqual([
      [String(LIST_PAGE_LIMIT), null],
      [String(LIST_PAGE_LIMIT), 'token-2'],
      [String(LIST_PAGE_LIMIT), 'token-3'],
    ]);
    expect(seen).toEqual(['a@8', 'b@9', 'c@7']);
    expect(f.watches[0]?.get('resourceVersion')).toBe('10');
  });

  it('lists again after a 410 in the stream (the version was compacted away)', async () => {
    const f = await fake();
    f.listAnswers.push(list('10'), list('40'));
    f.watchAnswers.push(stream([{ type: 'ERROR', object: { kind: 'Status', code: 410, reason: 'Expired', message: 'too old resource version: 10 (30)' } }], 0), hang);
    const { logs } = start(f);
    await until('the second watch', () => f.watches.length >= 2);
    expect(f.lists).toHaveLength(2);
    expect(f.watches.map((q) => q.get('resourceVersion'))).toEqual(['10', '40']);
    expect(logs.filter((l) => l.level !== 'debug')).toEqual([]);
  });

  it('backs off on failures, doubling, and warns on those that are not a refusal', async () => {
    const f = await fake();
    f.listAnswers.push(refuse(500), refuse(500), refuse(500), list('1'));
    f.watchAnswers.push(hang);
    const { logs } = start(f, { retryMs: 50 });
    await until('the watch', () => f.watches.length >= 1);
    expect(f.lists).toHaveLength(4);
    // 50, 100, then 200 ms (the cap here), less a little for timer granularity.
    const gaps = f.listAt.slice(1).map((t, i) => t - f.listAt[i]!);
    expect(gaps[0]).toBeGreaterThanOrEqual(45);
    expect(gaps[1]).toBeGreaterThanOrEqual(95);
    expect(gaps[2]).toBeGreaterThanOrEqual(190);
    expect(logs.filter((l) => l.level === 'warn').map((l) => l.msg)).toEqual(Array(3).fill('pod (ns) list failed; retrying'));
  });

  it('a refused namespace (403) is debug through the grace period, then one warning, then debug again', async () => {
    const f = await fake();
    f.listAnswers.push(refuse(403));
    let clock = 0;
    const { logs } = start(f, { retryMs: 5, now: () => clock });
    await until('three refusals', () => f.lists.length >= 3);
    expect(logs.map((l) => l.level)).toEqual(logs.map(() => 'debug'));
    clock = REFUSED_GRACE_MS + 1;
    const before = f.lists.length;
    await until('more refusals', () => f.lists.length >= before + 3);
    expect(logs.filter((l) => l.level === 'warn')).toHaveLength(1);
  });

  it('stop() ends the watch in flight and any retry: no request afterwards', async () => {
    const f = await fake();
    f.listAnswers.push(list('1'));
    f.watchAnswers.push(hang);
    const { w } = start(f);
    await until('the watch', () => f.watches.length >= 1);
    w.stop();
    await new Promise((r) => setTimeout(r, 300));
    expect(f.lists).toHaveLength(1);
    expect(f.watches).toHaveLength(1);
  });

  it('as a Runnable, stays pending while it watches and returns once its signal is aborted, with no request afterwards', async () => {
    const f = await fake();
    f.watchAnswers.push(hang);
    const seen: string[] = [];
    const w = new ListWatch<V1Pod>(f.kc, 'pod (ns)', {
      list: async () => ({ items: [pod('a', '1')], metadata: { resourceVersion: '1' } }),
      path: '/api/v1/namespaces/ns/pods',
      query: {},
      onObject: (type, p) => seen.push(`${type} ${p.metadata?.name}`),
      log: () => {},
    });
    watchesToStop.push(w);
    const stop = new AbortController();
    let returned = false;
    const running = w.run(stop.signal).then(() => (returned = true));
    await until('the watch', () => f.watches.length >= 1);
    expect(seen).toEqual(['ADDED a']);
    await new Promise((r) => setTimeout(r, 50));
    expect(returned).toBe(false);
    stop.abort();
    await running;
    await new Promise((r) => setTimeout(r, 300));
    expect(f.watches).toHaveLength(1);
  });
});

describe('namespaceGoing', () => {
  it('reads the API server\'s answers for a namespace being deleted or gone', () => {
    // As kube-apiserver 1.37 answers an Event create in a terminating namespace, and in a deleted one.
    const terminating = { code: 403, body: JSON.stringify({ kind: 'Status', message: 'events "x." is forbidden: unable to create new content in namespace ci-1 because it is being terminated', reason: 'Forbidden', details: { name: 'x.', kind: 'events', causes: [{ reason: 'NamespaceTerminating', message: 'namespace ci-1 is being terminated', field: 'metadata.namespace' }] }, code: 403 }) };
    const gone = { code: 404, body: JSON.stringify({ kind: 'Status', message: 'namespaces "ci-1" not found', reason: 'NotFound', details: { name: 'ci-1', kind: 'namespaces' }, code: 404 }) };
    expect(namespaceGoing(terminating)).toBe(true);
    expect(namespaceGoing(gone)).toBe(true);
    expect(namespaceGoing({ ...terminating, body: JSON.parse(terminating.body) as unknown })).toBe(true);
    // Forbidden by RBAC, or some other thing not found: not the namespace going.
    expect(namespaceGoing({ code: 403, body: '{"kind":"Status","message":"events is forbidden: User \\"x\\" cannot create resource \\"events\\"","reason":"Forbidden","code":403}' })).toBe(false);
    expect(namespaceGoing({ code: 404, body: '{"kind":"Status","reason":"NotFound","details":{"name":"j","kind":"jobs"},"code":404}' })).toBe(false);
    expect(namespaceGoing(new Error('ECONNRESET'))).toBe(false);
  });
});

describe('sharedConnections', () => {
  const kcFor = (ca: string) => {
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: 'c', server: 'https://127.0.0.1:6443', caData: Buffer.from(ca).toString('base64') }],
      users: [{ name: 'u', token: 't' }],
      contexts: [{ name: 'c', cluster: 'c', user: 'u' }],
      currentContext: 'c',
    });
    return kc;
  };
  const dispatcherOf = async (kc: KubeConfig) => {
    const ctx = new RequestContext('https://127.0.0.1:6443/api', HttpMethod.GET);
    await kc.applySecurityAuthentication(ctx);
    return ctx.getDispatcher();
  };

  it('one connection pool for every request of a KubeConfig, where client-node makes one per request', async () => {
    const plain = kcFor('-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n');
    expect(await dispatcherOf(plain)).not.toBe(await dispatcherOf(plain));
    const shared = sharedConnections(kcFor('-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n'));
    const a = await dispatcherOf(shared);
    expect(a).toBeDefined();
    expect(await dispatcherOf(shared)).toBe(a);
  });

  it('another TLS setting (a rotated CA or client certificate) gets a pool of its own', async () => {
    const kc = sharedConnections(kcFor('one'));
    const a = await dispatcherOf(kc);
    kc.clusters[0] = { ...kc.clusters[0]!, caData: Buffer.from('two').toString('base64') };
    const b = await dispatcherOf(kc);
    expect(b).not.toBe(a);
    expect(await dispatcherOf(kc)).toBe(b);
  });
});
