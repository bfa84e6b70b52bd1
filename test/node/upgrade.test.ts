/**
 * `helm upgrade` from the previous release to this one, on the real node,
 * with Jobs in flight: the chart installed in cluster as quickstart.test.ts
 * installs it (the API server calls the webhook pod's IP through
 * `--enable-aggregator-routing`), the previous release built from the commit
 * it was released from (test/golden/skew/releases.json, by
 * test/harness/release/release.ts) with its own chart and its own image
 * (`jobharvest:<its version>`, laid out as the node harness lays out this
 * one's).
 *
 * Six Jobs write numbered lines for about 2 min, started (sidecar running)
 * under the previous release; meanwhile `helm upgrade --wait` rolls the
 * webhook and the harvester to this release, and then a second `helm
 * upgrade` rolls this release's webhook to itself (the shape of the next
 * upgrade, where both sides stop as this release stops). Through each, four
 * Jobs are created every 250 ms from 3 s before to 15 s after (suspended, so they
 * only count admissions and cost the node no pods). Then: every Job created
 * during this release's rollout has the sidecar, and during the upgrade every
 * Job has it but one created in the moment a previous-release replica stops
 * (that release closes its port at SIGTERM); the webhook's ready endpoints
 * never drop below two; every line the six wrote is at VictoriaLogs once;
 * and every delivery record, written by this release's harvester about
 * sidecars the previous release injected, is signed, verifies and counts
 * what was written.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { AppsV1Api, BatchV1Api, CoreV1Api, DiscoveryV1Api, type V1Job } from '@kubernetes/client-node';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { deliveryRecordOf } from '../../harvester/hold.ts';
import { NAMES } from '../../src/contract/env.ts';
import { DELIVERY_ANNOTATION, INJECTED_LABEL, STATUS_ANNOTATION } from '../../src/contract/harvest.ts';
import { keyFromText, SIGNATURE_ANNOTATION } from '../../src/contract/signature.ts';
import { VERSION } from '../../src/contract/version.ts';
import { REPO_ROOT } from '../harness/chart/dockerfile.ts';
import { startCluster, type Cluster } from '../harness/cluster/harness.ts';
import { CACHE } from '../harness/image/standins.ts';
import { kubeConfigFor } from '../harness/kubelet/stack.ts';
import { buildJobharvestImage, jobharvestImageName } from '../harness/node/images.ts';
import { NODE_BIN, startNode, type RealNode } from '../harness/node/node.ts';
import { buildRelease, compareVersions, releases, type Release } from '../harness/release/release.ts';
import { exact, VictoriaLogs } from '../harness/servers/victorialogs.ts';
import { waitFor } from '../support/wait.ts';
import { CHART_CONTROLLERS, describeRealNode } from './support.ts';

const run = promisify(execFile);

/** The release upgraded from: the newest one before this. */
const PREVIOUS = releases()
  .filter((r) => compareVersions(r.version, VERSION) < 0)
  .at(-1)!.version;
const IN_FLIGHT = 6;
const LINES = 480;
/** Between two lines: 480 lines take about 2 min, past both rollouts. */
const LINE_SLEEP = '0.25';
const PROBE_EVERY_MS = 250;
/**
 * Creators at once, each a Job every PROBE_EVERY_MS: about 16 Jobs a second,
 * so that a gap of a tenth of a second in the webhook's service (a replica
 * gone before the API server's endpoints drop it) is likely to be hit.
 */
const PROBERS = 4;
const NAMESPACE = 'jobharvest';
const RELEASE_NAME = 'jobharvest';

