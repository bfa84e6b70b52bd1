// A fake Kubernetes API for the api-mode unit tests (the sidecar's and the harvester's): one Pod, its watch, and
// pods/log with the kubelet's rules (which run `previous` means, sinceTime,
// follow until the run terminates, timestamps in RFC3339Nano). Real TLS with
// a CA the client must trust, and bearer tokens it must present.
import https from 'node:https';
import type { ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { generateBundle } from '../../src/tls/generate.ts';
import type { ContainerStatus, Pod } from '../../sidecar/sources/api/pod.ts';
import { tmpDir } from './sidecar-helpers.ts';

export interface LogLine {
  readonly ts: string;
  readonly msg: string;
}

export interface LogRequest {
  readonly container: string;
  readonly follow: boolean;
  readonly previous: boolean;
  readonly sinceTime?: string;
  /** The run the fake served, or -1 when it refused. */
  run: number;
  readonly token: string;
}

/** What a log request may be made to do: cut after some lines, or answer with an error. */
export interface LogBehaviour {
  /** Break the connection after this many lines. */
  cutAfterLines?: number;
  /** End the response cleanly after this many lines, though the run goes on. */
  endAfterLines?: number;
  status?: number;
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] extends object ? Mutable<T[K]> : T[K] };

interface Follower {
  readonly container: string;
  readonly run: number;
  readonly res: ServerResponse;
  /** Index of the next log line to send. */
  next: number;
  written: number;
  readonly cutAfter: number;
  readonly endAfter: number;
  cut: boolean;
}

const tsMs = (ts: string): number => Date.parse(ts);

export class FakeKube {
  readonly namespace = 'team-a';
  readonly name = 'job-abc-xyz';
  readonly uid = 'uid-1';
  pod: Mutable<Pod> & { metadata: { uid: string; resourceVersion: string; name: string; namespace: string } };
  readonly logs = new Map<string, LogLine[]>();
  readonly logRequests: LogRequest[] = [];
  readonly tokensSeen: string[] = [];
  /** Tokens the server accepts; anything else is 401. */
  validTokens = new Set<string>(['token-1']);
  onLog: (q: LogRequest) => LogBehaviour | void = () => {};
  watchRequests = 0;
  podGets = 0;
  private rv = 1;
  private readonly watchers = new Set<ServerResponse>();
  private readonly followers = new Set<Follower>();
  /** Per run: the index of the first line of the current log file. */
  private readonly rotatedAt = new Map<string, number>();
  private server!: https.Server;
  url = '';
  tokenDir = '';

  constructor(containers: { init?: string[]; main: string[]; self?: string }) {
    const self = containers.self ?? 'jobharvest';
    this.pod = {
      metadata: { name: this.name, namespace: this.namespace, uid: this.uid, resourceVersion: '1' },
      spec: {
        initContainers: [{ name: self }, ...(containers.init ?? []).map((name) => ({ name }))],
        containers: containers.main.map((name) => ({ name })),
      },
      status: {
        initContainerStatuses: [{ name: self, restartCount: 0, state: { running: {} } }, ...(containers.init ?? []).map((name) => waiting(name))],
        containerStatuses: containers.main.map((name) => waiting(name)),
      },
    };
  }

