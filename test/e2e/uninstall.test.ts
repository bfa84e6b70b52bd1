/**
 * `helm uninstall` leaves a cluster that works (issue 33, section 4), on the
 * real control plane: the chart installed by the pinned Helm, the webhook and
 * the harvester run as the chart renders them (arguments, configuration,
 * ServiceAccounts through TokenRequest tokens) as processes here, since the
 * control plane has no Deployment controller; the test kubelet runs the Jobs'
 * pods and the pre-delete hook's pod, whose image is this checkout's dist/.
 *
 * Before the uninstall: one Job finished and recorded, one held by the
 * harvester (its sidecar could not reach an approved destination that is
 * down), one running. `helm uninstall` runs the hook, then deletes the
 * release. Afterwards: the webhook configuration is gone and a Job created at
 * once is admitted untouched; no hold and no finalizer of jobharvest's is on
 * any Job; each of the three is deleted by its own TTL; the runtime objects
 * (log-reader RoleBindings in every namespace, the certificate and signing
 * Secrets, the harvester's Lease) are gone, and so are the hook's own objects.
 */
import { CoordinationV1Api, RbacAuthorizationV1Api, Watch, type V1Job, type V1Deployment } from '@kubernetes/client-node';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HOLD_ANNOTATION, INJECTED_LABEL, STATUS_ANNOTATION, DELIVERY_ANNOTATION } from '../../src/contract/harvest.ts';
import { keyFromText, type SigningKey } from '../../src/contract/signature.ts';
import { holdOf } from '../../harvester/hold.ts';
import { REPO_ROOT } from '../harness/chart/dockerfile.ts';
import { CHART_DIR, one, render, runHelm, withValues, type K8sObject } from '../harness/chart/helm.ts';
import { useCluster, waitFor } from '../harness/cluster/client.ts';
import { writeKubeconfig } from '../harness/cluster/kubeconfig.ts';
import { TestKubelet } from '../harness/kubelet/kubelet.ts';
import { shellJob } from '../harness/kubelet/stack.ts';
import { CountingHttpReceiver } from '../support/counting-receiver.ts';
import { freePort } from '../support/ports.ts';
import { startProgram, type ProgramProcess } from '../support/process.ts';

const cluster = useCluster();
const rbac = cluster.kc.makeApiClient(RbacAuthorizationV1Api);
const coordination = cluster.kc.makeApiClient(CoordinationV1Api);
const helm = cluster.info.helmPath;
const NODE = join(REPO_ROOT, 'node_modules/.bin/node');

const sfx = randomBytes(3).toString('hex');
const PREFIX = `uninst-${sfx}-`;
const RELEASE = `un${sfx}`;
const FULLNAME = `${RELEASE}-jobharvest`;
const RELEASE_NS = `${PREFIX}jh`;
const WORK_NS = `${PREFIX}work`;
/** Restricted: api mode, so the webhook binds the sidecars' log reader here too. */
const API_NS = `${PREFIX}api`;
const READER = `${FULLNAME}-log-reader`;

/** Each Job's own TTL, as the user set it on the Job. */
const TTL = { finished: 45, held: 5, running: 5 } as const;
const LINES = { finished: 50, held: 20, running: 60 } as const;

let live: CountingHttpReceiver;
let deadUrl: string;
let kubelet: TestKubelet | undefined;
const programs: ProgramProcess[] = [];
let key: SigningKey;
let dir: string;
const cleanup: Array<() => Promise<unknown>> = [];

const values = (): object => ({
  // The chart's own sink is approved for in-cluster and private addresses only, never loopback:
  // the Jobs here name their endpoint themselves (jobharvest.io/endpoint).
  sink: { type: 'http', endpoint: 'http://logs.example.invalid/' },
  harvester: {
    leaseSeconds: 3,
    // Approved, loopback allowed, and down: the held Job's sidecar cannot ship there, and the harvester holds the Job while it retries.
    destinations: [{ name: 'down', sink: 'http', endpoint: deadUrl, allow: ['loopback'] }],
  },
  uninstall: { deadlineSeconds: 60 },
});

