/**
 * The metric names each program serves, taken from the programs' own
 * registries (not from a list kept by hand): the webhook's createMetrics, the
 * harvester's and the sidecar's registry builders, with every optional figure
 * turned on. A histogram or summary also answers to its series' suffixes.
 */
import * as prom from 'prom-client';
import { DeliveryTotals } from '../../harvester/delivery-totals.ts';
import { harvesterRegistry, WatchStats } from '../../harvester/metrics.ts';
import { sidecarRegistry } from '../../sidecar/metrics.ts';
import { newStats } from '../../sidecar/stats.ts';
import { createMetrics } from '../../src/http/metrics.ts';

type Registry = InstanceType<typeof prom.Registry>;

async function names(registry: Registry): Promise<Set<string>> {
  const out = new Set<string>();
  for (const m of await registry.getMetricsAsJSON()) {
    out.add(m.name);
    if (String(m.type) === 'histogram') for (const s of ['_bucket', '_sum', '_count']) out.add(m.name + s);
    if (String(m.type) === 'summary') for (const s of ['_sum', '_count']) out.add(m.name + s);
  }
  return out;
}

export async function programMetricNames(): Promise<{ webhook: Set<string>; harvester: Set<string>; sidecar: Set<string> }> {
  const n = () => 0;
  const harvester = harvesterRegistry(
    prom,
    new WatchStats(),
    { podWatches: n, trackedJobs: n, podReports: n, podReportBytes: n, podReportsEvicted: n, injectionMissed: n, injectingNamespaces: n, leader: n, queueDepth: n, running: n },
    new DeliveryTotals(),
  );
  return {
    webhook: await names(createMetrics({ defaultMetrics: true }).registry),
    harvester: await names(harvester),
    sidecar: await names(sidecarRegistry(prom, newStats(), { inFlight: n, openFiles: n })),
  };
}
