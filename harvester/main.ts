// The harvester: its own program, Deployment and service account. It reports
// where every injected Job's logs went and ships what a sidecar could not.
// The webhook never loads any of this, so a harvester that crashes, hangs or
// runs out of memory leaves admission alone.
//
// One replica works at a time (a Lease, by client-go's rules); losing it
// aborts every harvest in flight before another replica can start one.
import { CoordinationV1Api, KubeConfig } from '@kubernetes/client-node';
import { Command, InvalidArgumentError } from 'commander';
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { describeKeys, keyFromText, keyRing, type KeyRing } from '../src/contract/signature.ts';
import { NAMES } from '../src/contract/env.ts';
import { parseDestinations, type Destination } from './destinations.ts';
import { parse as parseYaml } from 'yaml';
import { defaultConfig, parseConfig, type Config } from '../src/core/config.ts';
import { harvestApi, kubeAccess, sharedConnections } from './kube.ts';
import { missedInjection } from './missed.ts';
import { DEFAULT_BUDGET_BYTES, PodReports } from './pod-reports.ts';
import { LeaderElector } from './leader.ts';
import { collect, int, level } from './flags.ts';
import { LEVELS, log, setLogLevel, type LogLevel } from './log.ts';
import { startMetrics, WatchStats } from './metrics.ts';
import { DEFAULT_MAX_NAMESPACES, DeliveryTotals } from './delivery-totals.ts';
import { Reconciler } from './reconcile.ts';
import { runAll } from './runnable.ts';
import { DEFAULT_LIMITS, shipPod } from './ship.ts';
import { Slots } from './slots.ts';
import { LeaderTerm, type TermView } from './term.ts';
import { runUninstall } from './uninstall.ts';

/** The longest hold: a week, as `ttlSecondsAfterFinished` arithmetic and timers stay exact far beyond it. */
export const MAX_HOLD_LIMIT_SECONDS = 7 * 24 * 3600;

export interface HarvesterSettings {
  readonly kubeconfig: string | undefined;
  readonly namespace: string;
  readonly leaseName: string;
  readonly identity: string;
  /** The webhook's current key, which signs the harvester's holds and records too, and previous keys kept to verify only. */
  readonly signingKeys: KeyRing;
  readonly destinations: readonly Destination[];
  readonly maxHoldSeconds: number;
  readonly concurrency: number;
  readonly reconciles: number;
  readonly leaseDurationMs: number;
  readonly renewDeadlineMs: number;
  readonly retryPeriodMs: number;
  readonly podsDoneTimeoutMs: number;
  /** The bound of the kept pod reports' heap (harvester/pod-reports.ts). */
  readonly podReportsBytes: number;
  readonly logsUrlTemplate: string | undefined;
  /** 0: no metrics endpoint. */
  readonly metricsPort: number;
  /** Job namespaces with series of their own in the delivery metrics; the rest are folded into one. */
  readonly metricsMaxNamespaces: number;
  readonly logLevel: LogLevel;
  /** The webhook's configuration (the chart's config file): tells a Job that missed injection from one skipped on purpose. */
  readonly config: Config;
}


