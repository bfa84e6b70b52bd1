// The harvester's own figures, and the optional Prometheus endpoint that
// serves them (--metrics-port). The counters are plain numbers the edge adds
// to; prom-client is only loaded when the endpoint is on and reads them at
// scrape time, with the process figures (resident memory among them).
import { serveMetrics } from '../sidecar/engine.ts';
import { LINE_OUTCOMES, RESULTS, type DeliveryTotals } from './delivery-totals.ts';

export type Resource = 'jobs' | 'pods' | 'namespaces';

/** API calls of the harvester's list-watches, by resource. */
export class WatchStats {
  readonly lists: Record<Resource, number> = { jobs: 0, pods: 0, namespaces: 0 };
  readonly watches: Record<Resource, number> = { jobs: 0, pods: 0, namespaces: 0 };

  count(resource: Resource, call: 'list' | 'watch'): void {
    if (call === 'list') this.lists[resource]++;
    else this.watches[resource]++;
  }
}

export interface HarvesterGauges {
  /** Namespaces whose Job pods the leader watches. */
  podWatches(): number;
  /** Injected Jobs the leader still cares about (not recorded, not deleted); they keep their namespaces watched. */
  trackedJobs(): number;
  /** Gone pods' sidecar reports kept for Jobs not yet recorded. */
  podReports(): number;
  /** Their estimated heap, bounded by --pod-reports-mib. */
  podReportBytes?(): number;
  /** Kept reports let go to stay within that bound, since the start. */
  podReportsEvicted?(): number;
  /** Jobs that missed injection and got their delivery record, since the start. */
  injectionMissed?(): number;
  /** Namespaces that inject, whose labels and annotations the leader keeps to tell a missed injection. */
  injectingNamespaces?(): number;
  /** 1 while this replica holds the Lease. */
  leader?(): number;
  /** Finished Jobs waiting for a reconcile (the leader's work queue, running ones not included). */
  queueDepth?(): number;
  /** Reconciles running, at most --concurrency. */
  running?(): number;
}

type PromClient = typeof import('prom-client');

export async function startMetrics(port: number, stats: WatchStats, gauges: HarvesterGauges, totals?: DeliveryTotals): Promise<{ port: number; close(): Promise<void> }> {
  const mod = await import('prom-client');
  // CommonJS module: bundled, its exports arrive as the default export.
  const prom = ((mod as unknown as { default?: typeof mod }).default ?? mod) as PromClient;
  return serveMetrics(harvesterRegistry(prom, stats, gauges, totals), port);
}

/** Every metric the harvester serves, read at scrape time from the figures given. */
export function harvesterRegistry(prom: PromClient, stats: WatchStats, gauges: HarvesterGauges, totals?: DeliveryTotals): InstanceType<PromClient['Registry']> {
  const registry = new prom.Registry();
  prom.collectDefaultMetrics({ register: registry });
  const gauge = (name: string, help: string, read: () => number) =>
    new prom.Gauge({
      name,
      help,
      registers: [registry],
      collect() {
        this.set(read());
      },
    });
  gauge('jobharvest_harvester_pod_watches', 'Namespaces whose Job pods the leader watches: those with injected Jobs not yet recorded.', gauges.podWatches);
  gauge('jobharvest_harvester_tracked_jobs', 'Injected Jobs the leader still cares about: not deleted and without their delivery record.', gauges.trackedJobs);
  gauge('jobharvest_harvester_pod_reports', "Gone pods whose sidecar's report is kept until their Job's record is written.", gauges.podReports);
  if (gauges.podReportBytes) gauge('jobharvest_harvester_pod_report_bytes', 'Estimated heap of the kept pod reports, at most --pod-reports-mib.', gauges.podReportBytes);
  if (gauges.podReportsEvicted) {
    const read = gauges.podReportsEvicted;
    new prom.Counter({
      name: 'jobharvest_harvester_pod_reports_evicted_total',
      help: 'Kept pod reports let go to stay within --pod-reports-mib (the namespace holding the most gives up its oldest).',
      registers: [registry],
      collect() {
        this.reset();
        this.inc(read());
      },
    });
  }
  if (gauges.injectionMissed) {
    const read = gauges.injectionMissed;
    new prom.Counter({
      name: 'jobharvest_harvester_injection_missed_total',
      help: 'Jobs that ran without the sidecar in a namespace that injects (created while the webhook was unreachable or not installed), recorded with an InjectionMissed Event.',
      registers: [registry],
      collect() {
        this.reset();
        this.inc(read());
      },
    });
  }
  if (gauges.injectingNamespaces) gauge('jobharvest_harvester_injecting_namespaces', 'Namespaces whose Jobs the webhook injects, as the leader knows them to tell a missed injection.', gauges.injectingNamespaces);
  const counter = (name: string, help: string, read: (r: Resource) => number) =>
    new prom.Counter({
      name,
      help,
      labelNames: ['resource'],
      registers: [registry],
      collect() {
        this.reset();
        for (const r of ['jobs', 'pods', 'namespaces'] as const) this.inc({ resource: r }, read(r));
      },
    });
  counter('jobharvest_harvester_list_requests_total', 'List calls of the list-watches (the Jobs and the namespaces, cluster-wide; the Job pods, per namespace).', (r) => stats.lists[r]);
  counter('jobharvest_harvester_watch_requests_total', 'Watch requests of the list-watches, resumed ones included.', (r) => stats.watches[r]);
  if (gauges.leader) gauge('jobharvest_harvester_leader', '1 while this replica holds the Lease and harvests; 0 while it follows.', gauges.leader);
  if (gauges.queueDepth) gauge('jobharvest_harvester_queue_depth', 'Finished Jobs waiting for a reconcile in the leader\'s work queue (not counting those running).', gauges.queueDepth);
  if (gauges.running) gauge('jobharvest_harvester_reconciles_running', 'Reconciles running now, at most --reconciles.', gauges.running);
  if (totals) deliveryMetrics(prom, registry, totals);
  return registry;
}