describeRealNode(`helm upgrade from ${PREVIOUS} to ${VERSION} with Jobs in flight`, () => {
  let cluster: Cluster | undefined;
  let node: RealNode | undefined;
  let vl: VictoriaLogs | undefined;
  let previous: Release | undefined;
  let scratch: string | undefined;
  let failed = false;

  beforeAll(async () => {
    previous = await buildRelease(PREVIOUS, console.log);
    cluster = await startCluster({ controllers: CHART_CONTROLLERS, apiServerFlags: ['--enable-aggregator-routing=true'] });
    node = await startNode({ cluster });
    vl = await VictoriaLogs.start();
    // The previous release's image, next to this one's (which the node harness imports).
    scratch = await mkdtemp(join(tmpdir(), 'jobharvest-upgrade-'));
    const t = Date.now();
    const image = await buildJobharvestImage({ dir: scratch, debCache: join(CACHE, 'node-debs'), dist: previous.dist, name: `docker.io/library/jobharvest:${PREVIOUS}` });
    await run(join(NODE_BIN, 'ctr'), ['--address', join(node.dir, 'containerd', 'containerd.sock'), '--namespace', 'k8s.io', 'images', 'import', image.archive], { maxBuffer: 1 << 24 });
    console.log(`image jobharvest:${PREVIOUS} laid out and imported in ${Date.now() - t} ms`);
  }, 20 * 60_000);
  afterAll(async () => {
    await node?.stop({ failed });
    await cluster?.stop({ failed });
    await vl?.dispose();
    if (scratch !== undefined) await rm(scratch, { recursive: true, force: true });
  });

  it('admits every Job with the sidecar through the rollout, loses and repeats no line, and records every delivery signed and counted', async () => {
    try {
      await upgradeWithJobsInFlight(cluster!, node!, vl!, previous!);
    } catch (err) {
      failed = true;
      throw err;
    }
  }, 15 * 60_000);
});

interface Probe {
  name: string;
  createdAt: number;
  sidecar: boolean;
  signed: boolean;
}

interface Rollout {
  what: string;
  startedAt: number;
  endedAt: number;
  helmMs: number;
  probes: Probe[];
  /** Created from the start of `helm upgrade` on. */
  during: Probe[];
  without: Probe[];
  unsigned: Probe[];
  /** Ready, non-terminating webhook endpoints at each sample. */
  serving: number[];
  /**
   * When each old webhook replica was told to stop (its deletionTimestamp set):
   * after the last pod list that did not show it, and by the first that did.
   */
  stopping: Array<{ after: number; by: number }>;
}

/** `t` relative to each replica's stop, for a message. */
function offsets(t: number, stops: Rollout['stopping']): string {
  return stops.map((s) => `${t - s.by >= 0 ? '+' : ''}${t - s.by} ms (stop seen ${s.by - s.after} ms after the sample before)`).join(' / ') + ' from the old replicas told to stop';
}

