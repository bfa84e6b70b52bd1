/**
 * `npm run demo`: one Job's whole life on this machine, no Docker and no
 * cluster needed. A real control plane, the webhook, the test kubelet running
 * the real sidecar, and VictoriaLogs as the log server; the Job's lines are
 * printed as the log server returns them, then the TTL deletes the Job.
 */
import { startCluster, type Cluster } from '../test/harness/cluster/harness.ts';
import { ensureGoProgram, VICTORIA_LOGS } from '../test/harness/servers/go-build.ts';
import { ensureSidecarBundle } from '../test/support/sidecar.ts';
import { Stack, shellJob } from '../test/harness/kubelet/stack.ts';
import { defaultConfig } from '../src/core/config.ts';
import { mutateJob } from '../src/core/mutate.ts';

const TTL = 5;
const LINES = 10;
const t0 = Date.now();
const dim = (s: string) => (process.stdout.isTTY ? `\x1b[2m${s}\x1b[22m` : s);
const bold = (s: string) => (process.stdout.isTTY ? `\x1b[1m${s}\x1b[22m` : s);
const since = () => dim(`[${((Date.now() - t0) / 1000).toFixed(1).padStart(5)} s]`);
const say = (msg: string) => console.log(`${since()} ${msg}`);
const step = (n: number, msg: string) => console.log(`\n${since()} ${bold(`${n}/5 ${msg}`)}`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let cluster: Cluster | undefined;
let stack: Stack | undefined;

async function cleanup(): Promise<void> {
  await stack?.stop().catch(() => undefined);
  await cluster?.stop().catch(() => undefined);
}

async function main(): Promise<void> {
  step(1, 'Build what is needed (cached after the first run)');
  say('control plane: built by `npm run cluster:build` just before this script');
  ensureGoProgram(VICTORIA_LOGS, (m) => say(`${m} (first run only; takes a few minutes)`));
  say('VictoriaLogs: ready');
  ensureSidecarBundle();
  say('sidecar bundle: dist/sidecar.mjs ready');

  step(2, 'Start the control plane, the log server, the webhook, the harvester and the test kubelet');
  cluster = await startCluster({ log: (l) => say(dim(l)) });
  say(`Kubernetes ${cluster.versions.kubernetes} (etcd, kube-apiserver, kube-controller-manager) at ${cluster.server}`);
  const { processes: _p, stop: _s, ...info } = cluster;
  stack = await Stack.start({ info, name: 'demo' });
  say(`VictoriaLogs at ${stack.vl.url}`);
  say(`webhook (jobharvest webhook) at ${stack.webhook.url}, registered with the API server`);
  say(`harvester (its own process, sharing the webhook's signing key): reports where each Job's logs went`);
  say(`test kubelet: node ${stack.kubelet.nodeName}, pods run as local processes under ${stack.kubelet.root}`);

  step(3, 'Opt a namespace in and create a Job');
  // First what a default install does: the chart's sink is stdout, which keeps
  // the lines only in the pod, so the webhook sets no TTL (a server-side dry run:
  // nothing is stored and no pod runs).
  const bare = `demo-stdout-${Date.now().toString(36)}`;
  await stack.core.createNamespace({ body: { metadata: { name: bare, annotations: { 'jobharvest.io/inject': 'enabled' } } } });
  try {
    const probe = shellJob('nightly-report', { script: 'echo hi' });
    const dry = await stack.batch.createNamespacedJob({ namespace: bare, body: probe, dryRun: 'All' });
    say(`namespace ${bare}: jobharvest.io/inject=enabled, no sink configured (the chart's default, stdout)`);
    say(`  dry run: the "${dry.spec?.template.spec?.initContainers?.[0]?.name}" sidecar is added, ttlSecondsAfterFinished=${dry.spec?.ttlSecondsAfterFinished ?? 'unset'}: the Job is kept as without jobharvest`);
    const { warnings } = mutateJob({ ...probe, metadata: { ...probe.metadata, namespace: bare } } as never, { config: defaultConfig(), namespace: { name: bare }, assumeOptedIn: true });
    for (const w of warnings) say(`  ${dim(`the webhook's warning (kubectl prints it): jobharvest: ${w}`)}`);
  } finally {
    await stack.core.deleteNamespace({ name: bare }).catch(() => undefined);
  }
  say('with a durable sink (here loki, by namespace annotations) the Job also gets its TTL:');
  const ns = await stack.namespace('team', { ttlSeconds: TTL });
  say(`namespace ${ns}: jobharvest.io/inject=enabled, sink loki -> VictoriaLogs, ttl-seconds-after-finished=${TTL}`);
  const script = `i=1; while [ $i -le ${LINES} ]; do echo "report line $i of ${LINES}: all good"; i=$((i+1)); sleep 0.3; done`;
  const job = await stack.batch.createNamespacedJob({ namespace: ns, body: shellJob('nightly-report', { script }) });
  const status = JSON.parse(job.metadata?.annotations?.['jobharvest.io/status'] ?? '{}') as { mode?: string };
  say(`Job nightly-report created; the webhook added the "${job.spec?.template.spec?.initContainers?.[0]?.name}" sidecar (mode ${status.mode}) and ttlSecondsAfterFinished=${job.spec?.ttlSecondsAfterFinished}`);

  step(4, 'Lines as the log server returns them');
  const filter = stack.filter(ns);
  let shown = 0;
  let completeShown = false;
  let jobGone = false;
  let podsGone = false;
  let completeAt = 0;
  const seen = new Set<string>();
  while (!(jobGone && podsGone)) {
    const rows = await stack.vl.query(`${filter} | sort by (_time)`);
    for (const r of rows.slice(shown)) {
      say(`  ${dim(`${r.namespace}/${r.pod} ${r.container} restart=${r.restart_count}`)}  ${r._msg}`);
    }
    shown = Math.max(shown, rows.length);
    for (const w of stack.jobWorkers(ns, 'nightly-report')) {
      if (!seen.has(w.uid) && w.records.get('jobharvest')?.state === 'terminated') {
        seen.add(w.uid);
        const s = stack.sidecarSummary(w.uid);
        say(`sidecar of ${w.name} flushed and exited: shipped ${s?.lines_shipped ?? '?'} lines, unsent ${s?.lines_unsent ?? '?'}`);
      }
    }
    const current = await stack.batch.readNamespacedJob({ name: 'nightly-report', namespace: ns }).catch(() => undefined);
    const complete = current?.status?.conditions?.find((c) => c.type === 'Complete' && c.status === 'True');
    if (complete && !completeShown) {
      completeShown = true;
      // The TTL counts from the condition's time (whole seconds), not from when we saw it.
      completeAt = new Date(complete.lastTransitionTime!).getTime();
      step(5, `Job Complete (only now that the sidecar is done); the TTL controller deletes it ${TTL} s later`);
    }
    if (completeShown && !current && !jobGone) {
      jobGone = true;
      say(`Job nightly-report deleted by the TTL controller ${((Date.now() - completeAt) / 1000).toFixed(1)} s after it completed`);
    }
    if (jobGone && !podsGone) {
      const pods = await stack.core.listNamespacedPod({ namespace: ns });
      if (pods.items.length === 0) {
        podsGone = true;
        say('its pod is gone too (garbage collector); the kubelet deleted the pod log directory');
      }
    }
    await sleep(300);
  }
  const kept = await stack.vl.count(filter);
  say(bold(`${kept} of ${LINES} lines are safe at the log server, and the Job cleaned up after itself.`));
}

process.once('SIGINT', () => {
  console.log('\ninterrupted; cleaning up');
  void cleanup().then(() => process.exit(130));
});

try {
  await main();
  console.log(`\n${since()} cleaning up`);
  await cleanup();
  console.log(`${since()} done`);
} catch (err) {
  console.error(`demo failed: ${(err as Error).stack ?? err}`);
  await cleanup();
  process.exit(1);
}