export function parseSettings(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): HarvesterSettings {
  const cmd = new Command('harvester')
    .description("reports where injected Jobs' logs went and ships what their sidecars could not (`uninstall --help`: the chart's pre-delete hook)")
    .option('--kubeconfig <file>', 'kubeconfig (default: in cluster, then $KUBECONFIG)')
    .option('--namespace <ns>', "namespace of the leader Lease (default: $POD_NAMESPACE, else 'jobharvest')")
    .option('--lease-name <name>', 'name of the leader Lease', 'jobharvest-harvester')
    .requiredOption('--signing-key-file <file>', "the key the webhook signs injections with (the chart's signing Secret)")
    .option(
      '--previous-signing-key-file <file>',
      'a key the webhook signed with before a rotation, to verify Jobs, holds and records signed with it, never to sign (repeatable; the chart\'s signing.previousKeys)',
      collect,
      [] as string[],
    )
    .option('--destinations-file <file>', 'JSON list of approved destinations (the chart renders it)')
    .option('--max-hold-seconds <n>', `longest hold of a Job while shipping (0: report only, never hold; at most ${MAX_HOLD_LIMIT_SECONDS})`, int(0, MAX_HOLD_LIMIT_SECONDS), 86_400)
    .option('--concurrency <n>', 'harvests at once (reading pods/log and shipping; each holds a request and a batch in memory)', int(1, 64), 4)
    .option('--reconciles <n>', 'finished Jobs reconciled at once (reading the Job and its pods, writing the record and its Event); at most --concurrency of them harvest at a time', int(1, 256), 16)
    .option('--lease-seconds <n>', 'Lease duration', int(2, 3600), 15)
    .option('--renew-deadline-seconds <n>', 'a leader that cannot renew for this long stops (below the Lease duration)', int(1, 3600))
    .option('--retry-period-seconds <n>', 'between Lease attempts', int(1, 600))
    .option('--logs-url-template <t>', 'the chart\'s logsUrlTemplate: rewrite jobharvest.io/logs-url with the uid and the real end time once a Job is done')
    .option('--config <file>', "the webhook's configuration file (the chart's), so that a Job that missed injection is told by the webhook's own rules (default: the webhook's defaults)")
    .option('--pods-done-timeout-seconds <n>', "how long a finished Job's pods may take to be done before reporting", int(1, 86_400), 300)
    .option('--pod-reports-mib <n>', "heap for gone pods' sidecar reports, shared fairly among namespaces (see docs/harvester.md)", int(1, 4096), DEFAULT_BUDGET_BYTES / 2 ** 20)
    .option('--metrics-port <n>', 'serve Prometheus metrics on this port at /metrics (0: off)', int(0, 65_535), 0)
    .option('--metrics-max-namespaces <n>', 'Job namespaces given series of their own in the delivery metrics, the first seen; later ones are folded into job_namespace="(other)"', int(0, 10_000), DEFAULT_MAX_NAMESPACES)
    .option('--log-level <level>', "debug, info, warn or error (default: $JOBHARVEST_LOG_LEVEL, else 'info')", level)
    .exitOverride()
    .configureOutput({ writeErr: (s) => process.stderr.write(s) });
  cmd.parse(argv as string[], { from: 'user' });
  const o = cmd.opts<{
    kubeconfig?: string;
    config?: string;
    namespace?: string;
    leaseName: string;
    signingKeyFile: string;
    previousSigningKeyFile: string[];
    destinationsFile?: string;
    maxHoldSeconds: number;
    concurrency: number;
    reconciles: number;
    leaseSeconds: number;
    renewDeadlineSeconds?: number;
    retryPeriodSeconds?: number;
    podsDoneTimeoutSeconds: number;
    podReportsMib: number;
    logsUrlTemplate?: string;
    metricsPort: number;
    metricsMaxNamespaces: number;
    logLevel?: LogLevel;
  }>();
  const leaseDurationMs = o.leaseSeconds * 1000;
  // client-go's ratio: renew deadline two thirds of the Lease, retry a fifth.
  const renewDeadlineMs = o.renewDeadlineSeconds !== undefined ? o.renewDeadlineSeconds * 1000 : Math.floor((leaseDurationMs * 2) / 3);
  const retryPeriodMs = o.retryPeriodSeconds !== undefined ? o.retryPeriodSeconds * 1000 : Math.max(200, Math.floor(leaseDurationMs / 7.5));
  const destinations = o.destinationsFile ? parseDestinations(JSON.parse(readFileSync(o.destinationsFile, 'utf8'))) : [];
  return {
    kubeconfig: o.kubeconfig,
    namespace: o.namespace ?? env.POD_NAMESPACE ?? 'jobharvest',
    leaseName: o.leaseName,
    identity: env.POD_NAME ?? `${hostname()}-${process.pid}`,
    signingKeys: keyRing(
      keyFromText(readFileSync(o.signingKeyFile)),
      o.previousSigningKeyFile.map((f) => keyFromText(readFileSync(f))),
    ),
    destinations,
    maxHoldSeconds: o.maxHoldSeconds,
    concurrency: o.concurrency,
    reconciles: Math.max(o.reconciles, o.concurrency),
    leaseDurationMs,
    renewDeadlineMs,
    retryPeriodMs,
    podsDoneTimeoutMs: o.podsDoneTimeoutSeconds * 1000,
    podReportsBytes: o.podReportsMib * 2 ** 20,
    logsUrlTemplate: o.logsUrlTemplate || undefined,
    metricsPort: o.metricsPort,
    metricsMaxNamespaces: o.metricsMaxNamespaces,
    logLevel: o.logLevel ?? envLevel(env.JOBHARVEST_LOG_LEVEL),
    config: o.config ? parseConfig(parseYaml(readFileSync(o.config, 'utf8')) ?? {}) : defaultConfig(),
  };
}

function envLevel(v: string | undefined): LogLevel {
  if (v === undefined || v === '') return 'info';
  if (!(LEVELS as readonly string[]).includes(v)) throw new InvalidArgumentError(`JOBHARVEST_LOG_LEVEL: ${LEVELS.join(', ')}`);
  return v as LogLevel;
}

function kubeConfig(file: string | undefined): KubeConfig {
  const kc = new KubeConfig();
  if (file) kc.loadFromFile(file);
  else kc.loadFromDefault();
  return sharedConnections(kc);
}