  async start(): Promise<this> {
    const bundle = await generateBundle({ dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] });
    this.tokenDir = await tmpDir('jh-kube-token-');
    await writeFile(path.join(this.tokenDir, 'ca.crt'), bundle.ca.cert);
    await writeFile(path.join(this.tokenDir, 'token'), 'token-1\n');
    this.server = https.createServer({ cert: bundle.serving.cert, key: bundle.serving.key }, (req, res) => this.handle(req.url ?? '/', req.headers.authorization ?? '', res));
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `https://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async stop(): Promise<void> {
    for (const w of this.watchers) w.destroy();
    for (const f of this.followers) f.res.destroy();
    this.server.closeAllConnections();
    await new Promise((r) => this.server.close(r));
  }

  async rotateToken(token: string, keepOld = false): Promise<void> {
    if (!keepOld) this.validTokens.clear();
    this.validTokens.add(token);
    await writeFile(path.join(this.tokenDir, 'token'), token + '\n');
  }

  status(name: string): Mutable<ContainerStatus> {
    const s = this.pod.status!;
    const all = [...(s.initContainerStatuses ?? []), ...(s.containerStatuses ?? [])] as Array<Mutable<ContainerStatus>>;
    const found = all.find((c) => c.name === name);
    if (!found) throw new Error(`no container ${name}`);
    return found;
  }

  /** Starts run `restart` of a container (restartCount = restart, running; the run before becomes lastState). */
  run(name: string, restart: number): void {
    const st = this.status(name);
    if (restart > 0) st.lastState = { terminated: { exitCode: 1, containerID: `id-${name}-${restart - 1}` } };
    st.restartCount = restart;
    st.state = { running: {} };
    this.logs.set(`${name}/${restart}`, this.logs.get(`${name}/${restart}`) ?? []);
    this.changed();
  }

  terminate(name: string, exitCode = 0): void {
    const st = this.status(name);
    st.state = { terminated: { exitCode, containerID: `id-${name}-${st.restartCount ?? 0}` } };
    this.changed();
    // The kubelet stops following a run once it is no longer running.
    for (const f of [...this.followers]) {
      if (f.container === name && f.run === (st.restartCount ?? 0)) {
        this.followers.delete(f);
        f.res.end();
      }
    }
  }

  append(name: string, restart: number, lines: readonly LogLine[]): void {
    const key = `${name}/${restart}`;
    const log = this.logs.get(key) ?? [];
    this.logs.set(key, log);
    log.push(...lines);
    for (const f of [...this.followers]) if (f.container === name && f.run === restart) this.pump(f, log);
  }

  /**
   * The kubelet rotates the run's log file: from now on a new request is
   * served only the lines appended after this (pods/log reads the current
   * file only). A stream already open goes on, as the kubelet's follow reads
   * the renamed file to its end and then the new one.
   */
  rotate(name: string, restart: number): void {
    this.rotatedAt.set(`${name}/${restart}`, this.logs.get(`${name}/${restart}`)?.length ?? 0);
  }

  /** Ends every watch (as a server's timeout would). */
  endWatches(): void {
    for (const w of this.watchers) w.end();
    this.watchers.clear();
  }

  /** Cuts every open log stream (network failure). */
  cutStreams(): void {
    for (const f of this.followers) f.res.destroy();
    this.followers.clear();
  }

  get openStreams(): number {
    return this.followers.size;
  }

  private changed(): void {
    this.pod.metadata.resourceVersion = String(++this.rv);
    const line = JSON.stringify({ type: 'MODIFIED', object: this.pod }) + '\n';
    for (const w of this.watchers) w.write(line);
  }

  private handle(url: string, auth: string, res: ServerResponse): void {
    const token = auth.replace(/^Bearer /, '');
    this.tokensSeen.push(token);
    if (!this.validTokens.has(token)) {
      res.writeHead(401, { 'content-type': 'application/json' }).end(JSON.stringify({ kind: 'Status', code: 401, message: 'Unauthorized' }));
      return;
    }
    const u = new URL(url, 'https://x');
    const base = `/api/v1/namespaces/${this.namespace}/pods`;
    if (u.pathname === base && u.searchParams.get('watch') === 'true') {
      this.watchRequests++;
      if (u.searchParams.get('fieldSelector') !== `metadata.name=${this.name}`) return void res.writeHead(400).end();
      res.writeHead(200, { 'content-type': 'application/json' });
      res.flushHeaders();
      // Changes after the version the client asked from are replayed, as the API server does.
      if (Number(u.searchParams.get('resourceVersion') ?? '0') < this.rv) res.write(JSON.stringify({ type: 'MODIFIED', object: this.pod }) + '\n');
      this.watchers.add(res);
      res.on('close', () => this.watchers.delete(res));
      return;
    }
    if (u.pathname === `${base}/${this.name}`) {
      this.podGets++;
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(this.pod));
      return;
    }
    if (u.pathname === `${base}/${this.name}/log`) return this.serveLog(u.searchParams, token, res);
    res.writeHead(404).end(JSON.stringify({ kind: 'Status', code: 404, message: 'not found' }));
  }

  private serveLog(p: URLSearchParams, token: string, res: ServerResponse): void {
    const q: LogRequest = {
      container: p.get('container') ?? '',
      follow: p.get('follow') === 'true',
      previous: p.get('previous') === 'true',
      sinceTime: p.get('sinceTime') ?? undefined,
      run: -1,
      token,
    };
    this.logRequests.push(q);
    if (p.get('timestamps') !== 'true') return void res.writeHead(400).end('timestamps expected');
    const behaviour = this.onLog(q) ?? {};
    if (behaviour.status) return void res.writeHead(behaviour.status).end(JSON.stringify({ kind: 'Status', code: behaviour.status, message: 'injected' }));
    let st: Mutable<ContainerStatus>;
    try {
      st = this.status(q.container);
    } catch {
      return void res.writeHead(400).end(JSON.stringify({ kind: 'Status', code: 400, message: `container ${q.container} is not valid` }));
    }
    const latest = st.restartCount ?? 0;
    const state = st.state ?? {};
    const last = st.lastState ?? {};
    let run: number;
    // validateContainerLogStatus, as the kubelet does it.
    if (q.previous) {
      if (!last.terminated) return void res.writeHead(400).end(JSON.stringify({ kind: 'Status', code: 400, message: 'previous terminated container not found' }));
      run = state.waiting ? latest : latest - 1;
    } else if (state.running || state.terminated) run = latest;
    else if (last.terminated) run = latest;
    else return void res.writeHead(400).end(JSON.stringify({ kind: 'Status', code: 400, message: 'container is waiting to start' }));
    q.run = run;
    const log = this.logs.get(`${q.container}/${run}`) ?? [];
    const since = q.sinceTime ? tsMs(q.sinceTime) : -Infinity;
    let from = this.rotatedAt.get(`${q.container}/${run}`) ?? 0;
    while (from < log.length && tsMs(log[from]!.ts) < since) from++;
    res.writeHead(200, { 'content-type': 'text/plain' });
    const f: Follower = { container: q.container, run, res, next: from, written: 0, cutAfter: behaviour.cutAfterLines ?? Infinity, endAfter: behaviour.endAfterLines ?? Infinity, cut: false };
    const following = q.follow && run === latest && Boolean(state.running);
    if (following) {
      this.followers.add(f);
      res.on('close', () => this.followers.delete(f));
    }
    this.pump(f, log);
    if (!following && !f.cut) res.end();
  }

  private pump(f: Follower, log: readonly LogLine[]): void {
    let text = '';
    while (f.next < log.length && f.written < f.cutAfter && f.written < f.endAfter) {
      const l = log[f.next++]!;
      text += `${l.ts} ${l.msg}\n`;
      f.written++;
    }
    if (text) f.res.write(text);
    if (f.written >= f.cutAfter && !f.cut) {
      f.cut = true;
      this.followers.delete(f);
      // Let the written bytes go out, then break the connection mid-stream.
      setTimeout(() => f.res.destroy(), 20);
    } else if (f.written >= f.endAfter && !f.cut) {
      f.cut = true;
      this.followers.delete(f);
      f.res.end();
    }
  }

  /** Ends the followed streams of a container cleanly while its status stays as it is. */
  endFollowers(name: string): void {
    for (const f of [...this.followers]) {
      if (f.container !== name) continue;
      this.followers.delete(f);
      f.res.end();
    }
  }
}

function waiting(name: string): ContainerStatus {
  return { name, restartCount: 0, state: { waiting: { reason: 'PodInitializing' } } };
}
