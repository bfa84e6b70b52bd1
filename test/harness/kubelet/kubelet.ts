/**
 * A test kubelet: registers a Node, binds pending pods of chosen namespaces to
 * it (the scheduler's job), runs the pods bound to it as local processes and
 * reports their status, and serves container logs to the API server. See
 * README.md for what it does like the real kubelet and where it differs.
 */
import { CoreV1Api, KubeConfig, ListWatch, Watch, type V1Pod } from '@kubernetes/client-node';
import { randomBytes } from 'node:crypto';
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ClusterInfo } from '../cluster/harness.ts';
import { kubeletServingCert } from './certs.ts';
import { kubernetesServiceEnv, type EnvSources } from './env.ts';
import { defaultImages, type ImageTable } from './images.ts';
import { startLogServer, type LogTarget } from './log-server.ts';
import { registerNode } from './node.ts';
import { PodWorker, type KubeletEvent, type WorkerContext } from './pod-worker.ts';
import type { VolumeSources } from './volumes.ts';

export type { KubeletEvent } from './pod-worker.ts';

export interface KubeletOptions {
  cluster: Pick<ClusterInfo, 'server' | 'token' | 'caPem' | 'certsDir' | 'logsDir'>;
  /** The node's file system; defaults to a new temporary folder. */
  root?: string;
  nodeName?: string;
  /** Namespaces whose unscheduled pods this kubelet binds to itself: a list, a test, or 'all'. */
  namespaces: string[] | 'all' | ((namespace: string) => boolean);
  /** Rotate a container log at this size (the kubelet's containerLogMaxSize); small so that tests rotate. */
  logMaxSizeBytes?: number;
  /** Files kept per container log, live one included (containerLogMaxFiles). */
  logMaxFiles?: number;
  /** First restart back-off (CrashLoopBackOff doubles it up to maxRestartBackoffMs). */
  restartBackoffMs?: number;
  maxRestartBackoffMs?: number;
  images?: ImageTable;
  /** Keep the root folder after stop(). */
  keepRoot?: boolean;
  /** Progress and errors; defaults to a file in the cluster's log folder. */
  log?: (line: string) => void;
}

const HOST_IP = '127.0.0.1';

function kubeConfig(c: KubeletOptions['cluster']): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: c.server, caData: Buffer.from(c.caPem).toString('base64') }],
    users: [{ name: 'kubelet', token: c.token }],
    contexts: [{ name: 'c', cluster: 'c', user: 'kubelet' }],
    currentContext: 'c',
  });
  return kc;
}

