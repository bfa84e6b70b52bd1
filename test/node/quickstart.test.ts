/**
 * The README's quick start, run as written on the real node: every command of
 * its "Quick start on a cluster" section, read from README.md, in bash and in
 * order, with the kubectl and Helm built here, `kubectl-jobharvest` from
 * dist/ and Podman's `docker` on PATH. `docker build` builds the Dockerfile
 * as written, from stand-ins of its two base images (test/harness/image/)
 * served by a local registry under their names; `docker push` and `helm
 * push` push to that registry as registry.example.com (a name the commands'
 * own mount namespace resolves, over TLS with a CA of the test's); the
 * node's containerd pulls the image from it through a hosts.toml, and step 1
 * installs the chart from it (`oci://`). The README's log server variable
 * names VictoriaLogs (Loki push API) on the node's veth, which the pods reach
 * through the veth and the plugin of step 6 from the machine.
 *
 * The webhook runs in cluster, from the chart, as the README installs it. The
 * API server lives in the machine's root network namespace and would call the
 * webhook Service by its ClusterIP, which has no route here but the default
 * one, off the machine: `--enable-aggregator-routing` makes it call the
 * webhook pod's IP instead, which the node's harness routes through the veth.
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import type { V1Job, V1MutatingWebhookConfigurationList, V1Pod, V1PodList } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../harness/chart/dockerfile.ts';
import { startCluster, type Cluster } from '../harness/cluster/harness.ts';
import { builderEnv, inNameNamespace, nameRegistry, pushStandIns, randomLoopback, startRegistry, type LocalRegistry, type RegistryName } from '../harness/image/registry.ts';
import { buildStandIns } from '../harness/image/standins.ts';
import { BUSYBOX_IMAGE } from '../harness/node/images.ts';
import { NODE_BIN, startNode, type RealNode } from '../harness/node/node.ts';
import { exact, VictoriaLogs } from '../harness/servers/victorialogs.ts';
import { asFolderInstall, containerdName, parseQuickStart, readmeText, runInBash, type CommandRun } from './quickstart-readme.ts';
import { CHART_CONTROLLERS, describeRealNode } from './support.ts';

const run = promisify(execFile);

/** Lines the README's Job writes, and that step 6 promises to print. */
const LINES = ['line 1', 'line 2', 'line 3'];

describe('the README quick start, as the test reads it', () => {
  it('has the image block, the log server settings and the commands of steps 1 to 6', () => {
    const qs = parseQuickStart(readmeText());
    expect(qs.image).toBe('registry.example.com/jobharvest:0.2.0');
    expect(qs.settings.map((s) => s.name)).toContain('LOG_ENDPOINT');
    const install = qs.commands.find((c) => c.startsWith('helm install '));
    expect(install).toMatch(/ oci:\/\/registry\.example\.com\/charts\/jobharvest --version 0\.2\.0 /);
    // The folder's install is the same but for the chart's reference.
    expect(qs.folderInstall).toBe(asFolderInstall(install!, 'charts/jobharvest'));
    expect(qs.commands.slice(0, 2)).toEqual(['helm package charts/jobharvest', 'helm push jobharvest-0.2.0.tgz oci://registry.example.com/charts']);
    expect(qs.commands.find((c) => c.startsWith('kubectl jobharvest logs '))).toBeDefined();
  });
});

