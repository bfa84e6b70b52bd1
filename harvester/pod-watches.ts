// Which namespaces' Job pods the leader watches: exactly those holding an
// injected Job it still cares about and whose injection signature verifies.
// The `jobharvest.io/injected=true` label the Job watch selects on is only a
// filter (anyone can set it), so a Job is verified once, when first seen, and
// the result (its signed sidecar digest) is the cache harvester/pod-reports.ts
// asks before it keeps any pod: a Job's template cannot change after creation. The pod watch exists for the sidecar
// reports of pods that go before their Job is recorded (harvester/pod-reports.ts),
// so a namespace is watched from its first such Job until its last one is
// recorded or deleted, and no longer: a namespace that is deleted loses its
// Jobs (the Job watch says so, or its next list no longer has them) and with
// them its watch. On a cluster that makes a namespace per CI run, the
// harvester's connections, list calls and memory follow the namespaces with
// live Jobs, not every namespace there ever was.
//
// Pure bookkeeping: the leader's term (harvester/term.ts) feeds it the Job
// watch and opens the watches it asks for (harvester/kube.ts).
import type { V1Job } from '@kubernetes/client-node';
import type { Log } from './log.ts';
import { untilAborted, type Runnable } from './runnable.ts';

export interface PodWatchesOptions {
  /** Opens the pod watch of one namespace. */
  open(namespace: string): { stop(): void };
  /** Whether a Job still needs its namespace watched: not being deleted, and no delivery record yet. */
  cares(job: V1Job): boolean;
  /** The signed sidecar digest when the Job's injection signature verifies (harvester/trust.ts), else undefined. */
  verify(job: V1Job): string | undefined;
  /** A Job that is gone (deleted, or no longer listed): what was kept for it can go. */
  forget?(jobUid: string): void;
  log?: Log;
}

interface Watched {
  /** The uids of the verified Jobs the namespace is watched for → their signed sidecar digest. */
  readonly jobs: Map<string, string>;
  readonly watch: { stop(): void };
}

export class PodWatches implements Runnable {
  private readonly namespaces = new Map<string, Watched>();
  private closed = false;

  constructor(private readonly o: PodWatchesOptions) {}

  /** A Job from the watch, added or changed (or listed). */
  observe(job: V1Job): void {
    const id = idOf(job);
    if (!id) return;
    if (this.o.cares(job)) {
      if (this.namespaces.get(id.namespace)?.jobs.has(id.uid)) return;
      const digest = this.o.verify(job);
      if (digest !== undefined) this.retain(id.namespace, id.uid, digest);
    } else this.release(id.namespace, id.uid, 'recorded');
  }

  /** A Job deleted. */
  deleted(job: V1Job): void {
    const id = idOf(job);
    if (!id) return;
    this.release(id.namespace, id.uid, 'deleted');
    this.o.forget?.(id.uid);
  }

  /**
   * The uids of the Jobs a fresh list returned (every page of it): every Job
   * kept for that is not among them was deleted while the watch was down.
   */
  resync(present: ReadonlySet<string>): void {
    for (const [namespace, w] of [...this.namespaces]) {
      for (const uid of [...w.jobs.keys()]) {
        if (present.has(uid)) continue;
        this.release(namespace, uid, 'gone');
        this.o.forget?.(uid);
      }
    }
  }

  /** Keeps the watches it opens until the signal is aborted, then stops them all. */
  async run(signal: AbortSignal): Promise<void> {
    await untilAborted(signal);
    this.stop();
  }

  /** Stops every watch (leadership lost); nothing is opened afterwards. */
  stop(): void {
    this.closed = true;
    for (const w of this.namespaces.values()) w.watch.stop();
    this.namespaces.clear();
  }

  /** Namespaces watched. */
  get size(): number {
    return this.namespaces.size;
  }

  /** Jobs the namespaces are watched for. */
  get jobs(): number {
    let n = 0;
    for (const w of this.namespaces.values()) n += w.jobs.size;
    return n;
  }

  has(namespace: string): boolean {
    return this.namespaces.has(namespace);
  }

  /** The signed sidecar digest of a verified Job watched for in this namespace; undefined for any other. */
  trusted(namespace: string, jobUid: string): string | undefined {
    return this.namespaces.get(namespace)?.jobs.get(jobUid);
  }

  private retain(namespace: string, uid: string, digest: string): void {
    if (this.closed) return;
    let w = this.namespaces.get(namespace);
    if (!w) {
      w = { jobs: new Map(), watch: this.o.open(namespace) };
      this.namespaces.set(namespace, w);
      this.o.log?.('debug', 'watching the Job pods of a namespace', { namespace, watched: this.namespaces.size });
    }
    w.jobs.set(uid, digest);
  }

  private release(namespace: string, uid: string, why: 'recorded' | 'deleted' | 'gone'): void {
    const w = this.namespaces.get(namespace);
    if (!w || !w.jobs.delete(uid) || w.jobs.size > 0) return;
    w.watch.stop();
    this.namespaces.delete(namespace);
    this.o.log?.('debug', 'stopped watching the Job pods of a namespace', { namespace, why, watched: this.namespaces.size });
  }
}

function idOf(job: V1Job): { namespace: string; uid: string } | undefined {
  const namespace = job.metadata?.namespace;
  const uid = job.metadata?.uid;
  return namespace && uid ? { namespace, uid } : undefined;
}