const decode = (data: Record<string, string> | undefined) => Object.fromEntries(Object.entries(data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')]));

export interface LogRequest {
  t: number;
  namespace: string;
  pod: string;
  container: string;
  /** The query the API server passed on (follow, timestamps, sinceTime, ...). */
  query: Record<string, string>;
  status: number;
}

export class TestKubelet {
  readonly events: KubeletEvent[] = [];
  /** Every containerLogs request the API server made, for tests of api mode. */
  readonly logRequests: LogRequest[] = [];
  private readonly workers = new Map<string, PodWorker>();
  private readonly binding = new Set<string>();
  private readonly listeners = new Set<(e: KubeletEvent) => void>();
  private informer: ListWatch<V1Pod> | undefined;
  private logServer: Awaited<ReturnType<typeof startLogServer>> | undefined;
  private stopping = false;

  private constructor(
    readonly nodeName: string,
    readonly root: string,
    private readonly core: CoreV1Api,
    private readonly kc: KubeConfig,
    private readonly opts: KubeletOptions,
    readonly log: (line: string) => void,
  ) {}

  static async start(opts: KubeletOptions): Promise<TestKubelet> {
    const nodeName = opts.nodeName ?? `jh-node-${randomBytes(3).toString('hex')}`;
    const root = opts.root ?? mkdtempSync(join(tmpdir(), 'jh-kubelet-'));
    mkdirSync(join(root, 'var/log/pods'), { recursive: true });
    const logFile = join(opts.cluster.logsDir, `test-kubelet-${nodeName}.log`);
    const log = opts.log ?? ((line: string) => appendFileSync(logFile, `${new Date().toISOString()} ${line}\n`));
    const kc = kubeConfig(opts.cluster);
    const k = new TestKubelet(nodeName, root, kc.makeApiClient(CoreV1Api), kc, opts, log);
    await k.init();
    return k;
  }

  /** The pod's worker, by uid (kept after the pod is gone, for inspection). */
  worker(uid: string): PodWorker | undefined {
    return this.workers.get(uid);
  }

  allWorkers(): PodWorker[] {
    return [...this.workers.values()];
  }

  /** Calls `fn` for every event from now on; returns the unsubscribe function. */
  subscribe(fn: (e: KubeletEvent) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** Where the node keeps a pod's logs: <root>/var/log/pods/<ns>_<pod>_<uid>. */
  podLogDir(namespace: string, pod: string, uid: string): string {
    return join(this.root, 'var/log/pods', `${namespace}_${pod}_${uid}`);
  }

  get logPort(): number {
    return this.logServer?.port ?? 0;
  }

  private async init(): Promise<void> {
    const certs = await kubeletServingCert(this.opts.cluster.certsDir, this.nodeName, HOST_IP);
    this.logServer = await startLogServer({
      key: certs.key,
      cert: certs.cert,
      clientCa: readFileSync(join(this.opts.cluster.certsDir, 'ca.crt'), 'utf8'),
      resolve: (ns, pod, container, previous, query) => {
        const target = this.resolveLog(ns, pod, container, previous);
        const status = 'status' in target ? target.status : 200;
        this.logRequests.push({ t: Date.now(), namespace: ns, pod, container, query: Object.fromEntries(query), status });
        this.log(`${ns}/${pod} containerLogs ${container}?${query.toString()} -> ${status}`);
        return target;
      },
    });
    await registerNode(this.core, this.nodeName, HOST_IP, this.logServer.port);
    this.log(`node ${this.nodeName} registered; root ${this.root}; container logs on https://${HOST_IP}:${this.logServer.port}`);

    const api = new URL(this.opts.cluster.server);
    const serviceEnv = kubernetesServiceEnv(api.hostname, Number(api.port || 443));
    const sources: EnvSources & VolumeSources = {
      nodeName: this.nodeName,
      hostIP: HOST_IP,
      podIP: HOST_IP,
      serviceEnv,
      secret: async (namespace, name) => {
        try {
          return decode((await this.core.readNamespacedSecret({ namespace, name })).data);
        } catch (err) {
          if ((err as { code?: number }).code === 404) return undefined;
          throw err;
        }
      },
      configMap: async (namespace, name) => {
        try {
          return { ...((await this.core.readNamespacedConfigMap({ namespace, name })).data ?? {}) };
        } catch (err) {
          if ((err as { code?: number }).code === 404) return undefined;
          throw err;
        }
      },
      serviceAccountToken: async (pod, audience, expirationSeconds) => {
        const tr = await this.core.createNamespacedServiceAccountToken({
          name: pod.spec?.serviceAccountName ?? 'default',
          namespace: pod.metadata!.namespace!,
          body: {
            spec: {
              audiences: audience ? [audience] : [],
              expirationSeconds,
              boundObjectRef: { apiVersion: 'v1', kind: 'Pod', name: pod.metadata!.name!, uid: pod.metadata!.uid! },
            },
          },
        });
        if (!tr.status?.token) throw new Error(`TokenRequest for ${pod.metadata!.name} returned no token`);
        return tr.status.token;
      },
    };
    const ctx: WorkerContext = {
      core: this.core,
      root: this.root,
      nodeName: this.nodeName,
      hostIP: HOST_IP,
      sources,
      images: this.opts.images ?? defaultImages(),
      logMaxSizeBytes: this.opts.logMaxSizeBytes ?? 1024 * 1024,
      logMaxFiles: this.opts.logMaxFiles ?? 5,
      restartBackoffMs: this.opts.restartBackoffMs ?? 1000,
      maxRestartBackoffMs: this.opts.maxRestartBackoffMs ?? 10_000,
      emit: (e) => {
        this.events.push(e);
        this.log(`${e.namespace}/${e.pod} ${JSON.stringify({ ...e, t: undefined, uid: undefined, pod: undefined, namespace: undefined })}`);
        for (const fn of this.listeners) fn(e);
      },
      log: this.log,
    };

    const informer = new ListWatch<V1Pod>('/api/v1/pods', new Watch(this.kc), () => this.core.listPodForAllNamespaces(), false);
    informer.on('add', (p) => this.onPod(p, ctx));
    informer.on('update', (p) => this.onPod(p, ctx));
    informer.on('delete', (p) => this.onDelete(p));
    informer.on('error', (err) => this.log(`pod watch error (it reconnects): ${String(err)}`));
    this.informer = informer;
    await informer.start();
  }

  private wantsToBind(p: V1Pod): boolean {
    const ns = this.opts.namespaces;
    const scheduler = p.spec?.schedulerName ?? 'default-scheduler';
    const name = p.metadata?.namespace ?? '';
    const wanted = ns === 'all' || (typeof ns === 'function' ? ns(name) : ns.includes(name));
    // A scheduler leaves a pod with scheduling gates alone (the API server refuses to bind it); it is bound once the last gate is removed.
    const gated = (p.spec?.schedulingGates ?? []).length > 0;
    return scheduler === 'default-scheduler' && wanted && !gated;
  }

  private onPod(p: V1Pod, ctx: WorkerContext): void {
    if (this.stopping) return;
    const uid = p.metadata?.uid ?? '';
    const nodeName = p.spec?.nodeName;
    if (!nodeName) {
      if (!p.metadata?.deletionTimestamp && this.wantsToBind(p)) void this.bind(p);
      return;
    }
    if (nodeName !== this.nodeName) return;
    const existing = this.workers.get(uid);
    if (existing) {
      existing.update(p);
      return;
    }
    // A pod that already finished (seen again after a re-list) stays finished.
    if (p.status?.phase === 'Succeeded' || p.status?.phase === 'Failed') return;
    this.log(`${p.metadata?.namespace}/${p.metadata?.name} starting pod ${uid}`);
    const w = new PodWorker(p, ctx);
    this.workers.set(uid, w);
    w.update(p);
  }

  private async bind(p: V1Pod): Promise<void> {
    const uid = p.metadata!.uid!;
    if (this.binding.has(uid)) return;
    this.binding.add(uid);
    const name = p.metadata!.name!;
    const namespace = p.metadata!.namespace!;
    try {
      await this.core.createNamespacedPodBinding({
        name,
        namespace,
        body: { metadata: { name, uid }, target: { apiVersion: 'v1', kind: 'Node', name: this.nodeName } },
      });
      this.log(`${namespace}/${name} bound to ${this.nodeName}`);
    } catch (err) {
      // Bound meanwhile, or deleted: either way nothing to do.
      this.log(`${namespace}/${name} binding failed: ${(err as { code?: number }).code ?? ''} ${(err as Error).message?.slice(0, 200)}`);
    }
  }

  private onDelete(p: V1Pod): void {
    const uid = p.metadata?.uid ?? '';
    this.binding.delete(uid);
    const w = this.workers.get(uid);
    if (!w) return;
    w.removed();
    void this.cleanup(w);
  }

  /** Once the pod is gone from the API server and its containers are dead, its logs and volumes go too. */
  private async cleanup(w: PodWorker): Promise<void> {
    await w.done;
    w.logs.close();
    rmSync(w.podDir, { recursive: true, force: true });
    rmSync(w.volumesDir, { recursive: true, force: true });
    const e: KubeletEvent = { t: Date.now(), uid: w.uid, pod: w.name, namespace: w.namespace, type: 'removed' };
    this.events.push(e);
    this.log(`${w.namespace}/${w.name} removed (logs and volumes deleted)`);
    for (const fn of this.listeners) fn(e);
  }

  private resolveLog(ns: string, pod: string, container: string, previous: boolean): LogTarget | { status: number; message: string } {
    const w = [...this.workers.values()].reverse().find((x) => x.namespace === ns && x.name === pod);
    if (!w) return { status: 404, message: `pod ${ns}/${pod} not found on node ${this.nodeName}` };
    const rec = w.records.get(container);
    if (!rec) return { status: 404, message: `container ${container} is not valid for pod ${pod}` };
    const restart = previous ? rec.restartCount - 1 : rec.restartCount;
    if (restart < 0 || (previous && rec.history.length < rec.restartCount)) {
      return { status: 400, message: `previous terminated container "${container}" in pod "${pod}" not found` };
    }
    const path = join(w.podDir, container, `${restart}.log`);
    if (!existsSync(path)) return { status: 400, message: `container "${container}" in pod "${pod}" is waiting to start` };
    return { path, finished: () => !(rec.restartCount === restart && w.isRunning(container)) };
  }

  /** Resolves with the first event matching `pred` (past events included). */
  waitForEvent(pred: (e: KubeletEvent) => boolean, timeoutMs = 60_000): Promise<KubeletEvent> {
    const seen = this.events.find(pred);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => (off(), reject(new Error(`no matching kubelet event within ${timeoutMs} ms`))), timeoutMs);
      const off = this.subscribe((e) => {
        if (pred(e)) {
          clearTimeout(timer);
          off();
          resolve(e);
        }
      });
    });
  }

  /** Kills every pod at once (no grace), stops serving, deregisters the Node. */
  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    await this.informer?.stop();
    for (const w of this.workers.values()) w.removed(0);
    await Promise.all([...this.workers.values()].map((w) => w.done));
    for (const w of this.workers.values()) w.logs.close();
    await this.logServer?.close();
    await this.core.deleteNode({ name: this.nodeName }).catch(() => undefined);
    if (!this.opts.keepRoot) rmSync(this.root, { recursive: true, force: true });
  }
}