describeRealNode('the README quick start on the real node', () => {
  let cluster: Cluster | undefined;
  let node: RealNode | undefined;
  let vl: VictoriaLogs | undefined;
  let home: string | undefined;
  let registry: LocalRegistry | undefined;
  let regName: RegistryName | undefined;
  let failed = false;

  beforeAll(async () => {
    cluster = await startCluster({ controllers: CHART_CONTROLLERS, apiServerFlags: ['--enable-aggregator-routing=true'] });
    node = await startNode({ cluster });
    vl = await VictoriaLogs.start();
    home = await mkdtemp(join(tmpdir(), 'jobharvest-quickstart-'));
    // The reader's registry: the base images' stand-ins under their names, for
    // the build; registry.example.com for the pushes, the chart and the node.
    const ip = randomLoopback();
    registry = await startRegistry(join(home, 'registry'), { dnsNames: [REGISTRY], ips: [ip, node.hostIp] });
    regName = await nameRegistry(home, REGISTRY, registry, ip);
  }, 20 * 60_000);
  afterAll(async () => {
    await node?.stop({ failed });
    await cluster?.stop({ failed });
    await vl?.dispose();
    await regName?.close();
    await registry?.stop();
    // podman leaves its storage's overlay folder bind-mounted.
    if (home !== undefined) await run('sh', ['-c', 'grep -o " $0[^ ]*" /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l', home]).catch(() => undefined);
    if (home !== undefined) await rm(home, { recursive: true, force: true });
    await rm(join(REPO_ROOT, `jobharvest-${CHART_VERSION}.tgz`), { force: true });
  });

  it('runs every command of the README quick start and gets every output it promises', async () => {
    try {
      await runQuickStart(cluster!, node!, vl!, home!, registry!, regName!);
    } catch (err) {
      failed = true;
      throw err;
    }
  }, 12 * 60_000);
});

const REGISTRY = 'registry.example.com';
const CHART_VERSION = '0.2.0';