async function helmRun(args: string[]): Promise<{ code: number; stdout: string; stderr: string; ms: number }> {
  const t = Date.now();
  const r = await runHelm(helm, [...args, '--kubeconfig', cluster.info.kubeconfigPath]);
  return { ...r, ms: Date.now() - t };
}

async function tokenKubeconfig(sa: string): Promise<string> {
  const token = await cluster.core.createNamespacedServiceAccountToken({ name: sa, namespace: RELEASE_NS, body: { spec: { audiences: [], expirationSeconds: 3600 } } });
  const file = join(dir, `${sa}.kubeconfig`);
  await writeKubeconfig(file, { server: cluster.info.server, caPem: cluster.info.caPem, user: `system:serviceaccount:${RELEASE_NS}:${sa}`, token: token.status!.token! });
  return file;
}

const logOf = (p: ProgramProcess): string => readFileSync(p.logPath, 'utf8');

/** The webhook and the harvester with the arguments the chart rendered, on the chart's ServiceAccounts. */
async function startPrograms(objects: K8sObject[]): Promise<void> {
  const port = await freePort();
  // No Service network here: the API server calls the webhook process at a loopback URL.
  const mwc = await cluster.admission.readMutatingWebhookConfiguration({ name: FULLNAME });
  for (const w of mwc.webhooks ?? []) w.clientConfig = { url: `https://127.0.0.1:${port}/mutate` };
  await cluster.admission.replaceMutatingWebhookConfiguration({ name: FULLNAME, body: mwc });

  const cm = one<{ data: Record<string, string> }>(objects, 'ConfigMap', FULLNAME);
  const configPath = join(dir, 'config.yaml');
  await writeFile(configPath, cm.data['config.yaml']!);
  const webhookPod = one<V1Deployment>(objects, 'Deployment', FULLNAME).spec!.template.spec!;
  const [script, ...args] = webhookPod.containers[0]!.args!;
  expect(script).toBe('/app/jobharvest.mjs');
  const webhookArgs = args.map((a) =>
    a
      .replace('$(POD_NAMESPACE)', RELEASE_NS)
      .replace(/^--config=.*$/, `--config=${configPath}`)
      .replace(/^--host=.*$/, '--host=127.0.0.1')
      .replace(/^--port=.*$/, `--port=${port}`),
  );
  const webhook = startProgram(NODE, [join(REPO_ROOT, 'dist/jobharvest.mjs'), ...webhookArgs, '--extra-ips=127.0.0.1', `--kubeconfig=${await tokenKubeconfig(webhookPod.serviceAccountName!)}`], {
    logPath: join(cluster.info.logsDir, `uninstall-webhook-${sfx}.log`),
    env: { POD_NAMESPACE: RELEASE_NS },
  });
  programs.push(webhook);
  await waitFor('the webhook to listen', () => (/listening/.test(logOf(webhook)) ? true : undefined), { timeoutMs: 60_000, abortIf: () => (webhook.exited() ? `it exited:\n${logOf(webhook)}` : undefined) });

  // The signing key the webhook created, as the harvester's pod mounts it.
  const signing = await waitFor('the signing Secret', () => cluster.core.readNamespacedSecret({ name: `${FULLNAME}-signing`, namespace: RELEASE_NS }), { timeoutMs: 30_000 });
  const keyBytes = Buffer.from(signing.data!.key!, 'base64');
  key = keyFromText(keyBytes);
  await writeFile(join(dir, 'key'), keyBytes);
  const hcm = one<{ data: Record<string, string> }>(objects, 'ConfigMap', `${FULLNAME}-harvester`);
  await writeFile(join(dir, 'destinations.json'), hcm.data['destinations.json']!);
  const harvesterPod = one<V1Deployment>(objects, 'Deployment', `${FULLNAME}-harvester`).spec!.template.spec!;
  const [hscript, ...hargs] = harvesterPod.containers[0]!.args!;
  expect(hscript).toBe('/app/harvester.mjs');
  const metricsPort = await freePort();
  const harvesterArgs = hargs.map((a) =>
    a
      .replace(/^--signing-key-file=.*$/, `--signing-key-file=${join(dir, 'key')}`)
      // The pod's metrics port, at a free one on this shared machine.
      .replace(/^--metrics-port=.*$/, `--metrics-port=${metricsPort}`)
      .replace(/^--destinations-file=.*$/, `--destinations-file=${join(dir, 'destinations.json')}`)
      // The webhook's configuration, which the chart mounts into the harvester's pod too.
      .replace(/^--config=.*$/, `--config=${configPath}`),
  );
  const harvester = startProgram(NODE, [join(REPO_ROOT, 'dist/harvester.mjs'), ...harvesterArgs, `--kubeconfig=${await tokenKubeconfig(harvesterPod.serviceAccountName!)}`], {
    logPath: join(cluster.info.logsDir, `uninstall-harvester-${sfx}.log`),
    env: { POD_NAMESPACE: RELEASE_NS, POD_NAME: `${FULLNAME}-harvester-0` },
  });
  programs.push(harvester);
  await waitFor('the harvester leading', () => (logOf(harvester).includes('"msg":"started leading"') ? true : undefined), {
    timeoutMs: 60_000,
    abortIf: () => (harvester.exited() ? `it exited:\n${logOf(harvester)}` : undefined),
  });
}

