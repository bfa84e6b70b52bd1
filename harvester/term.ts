// One leader's term: what a replica runs from the moment it leads until its
// leadership ends (lost, or the replica stopping). The work queue, the
// namespace and Job watches that feed it, and the pod watches of the
// namespaces holding injected Jobs are Runnables of one term's signal; the
// term is over once the queue's reconciles have returned, and only then may
// the leader give the Lease up (harvester/leader.ts).
import type { KubeConfig } from '@kubernetes/client-node';
import type { KeyRing } from '../src/contract/signature.ts';
import type { Config } from '../src/core/config.ts';
import type { NamespaceMeta } from '../src/core/kube.ts';
import { deliveryRecordOf } from './hold.ts';
import { UNINJECTED_JOB_SELECTOR, watchJobPods, watchJobs, watchNamespaces, type JobWatch } from './kube.ts';
import type { Log } from './log.ts';
import type { WatchStats } from './metrics.ts';
import { missedJobKey, namespaceInjects } from './missed.ts';
import type { PodReports } from './pod-reports.ts';
import { PodWatches } from './pod-watches.ts';
import { WorkQueue } from './queue.ts';
import { Reconciler } from './reconcile.ts';
import { runAll, untilAborted, type Runnable } from './runnable.ts';
import { verifyInjection } from './trust.ts';

export interface TermOptions {
  readonly kc: KubeConfig;
  readonly reconciler: Pick<Reconciler, 'reconcile'>;
  readonly reports: PodReports;
  readonly stats: WatchStats;
  readonly concurrency: number;
  readonly signingKeys: KeyRing;
  readonly config: Config;
  readonly log: Log;
}

/** What the metrics and the reconciler read of the current term; empty while following. */
export interface TermView {
  watches?: PodWatches;
  injecting?: Map<string, NamespaceMeta>;
  queue?: WorkQueue<string>;
}

export class LeaderTerm implements Runnable {
  constructor(
    private readonly o: TermOptions,
    private readonly view: TermView,
  ) {}

  async run(signal: AbortSignal): Promise<void> {
    const { o, view } = this;
    const queue = new WorkQueue<string>((key, sig) => o.reconciler.reconcile(key, sig), { concurrency: o.concurrency, log: o.log });
    const watches = this.podWatches(signal);
    // The labels and annotations of the namespaces that inject, and nothing
    // of any other: what `decide` needs to tell a Job that missed injection.
    const injecting = new Map<string, NamespaceMeta>();
    view.queue = queue;
    view.watches = watches;
    view.injecting = injecting;
    // Stopped in this order when the term ends: the queue aborts its
    // reconciles first, then the watches that feed it, then the pod watches.
    const running = runAll([queue, new ClusterWatches(o, queue, watches, injecting), watches], signal);
    // After the queue's abort: a reconcile never sees the term gone while its signal is live.
    const over = (): void => {
      view.watches = undefined;
      view.injecting = undefined;
      view.queue = undefined;
    };
    if (signal.aborted) over();
    else signal.addEventListener('abort', over, { once: true });
    await running;
  }

  /**
   * The Job pods of each namespace with injected Jobs not yet recorded, for
   * the sidecar reports of pods that go before their Job ends; a namespace's
   * watch stops with its last such Job (recorded, deleted, or gone with the
   * namespace).
   */
  private podWatches(signal: AbortSignal): PodWatches {
    const { kc, log, reports, stats, signingKeys } = this.o;
    return new PodWatches({
      open: (ns) => watchJobPods(kc, ns, { log, signal, onPod: (p) => reports.observe(p), retryMs: 10_000, stats }),
      cares: (job) => !job.metadata?.deletionTimestamp && deliveryRecordOf(job, signingKeys) === undefined,
      verify: (job) => {
        const v = verifyInjection(job, signingKeys);
        return v.ok ? v.value.sidecarDigest : undefined;
      },
      forget: (uid) => reports.forget(uid),
      log,
    });
  }
}