/** The delivery records' counts (harvester/delivery-totals.ts), cluster-wide and per Job namespace. */
function deliveryMetrics(prom: PromClient, registry: InstanceType<PromClient['Registry']>, totals: DeliveryTotals): void {
  // A namespace's series is first served at 0, its counts from the next scrape
  // on: a counter whose first sample already holds the first record's lines
  // would hide them from increase() and rate(). One scrape per Prometheus is
  // late at most; the set is bounded like the namespaces (maxNamespaces + 1).
  const served = new Set<string>();
  const shown = (ns: string, n: number): number => (served.has(ns) ? n : 0);
  const perNamespace = `per Job namespace (job_namespace; after the first ${totals.maxNamespaces} namespaces, the rest folded into "(other)")`;
  new prom.Counter({
    name: 'jobharvest_harvester_records_total',
    help: 'Delivery records written, by result: complete (every line at the log server), incomplete (lines lost, pods unaccounted or resume gaps), unverified (the injection failed verification: not harvested), missed (the Job ran without the sidecar).',
    labelNames: ['result'],
    registers: [registry],
    collect() {
      this.reset();
      for (const r of RESULTS) this.inc({ result: r }, totals.all.records[r]);
    },
  });
  new prom.Counter({
    name: 'jobharvest_harvester_lines_total',
    help: "Lines the delivery records count, by outcome: shipped (acknowledged by the log server, the sidecars' and the harvester's), lost (refused for good or not shipped in time), harvested (the part of shipped the harvester sent itself).",
    labelNames: ['outcome'],
    registers: [registry],
    collect() {
      this.reset();
      for (const o of LINE_OUTCOMES) this.inc({ outcome: o }, totals.all.lines[o]);
    },
  });
  new prom.Counter({
    name: 'jobharvest_harvester_unaccounted_pods_total',
    help: 'Pods the delivery records could not account for (node lost, sidecar killed before it reported, logs unreadable): how many lines they had is unknown.',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(totals.all.unaccountedPods);
    },
  });
  new prom.Counter({
    name: 'jobharvest_harvester_namespace_records_total',
    help: `jobharvest_harvester_records_total ${perNamespace}.`,
    labelNames: ['job_namespace', 'result'],
    registers: [registry],
    collect() {
      this.reset();
      for (const [ns, t] of totals.namespaces()) for (const r of RESULTS) if (t.records[r] > 0) this.inc({ job_namespace: ns, result: r }, shown(ns, t.records[r]));
    },
  });
  new prom.Counter({
    name: 'jobharvest_harvester_namespace_lines_total',
    help: `jobharvest_harvester_lines_total ${perNamespace}.`,
    labelNames: ['job_namespace', 'outcome'],
    registers: [registry],
    collect() {
      this.reset();
      for (const [ns, t] of totals.namespaces()) for (const o of LINE_OUTCOMES) this.inc({ job_namespace: ns, outcome: o }, shown(ns, t.lines[o]));
      // Both per-namespace counters are collected in one scrape: from the next one on, the namespaces seen here show their counts.
      for (const ns of totals.namespaces().keys()) served.add(ns);
    },
  });
}