function job(name: keyof typeof LINES, script: string, annotations: Record<string, string> = {}): V1Job {
  const j = shellJob(name, { script, terminationGracePeriodSeconds: 30 });
  j.metadata!.annotations = { 'jobharvest.io/ttl-seconds-after-finished': String(TTL[name]), 'jobharvest.io/endpoint': live.url, ...annotations };
  return j;
}

const lines = (tag: string, from: number, to: number): string => `i=${from}; while [ $i -le ${to} ]; do echo "${tag} line $i"; i=$((i+1)); done`;
const finishedAt = (j: V1Job): number | undefined => {
  const c = j.status?.conditions?.find((x) => (x.type === 'Complete' || x.type === 'Failed') && x.status === 'True');
  return c?.lastTransitionTime ? new Date(c.lastTransitionTime).getTime() : undefined;
};
const readJob = (name: string) => cluster.batch.readNamespacedJob({ name, namespace: WORK_NS });
async function absent(read: () => Promise<unknown>): Promise<boolean> {
  try {
    await read();
    return false;
  } catch (err) {
    if ((err as { code?: number }).code === 404) return true;
    throw err;
  }
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'jobharvest-uninstall-'));
  cleanup.push(() => rm(dir, { recursive: true, force: true }));
  live = await CountingHttpReceiver.start();
  cleanup.push(() => live.close());
  deadUrl = `http://127.0.0.1:${await freePort()}/`;
  for (const [name, annotations, labels] of [
    [RELEASE_NS, {}, {}],
    [WORK_NS, { 'jobharvest.io/inject': 'enabled' }, {}],
    [API_NS, { 'jobharvest.io/inject': 'enabled' }, { 'pod-security.kubernetes.io/enforce': 'restricted' }],
  ] as const) {
    await cluster.core.createNamespace({ body: { metadata: { name, annotations, labels } } });
    cleanup.push(() => cluster.core.deleteNamespace({ name }));
  }
  kubelet = await TestKubelet.start({ cluster: cluster.info, namespaces: (ns) => ns.startsWith(PREFIX) });
  cleanup.push(() => kubelet!.stop());

  const installed = await withValues(values(), (file) => helmRun(['install', RELEASE, CHART_DIR, '--namespace', RELEASE_NS, '--values', file]));
  expect(installed.code, installed.stderr).toBe(0);
  // Should the test fail before its own uninstall, nothing of the release is left.
  cleanup.push(() => helmRun(['uninstall', RELEASE, '--namespace', RELEASE_NS, '--no-hooks']));
  cleanup.push(() => cluster.admission.deleteMutatingWebhookConfiguration({ name: FULLNAME }));
  await startPrograms(await render(helm, { release: RELEASE, namespace: RELEASE_NS, values: values() }));
}, 300_000);