async function runQuickStart(cluster: Cluster, node: RealNode, vl: VictoriaLogs, home: string, registry: LocalRegistry, regName: RegistryName): Promise<void> {
  const qs = parseQuickStart(readmeText());

  // The Dockerfile's base images, stood in for under their names.
  const t = Date.now();
  const standIns = await buildStandIns();
  const builder = await builderEnv(join(home, 'builder'), registry, { 'docker.io': 'docker.io', 'gcr.io': 'gcr.io' });
  await pushStandIns(standIns, registry, builder);
  console.log(`base image stand-ins built (or found in the cache) and pushed in ${Date.now() - t} ms`);

  // The node pulls registry.example.com's images from the local registry,
  // through the veth, trusting its CA. The image is not on the node before.
  const registryHost = await node.expose(registry.port);
  await mkdir(join(node.registryConfigDir, REGISTRY));
  await writeFile(
    join(node.registryConfigDir, REGISTRY, 'hosts.toml'),
    `server = "https://${REGISTRY}"\n\n[host."https://${registryHost}"]\n  capabilities = ["pull", "resolve"]\n  ca = "${registry.caFile}"\n`,
  );
  const ctr = (args: string[]) => run(join(NODE_BIN, 'ctr'), ['--address', join(node.dir, 'containerd', 'containerd.sock'), '--namespace', 'k8s.io', ...args]);
  expect((await ctr(['images', 'ls', '-q'])).stdout.split('\n')).not.toContain(containerdName(qs.image));
  // busybox, the Job's image, under the names the commands run it by.
  for (const ref of new Set(qs.commands.flatMap((c) => [...c.matchAll(/--image=(\S+)/g)].map((m) => m[1]!)))) {
    await ctr(['images', 'tag', BUSYBOX_IMAGE, containerdName(ref)]);
  }

  // The reader's log server: VictoriaLogs' Loki push API on the veth.
  const sinkHost = await node.expose(vl.port);
  const endpoint = `http://${sinkHost}/insert/loki/api/v1/push`;
  const settings = Object.fromEntries(qs.settings.map((s) => [s.name, s.name === 'LOG_ENDPOINT' ? endpoint : s.value]));
  expect(settings.LOG_ENDPOINT, 'the quick start names the log server by $LOG_ENDPOINT').toBe(endpoint);

  // kubectl, helm and the plugin, as a reader has them on PATH; HOME apart, so
  // that helm's and kubectl's caches go with the test.
  const bin = join(home, 'bin');
  await mkdir(bin);
  await symlink(join(NODE_BIN, 'kubectl'), join(bin, 'kubectl'));
  await symlink(cluster.helmPath, join(bin, 'helm'));
  await symlink(join(REPO_ROOT, 'dist', 'kubectl-jobharvest'), join(bin, 'kubectl-jobharvest'));
  const env: NodeJS.ProcessEnv = {
    ...builder.env,
    ...settings,
    PATH: `${bin}:${builder.bin}:${dirname(process.execPath)}:${process.env.PATH ?? '/usr/bin:/bin'}`,
    HOME: home,
    KUBECONFIG: cluster.kubeconfigPath,
  };

  const create = qs.commands.map((c) => /^kubectl -n (\S+) create job (\S+) /.exec(c)).find((m) => m !== null);
  expect(create, 'the quick start creates a Job with `kubectl -n NS create job NAME`').toBeDefined();
  const [, namespace, job] = create!;
  const promisedTtl = /prints `(\d+)`/.exec(qs.text)?.[1];
  expect(promisedTtl, 'the quick start says what the TTL command prints').toBeDefined();
  const ttlSeconds = Number(promisedTtl);

  const kubectlJson = async <T>(args: string[]): Promise<T> => JSON.parse((await run(join(NODE_BIN, 'kubectl'), [...args, '-o', 'json'], { env, maxBuffer: 1 << 24 })).stdout) as T;
  const runs: CommandRun[] = [];
  let completedAt: number | undefined;
  let jobPod: V1Pod | undefined;
  const started = Date.now();
  for (const command of [...qs.imageCommands, ...qs.commands]) {
    const result = await runInBash(command, { cwd: REPO_ROOT, env, timeoutMs: 10 * 60_000, argv: (c) => inNameNamespace(regName.hostsFile, c) });
    runs.push(result);
    console.log(`$ ${command}\n  exit ${result.code} after ${result.endedMs - result.startedMs} ms\n${indent(result.stdout)}${result.code === 0 ? '' : indent(result.stderr)}`);
    expect(result.code, `\`${command}\` failed:\n${result.stderr}`).toBe(0);
    // Step 4, checked at once: a Job the webhook did not reach has no TTL,
    // and every later step would fail further from the cause.
    if (command.includes('ttlSecondsAfterFinished')) expect(result.stdout, 'the TTL the webhook set').toBe(`${ttlSeconds}\n`);
    if (command.includes('--for=condition=complete')) {
      // The TTL clock starts at the Complete condition's transition, which
      // only the API has: read it now, before the TTL deletes the Job.
      const done = await kubectlJson<V1Job>(['get', 'job', job!, '-n', namespace!]);
      completedAt = Date.parse(String(done.status?.conditions?.find((c) => c.type === 'Complete')?.lastTransitionTime));
      jobPod = (await kubectlJson<V1PodList>(['get', 'pods', '-n', namespace!, '-l', `batch.kubernetes.io/job-name=${job!}`])).items[0];
    }
  }
  console.log(`quick start: ${qs.imageCommands.length + qs.commands.length} commands in ${Math.round((Date.now() - started) / 1000)} s`);

  // The image the node runs is the one `docker push` pushed, pulled by
  // containerd from the registry; the chart came from the registry too.
  const skopeo = async (args: string[]) => (await run('skopeo', args, { env: builder.env, maxBuffer: 1 << 24 })).stdout.trim();
  const pushed = await skopeo(['inspect', '--format', '{{.Digest}}', `docker://${registry.address}/jobharvest:${CHART_VERSION}`]);
  expect(pushed).toMatch(/^sha256:[0-9a-f]{64}$/);
  const onNode = (await ctr(['images', 'ls', `name==${containerdName(qs.image)}`])).stdout;
  expect(onNode).toContain(pushed);
  const chartTags = JSON.parse(await skopeo(['list-tags', `docker://${registry.address}/charts/jobharvest`])) as { Tags: string[] };
  expect(chartTags.Tags).toEqual([CHART_VERSION]);
  const release = JSON.parse((await run(cluster.helmPath, ['list', '-n', 'jobharvest', '-o', 'json'], { env })).stdout) as Array<{ chart: string; app_version: string }>;
  expect(release.map((r) => [r.chart, r.app_version])).toEqual([[`jobharvest-${CHART_VERSION}`, CHART_VERSION]]);

  const find = (what: string, test: (c: string) => boolean): CommandRun => {
    const found = runs.find((r) => test(r.command));
    if (found === undefined) throw new Error(`the quick start has no command that ${what}`);
    return found;
  };

  // Step 1: the chart's webhook serves in cluster, on the node, from the
  // README's image, behind a Service reference (no URL).
  const webhookPods = (await kubectlJson<V1PodList>(['get', 'pods', '-n', 'jobharvest', '-l', 'app.kubernetes.io/name=jobharvest'])).items;
  expect(webhookPods.length).toBeGreaterThan(0);
  for (const pod of webhookPods) {
    expect({
      node: pod.spec?.nodeName,
      image: pod.spec?.containers[0]?.image,
      imageID: pod.status?.containerStatuses?.[0]?.imageID,
      pullPolicy: pod.spec?.containers[0]?.imagePullPolicy,
      ready: pod.status?.conditions?.find((c) => c.type === 'Ready')?.status,
    }).toEqual({
      node: node.name,
      image: qs.image,
      imageID: `${REGISTRY}/jobharvest@${pushed}`,
      pullPolicy: 'IfNotPresent',
      ready: 'True',
    });
  }
  const webhooks = (await kubectlJson<V1MutatingWebhookConfigurationList>(['get', 'mutatingwebhookconfigurations'])).items.flatMap((c) => c.webhooks ?? []);
  expect(webhooks.length).toBeGreaterThan(0);
  for (const w of webhooks) expect({ url: w.clientConfig.url, service: w.clientConfig.service?.namespace }).toEqual({ url: undefined, service: 'jobharvest' });

  // Step 4: the sidecar it injected, from the same image, and the TTL it set.
  expect(jobPod, 'the Job pod was read before the TTL deleted it').toBeDefined();
  expect(jobPod!.spec?.initContainers?.map((c) => ({ name: c.name, image: c.image, restartPolicy: c.restartPolicy }))).toEqual([
    { name: 'jobharvest', image: qs.image, restartPolicy: 'Always' },
  ]);
  expect(jobPod!.status?.initContainerStatuses?.map((c) => c.imageID)).toEqual([`${REGISTRY}/jobharvest@${pushed}`]);
  expect(jobPod!.spec?.nodeName).toBe(node.name);
  expect(find('prints the TTL', (c) => c.includes('ttlSecondsAfterFinished')).stdout).toBe(`${ttlSeconds}\n`);
  // Short enough for a reader to watch, and for this test.
  expect(ttlSeconds).toBe(60);

  // Step 5: the three lines at the log server, with the Job's metadata.
  const rows = await vl.query(`${exact('namespace', namespace!)} ${exact('job', job!)} | sort by (_time) | fields _msg, container, node`);
  expect(rows).toEqual(LINES.map((line) => ({ _msg: line, container: job!, node: node.name })));

  // Step 5: the sidecar's last line sums up what it shipped.
  const sidecarLog = find('prints the sidecar log', (c) => / logs job\/\S+ -c jobharvest/.test(c)).stdout.trim().split('\n');
  const summary = JSON.parse(sidecarLog.at(-1)!) as Record<string, unknown>;
  expect(summary).toMatchObject({ msg: 'summary', outcome: 'complete', lines_read: LINES.length, lines_shipped: LINES.length, lines_unsent: 0, lines_dead_lettered: 0 });

  // Step 5: the Job is gone, and not before its TTL ran out after completion
  // (lastTransitionTime has whole seconds, hence the second of slack).
  const deleted = find('waits for the deletion', (c) => c.includes('--for=delete'));
  expect(completedAt, 'the Complete condition was read').toBeDefined();
  const deletedAfterMs = deleted.endedMs - completedAt!;
  console.log(`Job deleted ${deletedAfterMs} ms after its Complete condition (TTL ${ttlSeconds} s)`);
  expect(deletedAfterMs).toBeGreaterThanOrEqual(ttlSeconds * 1000 - 1000);
  expect(deletedAfterMs).toBeLessThan((ttlSeconds + 30) * 1000);
  await expect(run(join(NODE_BIN, 'kubectl'), ['get', 'job', job!, '-n', namespace!], { env })).rejects.toThrow(/NotFound/);

  // Step 6: the plugin prints the lines of the Job that is gone.
  expect(find('reads the logs back', (c) => c.startsWith('kubectl jobharvest logs ')).stdout).toBe(LINES.map((l) => `${l}\n`).join(''));
}

function indent(text: string): string {
  return text === '' ? '' : `${text.replace(/\n$/, '').replace(/^/gm, '  | ')}\n`;
}