async function upgradeWithJobsInFlight(cluster: Cluster, node: RealNode, vl: VictoriaLogs, previous: Release): Promise<void> {
  const kc = kubeConfigFor(cluster);
  const core = kc.makeApiClient(CoreV1Api);
  const batch = kc.makeApiClient(BatchV1Api);
  const apps = kc.makeApiClient(AppsV1Api);
  const discovery = kc.makeApiClient(DiscoveryV1Api);
  const env = { ...process.env, KUBECONFIG: cluster.kubeconfigPath, HOME: cluster.dir };
  const helm = async (args: string[]) => {
    const t = Date.now();
    const r = await run(cluster.helmPath, args, { env, maxBuffer: 1 << 24 }).catch((err: { stderr?: string; message: string }) => {
      throw new Error(`helm ${args[0]}: ${err.stderr ?? err.message}`);
    });
    return { ...r, ms: Date.now() - t };
  };
  const sinkHost = await node.expose(vl.port);
  const endpoint = `http://${sinkHost}/insert/loki/api/v1/push`;
  const values = ['--set', 'sink.type=loki', '--set', `sink.endpoint=${endpoint}`];

  // The previous release, from its own chart (its appVersion names its image).
  const installed = await helm(['install', RELEASE_NAME, previous.chart, '-n', NAMESPACE, '--create-namespace', '--wait', '--timeout', '5m', ...values]);
  console.log(`helm install of ${previous.version} (chart of ${previous.sha.slice(0, 7)}): ${installed.ms} ms`);
  const deploymentImages = async () => (await apps.listNamespacedDeployment({ namespace: NAMESPACE })).items.map((d) => [d.metadata!.name!, d.spec?.template.spec?.containers[0]?.image]);
  const webhookDeployment = async () => (await apps.listNamespacedDeployment({ namespace: NAMESPACE })).items.find((d) => d.spec?.template.spec?.containers[0]?.args?.includes('webhook'))!;
  expect((await webhookDeployment()).spec?.template.spec?.containers[0]?.image).toBe(`jobharvest:${previous.version}`);
  expect(await deploymentImages(), 'the webhook and the harvester of the previous release').toEqual([
    [expect.any(String), `jobharvest:${previous.version}`],
    [expect.any(String), `jobharvest:${previous.version}`],
  ]);

  const ns = 'team-upgrade';
  await core.createNamespace({ body: { metadata: { name: ns, annotations: { 'jobharvest.io/inject': 'enabled', 'jobharvest.io/ttl-seconds-after-finished': '3600' } } } });
  await waitFor(`the default ServiceAccount in ${ns}`, () => core.readNamespacedServiceAccount({ name: 'default', namespace: ns }), { timeoutMs: 30_000 });

  // The Jobs in flight: numbered lines, one every LINE_SLEEP seconds.
  const inFlight = Array.from({ length: IN_FLIGHT }, (_, i) => `in-flight-${i}`);
  for (const name of inFlight) {
    const created = await batch.createNamespacedJob({
      namespace: ns,
      body: {
        metadata: { name },
        spec: {
          backoffLimit: 0,
          template: {
            spec: {
              restartPolicy: 'Never',
              containers: [{ name: 'main', image: 'busybox:jobharvest-test', command: ['sh', '-c', `i=1; while [ $i -le ${LINES} ]; do echo "${name} line $i"; i=$((i+1)); sleep ${LINE_SLEEP}; done`] }],
            },
          },
        },
      },
    });
    expect(created.spec?.template.spec?.initContainers?.[0]?.image, `${name} got the previous release's sidecar`).toBe(`jobharvest:${previous.version}`);
    expect(JSON.parse(created.metadata?.annotations?.[STATUS_ANNOTATION] ?? '{}')).toMatchObject({ version: previous.version });
  }
  // Running, with the previous release's sidecar started, before the upgrade.
  await waitFor(
    'the Jobs in flight to run with their sidecars started',
    async () => {
      const pods = (await core.listNamespacedPod({ namespace: ns })).items;
      const started = pods.filter((p) => p.status?.initContainerStatuses?.some((s) => s.name === NAMES.container && s.started === true) && p.status?.containerStatuses?.some((s) => s.state?.running !== undefined));
      return started.length === IN_FLIGHT ? true : undefined;
    },
    { timeoutMs: 120_000, intervalMs: 500 },
  );

  // A rollout, watched: PROBERS Jobs created every PROBE_EVERY_MS from 3 s before
  // `helm upgrade` to 15 s after its --wait returns (the last old replica is
  // then still stopping), each checked for the sidecar as admitted; the
  // webhook endpoints the API server may call, and the moments old replicas
  // were told to stop, sampled every 100 ms.
  let probeSeq = 0;
  const rollout = async (what: string, args: string[]): Promise<Rollout> => {
    const probes: Probe[] = [];
    const serving: number[] = [];
    const stopping = new Map<string, { after: number; by: number }>();
    let listedAt = Date.now();
    let probing = true;
    const prober = Promise.all(Array.from({ length: PROBERS }, async () => {
      while (probing) {
        const started = Date.now();
        const name = `probe-${probeSeq++}`;
        const job = await batch.createNamespacedJob({
          namespace: ns,
          body: { metadata: { name }, spec: { suspend: true, template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: 'busybox:jobharvest-test', command: ['true'] }] } } } },
        });
        probes.push({
          name,
          createdAt: started,
          sidecar: job.spec?.template.spec?.initContainers?.some((c) => c.name === NAMES.container) ?? false,
          signed: job.metadata?.annotations?.[SIGNATURE_ANNOTATION] !== undefined && job.metadata?.labels?.[INJECTED_LABEL] === 'true',
        });
        await new Promise((r) => setTimeout(r, Math.max(0, PROBE_EVERY_MS - (Date.now() - started))));
      }
    }));
    const sampler = (async () => {
      while (probing) {
        const slices = await discovery.listNamespacedEndpointSlice({ namespace: NAMESPACE, labelSelector: `kubernetes.io/service-name=${RELEASE_NAME}` });
        serving.push(slices.items.flatMap((sl) => sl.endpoints ?? []).filter((e) => e.conditions?.ready === true && e.conditions?.terminating !== true).length);
        const asked = Date.now();
        const pods = await core.listNamespacedPod({ namespace: NAMESPACE, labelSelector: 'app.kubernetes.io/component=webhook' });
        for (const p of pods.items) if (p.metadata?.deletionTimestamp && !stopping.has(p.metadata.name!)) stopping.set(p.metadata.name!, { after: listedAt, by: Date.now() });
        listedAt = asked;
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    await new Promise((r) => setTimeout(r, 3000));
    const startedAt = Date.now();
    const upgraded = await helm(args);
    const endedAt = Date.now();
    await new Promise((r) => setTimeout(r, 15_000));
    probing = false;
    await Promise.all([prober, sampler]);
    const during = probes.filter((p) => p.createdAt >= startedAt);
    const r: Rollout = { what, startedAt, endedAt, helmMs: upgraded.ms, probes, during, without: probes.filter((p) => !p.sidecar), unsigned: probes.filter((p) => !p.signed), serving, stopping: [...stopping.values()] };
    console.log(
      `${what}: helm upgrade --wait ${r.helmMs} ms; Jobs created during the rollout ${during.length} (of ${probes.length}); without a sidecar ${r.without.length} (${r.without.map((p) => `${p.name} ${offsets(p.createdAt, r.stopping)}`).join(', ') || 'none'}); unsigned ${r.unsigned.length}; ` +
        `webhook endpoints ready ${Math.min(...serving)} to ${Math.max(...serving)} (${serving.length} samples); old replicas told to stop at +${r.stopping.map((t) => `${t.after - startedAt}..${t.by - startedAt}`).join(' ms, +')} ms`,
    );
    return r;
  };

  // The upgrade, then a rollout of this release by itself (the next upgrade's
  // shape: both sides stop as this release stops), with the Jobs still in flight.
  const upgrade = await rollout(`upgrade ${PREVIOUS} -> ${VERSION}`, ['upgrade', RELEASE_NAME, join(REPO_ROOT, 'charts/jobharvest'), '-n', NAMESPACE, '--wait', '--timeout', '5m', ...values]);
  const upgradeStarted = upgrade.startedAt;
  const upgradeEnded = upgrade.endedAt;
  const dep = await webhookDeployment();
  expect(dep.spec?.template.spec?.containers[0]?.image).toBe(`jobharvest:${VERSION}`);
  expect(jobharvestImageName()).toBe(`docker.io/library/jobharvest:${VERSION}`);
  expect((await deploymentImages()).map(([, image]) => image)).toEqual([`jobharvest:${VERSION}`, `jobharvest:${VERSION}`]);
  const restart = await rollout(`rollout of ${VERSION} to itself`, ['upgrade', RELEASE_NAME, join(REPO_ROOT, 'charts/jobharvest'), '-n', NAMESPACE, '--wait', '--timeout', '5m', ...values, '--set-string', 'webhook.podAnnotations.rolled=again']);

  // The Jobs in flight finish, their sidecars (the previous release's) drain,
  // and this release's harvester records each.
  const key = keyFromText(
    Buffer.from((await core.readNamespacedSecret({ name: `${RELEASE_NAME}-signing`, namespace: NAMESPACE })).data!.key!, 'base64').toString('utf8'),
  );
  const finished = await waitFor(
    'a delivery record on every Job in flight',
    async () => {
      const jobs = await Promise.all(inFlight.map((name) => batch.readNamespacedJob({ name, namespace: ns })));
      return jobs.every((j) => j.metadata?.annotations?.[DELIVERY_ANNOTATION] !== undefined) ? jobs : undefined;
    },
    { timeoutMs: 5 * 60_000, intervalMs: 1000 },
  );

  // What reached the log server: each line once.
  const perJob: Array<{ job: string; written: number; received: number; distinct: number }> = [];
  for (const name of inFlight) {
    const { total, distinct } = await vl.countWithDistinct(`${exact('namespace', ns)} ${exact('job', name)}`, '_msg');
    perJob.push({ job: name, written: LINES, received: total, distinct });
  }
  const written = perJob.reduce((s, j) => s + j.written, 0);
  const received = perJob.reduce((s, j) => s + j.received, 0);
  const duplicated = perJob.reduce((s, j) => s + (j.received - j.distinct), 0);
  const rows = await vl.query(`${exact('namespace', ns)} | fields _msg, job`, 100_000);
  const expected = new Set(inFlight.flatMap((name) => Array.from({ length: LINES }, (_, i) => `${name} line ${i + 1}`)));
  const got = new Set(rows.map((r) => r._msg));
  const missing = [...expected].filter((l) => !got.has(l));

  const records = finished.map((j: V1Job) => ({ job: j.metadata!.name!, signedAnnotation: j.metadata!.annotations![DELIVERY_ANNOTATION]!, record: deliveryRecordOf(j, key) }));
  console.log(
    [
      `upgrade ${PREVIOUS} -> ${VERSION} with Jobs in flight:`,
      `  Jobs in flight: ${IN_FLIGHT} (${LINES} lines each, sidecar of ${PREVIOUS})`,
      ...[upgrade, restart].map(
        (r) =>
          `  ${r.what}: Jobs created during the rollout ${r.during.length}, admitted without a sidecar ${r.without.length}, unsigned ${r.unsigned.length}; helm upgrade --wait ${r.helmMs} ms; webhook endpoints ready ${Math.min(...r.serving)} to ${Math.max(...r.serving)}`,
      ),
      `  lines written ${written}, received ${received}, duplicated ${duplicated}, missing ${missing.length}`,
      `  delivery records: ${records.map((r) => `${r.job} ${JSON.stringify(r.record)}`).join('; ')}`,
    ].join('\n'),
  );

  for (const r of [upgrade, restart]) {
    expect(r.during.length, r.what).toBeGreaterThan(100);
    expect(r.stopping.length, `${r.what}: old replicas stopped`).toBe(2);
    expect(Math.min(...r.serving), `${r.what}: webhook replicas ready at every sample`).toBeGreaterThanOrEqual(2);
  }
  // From this release on, no Job gets past a rollout without the sidecar.
  expect(restart.without.map((p) => p.name), `${restart.what}: Jobs admitted without the sidecar`).toEqual([]);
  expect(restart.unsigned.map((p) => p.name), `${restart.what}: Jobs admitted unsigned`).toEqual([]);
  // The previous release's replicas close their port at SIGTERM, before the
  // API server's endpoints drop them (its pods cannot be given this release's
  // shutdown delay): only a Job created in that moment, within a second of an
  // old replica told to stop, may miss the sidecar.
  for (const p of upgrade.without) {
    expect(upgrade.stopping.some((t) => p.createdAt >= t.after - PROBE_EVERY_MS && p.createdAt <= t.by + 1000), `${p.name} created ${offsets(p.createdAt, upgrade.stopping)}`).toBe(true);
  }
  expect(upgrade.unsigned.map((p) => p.name)).toEqual(upgrade.without.map((p) => p.name));
  expect(missing.slice(0, 10), 'lines written but not received').toEqual([]);
  expect({ received, duplicated }).toEqual({ received: written, duplicated: 0 });
  // They spanned the upgrade: started under the previous release, finished
  // (and so were recorded) under this one's harvester.
  for (const j of finished) {
    const complete = j.status?.conditions?.find((c) => c.type === 'Complete' && c.status === 'True');
    expect(complete, `${j.metadata!.name} completed`).toBeDefined();
    expect(Date.parse(String(j.status?.startTime))).toBeLessThan(upgradeStarted);
    expect(Date.parse(String(complete!.lastTransitionTime))).toBeGreaterThan(upgradeEnded);
  }
  for (const r of records) {
    expect(r.signedAnnotation, `${r.job}: the record is signed`).toMatch(/"sig":"v2\./);
    expect(r.record, `${r.job}: the record verifies with the release's signing key`).toBeDefined();
    expect(r.record, r.job).toMatchObject({ sink: 'loki', pods: 1, shipped: LINES, lost: 0, unaccounted: 0 });
    expect(r.record?.harvested ?? 0, `${r.job}: the sidecar shipped it all, nothing was harvested`).toBe(0);
  }
}