/**
 * Every namespace, then, once they are known, the injected Jobs and the Jobs
 * without the label: each Job that may need a reconcile becomes a key of the
 * queue.
 */
class ClusterWatches implements Runnable {
  private injected: JobWatch | undefined;
  /** Per namespace that injects: its Jobs without the label. */
  private readonly uninjected = new Map<string, JobWatch>();

  constructor(
    private readonly o: TermOptions,
    private readonly queue: WorkQueue<string>,
    private readonly pods: PodWatches,
    private readonly injecting: Map<string, NamespaceMeta>,
  ) {}

  async run(signal: AbortSignal): Promise<void> {
    const { kc, log, stats, config } = this.o;
    const injecting = this.injecting;
    const namespaceWatch = watchNamespaces(kc, {
      log,
      signal,
      stats,
      onNamespace: (ns, deleted) => {
        const name = ns.metadata?.name;
        if (!name) return;
        const meta: NamespaceMeta = { name, labels: { ...(ns.metadata?.labels ?? {}) }, annotations: { ...(ns.metadata?.annotations ?? {}) }, ...(ns.metadata?.deletionTimestamp ? { terminating: true } : {}) };
        if (!deleted && namespaceInjects(meta, config)) {
          injecting.set(name, meta);
          if (this.injected) this.watchUninjected(name, signal);
        } else {
          injecting.delete(name);
          this.unwatchUninjected(name);
        }
      },
      onList: (names) => {
        for (const name of [...injecting.keys()]) {
          if (names.has(name)) continue;
          injecting.delete(name);
          this.unwatchUninjected(name);
        }
        // The Jobs only once the namespaces are known: a Job reconciled
        // before would be judged against none, and recorded wrongly for good.
        if (this.injected || signal.aborted) return;
        this.injected = this.injectedJobs(signal);
        for (const name of injecting.keys()) this.watchUninjected(name, signal);
      },
    });
    await untilAborted(signal);
    namespaceWatch.stop();
    this.injected?.stop();
    for (const w of this.uninjected.values()) w.stop();
    this.uninjected.clear();
  }

  private watchUninjected(namespace: string, signal: AbortSignal): void {
    if (!this.uninjected.has(namespace) && !signal.aborted) this.uninjected.set(namespace, this.uninjectedJobs(namespace, signal));
  }

  private unwatchUninjected(namespace: string): void {
    this.uninjected.get(namespace)?.stop();
    this.uninjected.delete(namespace);
  }

  private injectedJobs(signal: AbortSignal): JobWatch {
    const { kc, log, stats } = this.o;
    return watchJobs(kc, {
      log,
      signal,
      stats,
      onList: (uids) => this.pods.resync(uids),
      onJob: (job) => {
        this.pods.observe(job);
        // The record coming back through the watch (the harvester's own patch)
        // is no work: reading the Job again only to find it recorded costs a GET a Job.
        if (Reconciler.wants(job) && deliveryRecordOf(job, this.o.signingKeys) === undefined) this.queue.add(`${job.metadata!.namespace}/${job.metadata!.name}`);
      },
      onDeleted: (job) => this.pods.deleted(job),
    });
  }

  /**
   * The Jobs without the label of one namespace that injects, watched only
   * while it does: a Job of any other namespace never reaches the harvester,
   * so what tenants that never opted in create (however large) costs it
   * nothing. Each passes through here and is let go at once unless it is
   * finished and not yet recorded and the webhook would have injected it:
   * only those become keys, so memory follows the missed Jobs.
   */
  private uninjectedJobs(namespace: string, signal: AbortSignal): JobWatch {
    const { kc, log, stats, config, signingKeys } = this.o;
    return watchJobs(kc, {
      namespace,
      selector: UNINJECTED_JOB_SELECTOR,
      log,
      signal,
      stats,
      onJob: (job) => {
        const key = missedJobKey(job, this.injecting, config, signingKeys);
        if (key !== undefined) this.queue.add(key);
      },
    });
  }
}