export async function runHarvester(s: HarvesterSettings): Promise<void> {
  setLogLevel(s.logLevel);
  const kc = kubeConfig(s.kubeconfig);
  // Set below; the reconciler asks it before every write.
  const current: { leader?: { isLeader(): boolean } } = {};
  // The leader's pod watches and the namespaces that inject, per term; none while following.
  const term: TermView = {};
  const totals = new DeliveryTotals(s.metricsMaxNamespaces);
  let missedRecorded = 0;
  // Pods are kept only for the Jobs the current term's watches verified.
  const reports = new PodReports({ container: NAMES.container, trusted: (ns, uid) => term.watches?.trusted(ns, uid), budgetBytes: s.podReportsBytes });
  const stats = new WatchStats();
  if (s.metricsPort > 0) {
    const m = await startMetrics(s.metricsPort, stats, {
      podWatches: () => term.watches?.size ?? 0,
      trackedJobs: () => term.watches?.jobs ?? 0,
      podReports: () => reports.count,
      podReportBytes: () => reports.usedBytes,
      podReportsEvicted: () => reports.evicted,
      injectionMissed: () => missedRecorded,
      injectingNamespaces: () => term.injecting?.size ?? 0,
      leader: () => (current.leader?.isLeader() ? 1 : 0),
      queueDepth: () => term.queue?.length ?? 0,
      running: () => term.queue?.running ?? 0,
    }, totals);
    log('info', 'metrics at /metrics', { port: m.port });
  }
  const reconciler = new Reconciler({
    api: harvestApi(kc),
    key: s.signingKeys,
    destinations: s.destinations,
    maxHoldSeconds: s.maxHoldSeconds,
    limits: DEFAULT_LIMITS,
    harvests: new Slots(s.concurrency),
    kube: kubeAccess(kc),
    ship: shipPod,
    log,
    podsDoneTimeoutMs: s.podsDoneTimeoutMs,
    identity: s.identity,
    mayWrite: () => current.leader?.isLeader() === true,
    ...(s.logsUrlTemplate ? { logsUrlTemplate: s.logsUrlTemplate } : {}),
    reports,
    missed: (job) => missedInjection(job, term.injecting?.get(job.metadata?.namespace ?? ''), s.config),
    onMissed: () => missedRecorded++,
    onRecord: (namespace, delivery, result) => totals.add(namespace, delivery, result),
  });
  log('info', 'harvester starting', { namespace: s.namespace, lease: s.leaseName, identity: s.identity, destinations: s.destinations.map((d) => d.name), maxHoldSeconds: s.maxHoldSeconds, concurrency: s.concurrency, reconciles: s.reconciles, signingKeys: describeKeys(s.signingKeys) });
  const elector = new LeaderElector(kc.makeApiClient(CoordinationV1Api), {
    namespace: s.namespace,
    name: s.leaseName,
    identity: s.identity,
    leaseDurationMs: s.leaseDurationMs,
    renewDeadlineMs: s.renewDeadlineMs,
    retryPeriodMs: s.retryPeriodMs,
    log,
    onStartedLeading: (signal) => new LeaderTerm({ kc, reconciler, reports, stats, concurrency: s.reconciles, signingKeys: s.signingKeys, config: s.config, log }, term).run(signal),
    onStoppedLeading: () => log('info', 'no longer leading: harvests stopped'),
  });
  current.leader = elector;
  const stop = new AbortController();
  const shutdown = (signal: string): void => {
    if (stop.signal.aborted) return;
    log('info', 'shutting down', { signal });
    stop.abort();
  };
  process.once('SIGTERM', () => shutdown('SIGTERM'));
  process.once('SIGINT', () => shutdown('SIGINT'));
  // Settles once the leader's term has ended (the queue stopped) and the
  // Lease is given up, or when one of them fails.
  await runAll([elector], stop.signal);
}

export async function main(argv: readonly string[]): Promise<void> {
  // The chart's pre-delete hook runs the same image: `harvester.mjs uninstall …`.
  if (argv[0] === 'uninstall') await runUninstall(argv.slice(1));
  let settings: HarvesterSettings;
  try {
    settings = parseSettings(argv);
  } catch (err) {
    const e = err as { code?: string; message: string };
    if (e.code === 'commander.helpDisplayed' || e.code === 'commander.version') process.exit(0);
    if (!e.code?.startsWith('commander.')) process.stderr.write(`harvester: ${e.message}\n`);
    process.exit(2);
  }
  await runHarvester(settings);
  // Whatever a library may still hold open (an idle connection, a metrics
  // client) must not keep a replica that has given its Lease up alive until
  // the kubelet kills it.
  process.exit(0);
}