afterAll(async () => {
  for (const p of programs) await p.stop();
  for (const undo of cleanup.reverse()) await undo().catch(() => undefined);
}, 120_000);

describe('helm uninstall', () => {
  it('with Jobs running, held and finished: the webhook configuration goes first, every hold is released, every Job is deleted by its own TTL, the runtime objects are gone, and the next Job is admitted untouched', async () => {
    // The API server calls the webhook once it trusts the caBundle the webhook wrote.
    await waitFor(
      'the API server to call the webhook',
      async () => {
        const j = await cluster.batch.createNamespacedJob({ namespace: WORK_NS, dryRun: 'All', body: job('finished', 'true') });
        return j.metadata?.labels?.[INJECTED_LABEL] === 'true' ? true : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );

    // Finished: shipped by its sidecar and recorded by the harvester.
    await cluster.batch.createNamespacedJob({ namespace: WORK_NS, body: job('finished', lines('finished', 1, LINES.finished)) });
    // Held: its sidecar cannot reach the approved destination, which is down.
    await cluster.batch.createNamespacedJob({ namespace: WORK_NS, body: job('held', lines('held', 1, LINES.held), { 'jobharvest.io/endpoint': deadUrl, 'jobharvest.io/drain-seconds': '2' }) });
    await waitFor('the finished Job recorded', async () => ((await readJob('finished')).metadata?.annotations?.[DELIVERY_ANNOTATION] ? true : undefined), { timeoutMs: 60_000 });
    const heldBefore = await waitFor('the held Job held', async () => {
      const j = await readJob('held');
      return holdOf(j, key) ? j : undefined;
    }, { timeoutMs: 60_000 });
    expect(holdOf(heldBefore, key)!.originalTtl).toBe(TTL.held);
    expect(heldBefore.spec!.ttlSecondsAfterFinished).toBeGreaterThan(3600);
    // Held past its own TTL: only the hold keeps it.
    const heldEnd = finishedAt(heldBefore)!;
    await new Promise((r) => setTimeout(r, Math.max(0, heldEnd + (TTL.held + 3) * 1000 - Date.now())));
    expect(holdOf(await readJob('held'), key)).toBeDefined();
    // Running: half its lines out, the rest after the uninstall.
    await cluster.batch.createNamespacedJob({ namespace: WORK_NS, body: job('running', `${lines('running', 1, LINES.running / 2)}; sleep 40; ${lines('running', LINES.running / 2 + 1, LINES.running)}`) });
    await live.waitForLines(LINES.finished + LINES.running / 2, 60_000);
    for (const name of ['finished', 'held', 'running']) expect((await readJob(name)).metadata?.labels?.[INJECTED_LABEL], name).toBe('true');

    // What the programs made at run time, there before.
    for (const ns of [WORK_NS, API_NS]) await waitFor(`the harvester's log reader in ${ns}`, () => rbac.readNamespacedRoleBinding({ name: `${READER}-webhook`, namespace: ns }), { timeoutMs: 30_000 });
    await waitFor(`the sidecars' log reader in ${API_NS}`, () => rbac.readNamespacedRoleBinding({ name: READER, namespace: API_NS }), { timeoutMs: 30_000 });
    await cluster.core.readNamespacedSecret({ name: `${FULLNAME}-tls`, namespace: RELEASE_NS });
    await coordination.readNamespacedLease({ name: `${FULLNAME}-harvester`, namespace: RELEASE_NS });

    // Every state of the three Jobs from here on, the last before each deletion included. The server
    // ends each watch within 20 s (client-node drops a watch silent for 30 s); it resumes from the
    // last resourceVersion seen, as a reflector does.
    const seen = new Map<string, Array<{ type: string; at: number; job: V1Job }>>();
    let lastRv: string | undefined;
    let watching = true;
    let current: { abort(): void } | undefined;
    const follow = async (): Promise<void> => {
      current = await new Watch(cluster.kc).watch(
        `/apis/batch/v1/namespaces/${WORK_NS}/jobs`,
        { timeoutSeconds: 20, ...(lastRv ? { resourceVersion: lastRv } : {}) },
        (type: string, obj: V1Job) => {
          lastRv = obj.metadata?.resourceVersion ?? lastRv;
          const name = obj.metadata!.name!;
          // A resumed watch starts with no replay, so nothing is seen twice.
          seen.set(name, [...(seen.get(name) ?? []), { type, at: Date.now(), job: obj }]);
        },
        () => {
          if (watching) void follow();
        },
      );
    };
    await follow();
    cleanup.push(async () => {
      watching = false;
      current?.abort();
    });

    const uninstalled = await helmRun(['uninstall', RELEASE, '--namespace', RELEASE_NS, '--timeout', '3m']);
    const uninstalledAt = Date.now();
    console.log(`helm uninstall: exit ${uninstalled.code} in ${uninstalled.ms} ms\n${uninstalled.stdout}${uninstalled.stderr}`);
    expect(uninstalled.code, uninstalled.stderr).toBe(0);

    // A Job created right after is admitted untouched: no webhook configuration calls anything.
    const after = await cluster.batch.createNamespacedJob({ namespace: WORK_NS, body: { metadata: { name: 'after' }, spec: { suspend: true, template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: 'busybox:1.36', command: ['true'] }] } } } } });
    expect(after.spec!.template.spec!.initContainers ?? []).toEqual([]);
    expect(after.spec!.ttlSecondsAfterFinished).toBeUndefined();
    expect(after.metadata!.labels?.[INJECTED_LABEL]).toBeUndefined();
    expect(Object.keys(after.metadata!.annotations ?? {}).filter((k) => k.startsWith('jobharvest.io/'))).toEqual([]);
    expect(await absent(() => cluster.admission.readMutatingWebhookConfiguration({ name: FULLNAME }))).toBe(true);
    // The hook ran on the test kubelet as the chart renders it, and did each step on its own RBAC, with nothing refused.
    const hookPods = kubelet!.allWorkers().filter((w) => w.namespace === RELEASE_NS && w.labels['app.kubernetes.io/component'] === 'uninstall');
    expect(hookPods).toHaveLength(1);
    const hookLog = hookPods[0]!.output('uninstall');
    const done = hookLog.map((l) => (l.startsWith('{') ? (JSON.parse(l) as Record<string, unknown>) : {})).find((l) => l.msg === 'uninstall done');
    console.log(`the hook's summary: ${JSON.stringify(done)}`);
    expect(done, hookLog.join('\n')).toMatchObject({
      webhookConfiguration: 'deleted',
      // <fullname> and <fullname>-harvester; the webhook's two Secret RoleBindings and the harvester's Lease RoleBinding.
      bindingsRevoked: 5,
      holdsReleased: 1,
      holdsNotOurs: 0,
      // The harvester's in both opted-in namespaces, the sidecars' in the api-mode one.
      logReaderBindingsDeleted: 3,
      secretsDeleted: 2,
      leasesDeleted: 1,
      failures: 0,
    });
    expect(hookLog.join('\n')).not.toMatch(/forbidden/i);
    // The webhook process here still runs (on a cluster, Helm is deleting its pods): the API server just no longer calls it.
    expect(programs[0]!.exited()).toBe(false);

    // The running Job was running through the uninstall, and still is.
    const running = await readJob('running');
    expect(finishedAt(running)).toBeUndefined();
    expect(running.status?.active).toBe(1);

    // The runtime objects, as docs/operations.md says: all gone, the signing Secret included (uninstall.keepSigningSecret false).
    for (const ns of [WORK_NS, API_NS]) expect(await absent(() => rbac.readNamespacedRoleBinding({ name: `${READER}-webhook`, namespace: ns })), ns).toBe(true);
    expect(await absent(() => rbac.readNamespacedRoleBinding({ name: READER, namespace: API_NS }))).toBe(true);
    for (const s of [`${FULLNAME}-tls`, `${FULLNAME}-signing`]) expect(await absent(() => cluster.core.readNamespacedSecret({ name: s, namespace: RELEASE_NS })), s).toBe(true);
    expect(await absent(() => coordination.readNamespacedLease({ name: `${FULLNAME}-harvester`, namespace: RELEASE_NS }))).toBe(true);
    // The hook's own objects went with it (hook-succeeded), and Helm deleted the rest.
    expect(await absent(() => cluster.batch.readNamespacedJob({ name: `${FULLNAME}-uninstall`, namespace: RELEASE_NS }))).toBe(true);
    expect(await absent(() => cluster.core.readNamespacedServiceAccount({ name: `${FULLNAME}-uninstall`, namespace: RELEASE_NS }))).toBe(true);
    expect(await absent(() => rbac.readClusterRole({ name: `${FULLNAME}-uninstall` }))).toBe(true);
    expect(await absent(() => rbac.readClusterRoleBinding({ name: `${FULLNAME}-harvester` }))).toBe(true);
    expect((await helmRun(['list', '--namespace', RELEASE_NS, '--short'])).stdout.trim()).toBe('');

    // Every Job is deleted by its own TTL: the held one at once (finished long before), the others when theirs runs out.
    for (const name of ['held', 'finished', 'running'] as const) {
      await waitFor(`${name} deleted`, async () => ((await absent(() => readJob(name))) ? true : undefined), { timeoutMs: 120_000, intervalMs: 500 });
    }
    // The running Job's sidecar shipped all of it after the uninstall: nothing it needs was jobharvest's.
    await live.waitForLines(LINES.finished + LINES.running, 10_000);

    const report: string[] = [];
    for (const name of ['held', 'finished', 'running'] as const) {
      const states = seen.get(name) ?? [];
      const last = states.at(-1)!;
      expect(last?.type, name).toBe('DELETED');
      const j = last.job;
      // The state it was deleted in: no hold, the user's TTL, no finalizer of jobharvest's.
      expect(j.metadata?.annotations?.[HOLD_ANNOTATION], name).toBeUndefined();
      expect(j.spec?.ttlSecondsAfterFinished, name).toBe(TTL[name]);
      expect((j.metadata?.finalizers ?? []).filter((f) => f.includes('jobharvest')), name).toEqual([]);
      expect(j.metadata?.annotations?.[STATUS_ANNOTATION], name).toBeDefined();
      // Deleted by the TTL controller (a deletionTimestamp seen first), once the TTL ran out, not before.
      const deleting = states.find((s) => s.job.metadata?.deletionTimestamp);
      expect(deleting, name).toBeDefined();
      const end = finishedAt(j)!;
      const deletedAt = new Date(deleting!.job.metadata!.deletionTimestamp!).getTime();
      expect(deletedAt, name).toBeGreaterThanOrEqual(end + TTL[name] * 1000 - 1000);
      report.push(`${name}: finished ${((end - uninstalledAt) / 1000).toFixed(1)} s from the uninstall's end, TTL ${TTL[name]} s, deletion ${((deletedAt - uninstalledAt) / 1000).toFixed(1)} s`);
    }
    // The held Job's TTL ran out long ago: the release let the TTL controller delete it at once.
    const heldGone = seen.get('held')!.find((s) => s.job.metadata?.deletionTimestamp)!;
    expect(heldGone.at).toBeLessThan(uninstalledAt + 10_000);
    // No hold was placed again after the release: the harvester's rights went before it.
    const released = seen.get('held')!.findIndex((s) => s.job.metadata?.annotations?.[HOLD_ANNOTATION] === undefined);
    expect(released).toBeGreaterThanOrEqual(0);
    expect(seen.get('held')!.slice(released).every((s) => s.job.metadata?.annotations?.[HOLD_ANNOTATION] === undefined)).toBe(true);
    console.log(report.join('\n'));
  }, 360_000);
});
