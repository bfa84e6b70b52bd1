// api mode: the source stage that reads the pod's container logs through the
// Kubernetes API (pods/log, follow + timestamps) instead of the node's files.
// It watches its own Pod to learn the containers and their restarts, runs one
// RunReader per container run, and hands records to the same batcher,
// delivery and checkpoint as node mode. Loaded only when JOBHARVEST_MODE=api.
import type { CheckpointEntry } from '../../delivery/checkpoint.ts';
import { log, redactUrl } from '../../log.ts';
import type { LogSource, SourceOptions } from '../source.ts';
import { fileKey, type FileMeta, type LogRecord } from '../../records/record.ts';
import { KubeClient, type KubeClientOptions } from './kube-client.ts';
import { containerStatuses, latestStartedRun, runView, type ContainerStatus, type Pod, type RunView } from './pod.ts';
import { PodWatch } from './pod-watch.ts';
import { newStats } from '../../stats.ts';
import { API_FINGERPRINT, RunReader, type RunHost } from './run-reader.ts';

export interface ApiSourceOptions extends SourceOptions {
  /** Tests shorten the token re-read interval. */
  readonly client?: Partial<Pick<KubeClientOptions, 'tokenRefreshMs' | 'requestTimeoutMs'>>;
}

/**
 * Lines past the checkpoint's positions, read through pods/log and counted,
 * not shipped: how many lines a finished pod's sidecar left unsent. The pod
 * must be done, so every run has an end. Its own stats, so a pipeline's are untouched.
 */
export async function countMissing(opts: Omit<ApiSourceOptions, 'emit' | 'onProgress' | 'stats'> & { readonly signal?: AbortSignal }): Promise<number> {
  let n = 0;
  const source = new ApiSource({
    ...opts,
    checkpoint: new Map(opts.checkpoint),
    stats: newStats(),
    emit: async (records) => {
      n += records.length;
    },
    onProgress: () => {},
  });
  const abort = (): void => void source.shutdown();
  opts.signal?.addEventListener('abort', abort, { once: true });
  try {
    await source.start();
    await source.flush();
  } finally {
    opts.signal?.removeEventListener('abort', abort);
    await source.close();
  }
  if (opts.signal?.aborted) throw new Error('counting was aborted');
  return n;
}

export class ApiSource implements LogSource, RunHost {
  client!: KubeClient;
  final = false;
  podGone = false;
  private readonly abort = new AbortController();
  private readonly readers = new Map<string, RunReader>();
  /** Runs settled before (checkpoint) or reported lost: not looked at again. */
  private readonly settled = new Set<string>();
  private statuses = new Map<string, ContainerStatus>();
  private watch!: PodWatch;
  private refreshing: Promise<void> | undefined;
  private updateWaiters: Array<() => void> = [];
  private foreignWarned = false;

  constructor(private readonly opts: ApiSourceOptions) {}

  get config() {
    return this.opts.config;
  }
  get stats() {
    return this.opts.stats;
  }
  get signal(): AbortSignal {
    return this.abort.signal;
  }

  get openFiles(): number {
    let n = 0;
    for (const r of this.readers.values()) if (!r.finished) n++;
    return n;
  }

  get describe(): Record<string, unknown> {
    return { mode: 'api', api: redactUrl(this.config.kube!.apiUrl) };
  }

  async start(): Promise<void> {
    const kube = this.config.kube!;
    this.client = await KubeClient.create({ ...kube, requestTimeoutMs: this.config.requestTimeoutMs, ...this.opts.client });
    const id = this.config.identity;
    this.watch = new PodWatch(this.client, id.namespace, id.pod, this.abort.signal, {
      onPod: (pod) => this.reconcile(pod),
      onGone: () => this.gone(),
    });
    this.watch.start();
  }

  view(container: string, restart: number): RunView {
    return runView(this.statuses.get(container), restart);
  }

  refresh(): Promise<void> {
    this.refreshing ??= this.watch
      .get()
      .then(() => undefined)
      .finally(() => {
        this.refreshing = undefined;
      });
    return this.refreshing;
  }

  podUpdate(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      const waiter = (): void => done();
      this.updateWaiters.push(waiter);
      function done(): void {
        clearTimeout(timer);
        resolve();
      }
    });
  }

  emit(records: LogRecord[]): Promise<void> {
    return this.opts.emit(records);
  }

  onProgress(): void {
    this.opts.onProgress();
  }

  endFile(file: FileMeta): Promise<void> {
    return this.opts.endFile?.(file) ?? Promise.resolve();
  }

  /** SIGTERM: learn the latest statuses, then read every run that has started to its end. */
  async flush(): Promise<void> {
    this.final = true;
    try {
      await this.refresh();
    } catch (err) {
      log.warn('could not read the pod at drain; finishing the runs already known', { error: err });
    }
    for (;;) {
      const open = [...this.readers.values()].filter((r) => !r.finished);
      // Stopped at the drain deadline: the readers returned without finishing.
      if (open.length === 0 || this.abort.signal.aborted) break;
      await Promise.all(open.map((r) => r.done));
    }
    this.abort.abort();
    await this.watch.stopped();
  }

  async shutdown(): Promise<void> {
    this.abort.abort();
    await Promise.all([...this.readers.values()].map((r) => r.done));
    await this.watch?.stopped();
  }

  async close(): Promise<void> {
    this.abort.abort();
    this.client?.close();
  }

  entries(): Map<string, CheckpointEntry> {
    const out = new Map(this.opts.checkpoint);
    for (const [key, r] of this.readers) out.set(key, r.entry());
    return out;
  }

  async unreadBytes(): Promise<number> {
    return 0;
  }

  private gone(): void {
    if (this.podGone) return;
    this.podGone = true;
    log.warn('the pod is gone from the API; its logs cannot be read any more');
    this.wake();
  }

  private wake(): void {
    const w = this.updateWaiters;
    this.updateWaiters = [];
    for (const f of w) f();
  }

  private reconcile(pod: Pod): void {
    const uid = pod.metadata?.uid;
    if (uid !== undefined && uid !== this.config.identity.podUid) {
      if (!this.foreignWarned) log.warn('the API returned another pod with this name; ignoring it', { uid });
      this.foreignWarned = true;
      return;
    }
    const statuses = containerStatuses(pod, this.config.selfContainer);
    this.statuses = new Map(statuses.map((s) => [s.name, s]));
    for (const st of statuses) {
      const latest = latestStartedRun(st);
      for (let restart = 0; restart <= latest; restart++) this.consider(st, restart);
    }
    this.wake();
  }

  private consider(status: ContainerStatus, restart: number): void {
    const key = fileKey(status.name, restart, API_FINGERPRINT);
    if (this.readers.has(key) || this.settled.has(key)) return;
    const entry = this.opts.checkpoint.get(key);
    if (entry?.done) {
      this.settled.add(key);
      return;
    }
    const view = runView(status, restart);
    if (view.reach === 'pending') return;
    if (view.reach === 'gone') {
      // Started and ended while the sidecar was not reading, and the API keeps only the last two runs.
      this.settled.add(key);
      log.warn('container run ended before the sidecar could read it, and the API no longer serves it; its lines are lost', {
        container: status.name,
        restart,
        linesRead: entry?.offset ?? 0,
      });
      return;
    }
    if (this.abort.signal.aborted) return;
    this.opts.checkpoint.delete(key);
    this.readers.set(key, new RunReader(this, status.name, restart, entry));
  }
}
