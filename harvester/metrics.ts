// The harvester's own figures, and the optional Prometheus endpoint that
// serves them (--metrics-port). The counters are plain numbers the edge adds
// to; prom-client is only loaded when the endpoint is on and reads them at
// scrape time, with the process figures (resident memory among them).
import { serveMetrics } from '../sidecar/metrics.ts';

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
}

export async function startMetrics(port: number, stats: WatchStats, gauges: HarvesterGauges): Promise<{ port: number; close(): Promise<void> }> {
  const mod = await import('prom-client');
  // CommonJS module: bundled, its exports arrive as the default export.
  const prom = ((mod as unknown as { default?: typeof mod }).default ?? mod) as typeof mod;
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
  return serveMetrics(registry, port);
}
