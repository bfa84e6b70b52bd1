/**
 * `kubectl jobharvest logs` after the Job is gone: a Job that fails twice and
 * then succeeds writes its lines through the real sidecar into VictoriaLogs,
 * `kubectl logs` is read while the pod exists, the TTL deletes Job and pod,
 * and then the plugin prints every line of all three runs, in order, found
 * from the namespace's annotations alone. Once through the loki sink into
 * VictoriaLogs, once through the elasticsearch sink into a real OpenSearch
 * (skipped where Java 17 and Maven are missing to build it).
 *
 * kubectl is a real binary when one is on PATH (`JOBHARVEST_KUBECTL` names
 * another); kubectl finds the plugin through PATH as for any user. Without a
 * kubectl, the plugin executable is run the way kubectl runs it: by its name
 * on PATH, with the arguments after `jobharvest`.
 */
import type { V1Job } from '@kubernetes/client-node';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useCluster, waitFor } from '../harness/cluster/client.ts';
import { followJob } from '../harness/kubelet/follow-job.ts';
import { shellJob, Stack } from '../harness/kubelet/stack.ts';
import { OpenSearch, openSearchBuildable } from '../harness/servers/opensearch.ts';
import { ensureSidecarBundle } from '../support/sidecar.ts';

const run = promisify(execFile);
const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const cluster = useCluster();
let stack: Stack;
let pluginDir: string;
let kubectl: string | undefined;
let opensearch: OpenSearch | undefined;
const TTL = 6;

async function which(cmd: string): Promise<string | undefined> {
  try {
    return (await run('sh', ['-c', `command -v ${cmd}`])).stdout.trim() || undefined;
  } catch {
    return undefined;
  }
}

beforeAll(async () => {
  ensureSidecarBundle();
  // kubectl looks plugins up on PATH by exact name; npm links the bin the same way.
  pluginDir = mkdtempSync(join(tmpdir(), 'jh-plugin-'));
  symlinkSync(join(repo, 'dist', 'kubectl-jobharvest'), join(pluginDir, 'kubectl-jobharvest'));
  // The kubectl built from the pinned Kubernetes module (npm run node:build, which
  // test:all runs before the e2e project) first, then one on PATH.
  const pinned = join(repo, 'test', 'harness', 'node', 'bin', 'kubectl');
  kubectl = process.env.JOBHARVEST_KUBECTL ?? (existsSync(pinned) ? pinned : await which('kubectl'));
  stack = await Stack.start({ info: cluster.info, name: 'lgs', kubelet: { restartBackoffMs: 300 } });
  if (openSearchBuildable()) opensearch = await OpenSearch.start();
}, 600_000);

afterAll(async () => {
  await stack?.stop();
  await opensearch?.dispose();
  rmSync(pluginDir, { force: true, recursive: true });
}, 120_000);

/** The environment a user's shell gives kubectl: their kubeconfig, and a PATH with the plugin and Node 24. */
function env(): NodeJS.ProcessEnv {
  return { ...process.env, KUBECONFIG: cluster.info.kubeconfigPath, PATH: `${pluginDir}:${dirname(process.execPath)}:${process.env.PATH}` };
}

async function kubectlRun(args: string[]): Promise<string> {
  return (await run(kubectl!, args, { env: env(), maxBuffer: 64 * 1024 * 1024 })).stdout;
}

/** `kubectl jobharvest ARGS`, through kubectl when there is one. */
async function plugin(args: string[]): Promise<{ stdout: string; via: string }> {
  if (kubectl) return { stdout: await kubectlRun(['jobharvest', ...args]), via: `${kubectl} jobharvest` };
  const { stdout } = await run('kubectl-jobharvest', args, { env: env(), maxBuffer: 64 * 1024 * 1024 });
  return { stdout, via: 'kubectl-jobharvest (no kubectl on PATH)' };
}

const lines = (s: string) => s.split('\n').slice(0, -1);
const stripTs = (l: string) => l.replace(/^\S+ /, '');
const tsNs = (l: string) => {
  const m = /^(\S+?)(?:\.(\d+))?Z /.exec(l)!;
  return BigInt(Date.parse(`${m[1]}Z`)) * 1_000_000n + BigInt((m[2] ?? '').padEnd(9, '0'));
};

/** Points an opted-in namespace at OpenSearch through the elasticsearch sink. */
async function useOpenSearch(ns: string): Promise<void> {
  const current = await stack.core.readNamespace({ name: ns });
  current.metadata!.annotations = { ...current.metadata!.annotations, 'jobharvest.io/sink': 'elasticsearch', 'jobharvest.io/endpoint': opensearch!.url };
  await stack.core.replaceNamespace({ name: ns, body: current });
  // The webhook reads namespaces from an informer: give the update time to arrive.
  await new Promise((r) => setTimeout(r, 2000));
}

async function scenario(server: 'victorialogs' | 'opensearch'): Promise<void> {
  const M = 150;
  const N = 3 * M;
  const ns = await stack.namespace(server === 'opensearch' ? 'logs-os' : 'logs', { ttlSeconds: TTL });
  if (server === 'opensearch') await useOpenSearch(ns);
  const script = `n=$(cat "$S/n" 2>/dev/null || echo 0); echo $((n+1)) > "$S/n"; i=1; while [ $i -le ${M} ]; do echo "attempt $n line $i"; i=$((i+1)); done; echo "attempt $n done" >&2; [ $n -ge 2 ] || exit 1`;
  const job: V1Job = shellJob('nightly', { script, restartPolicy: 'OnFailure', backoffLimit: 6, env: [{ name: 'S', value: '/state' }], volumes: [{ name: 'state', emptyDir: {} }], volumeMounts: [{ name: 'state', mountPath: '/state' }] });
  const stored = await stack.batch.createNamespacedJob({ namespace: ns, body: job });
  expect(JSON.parse(stored.metadata!.annotations!['jobharvest.io/status']!).sink).toBe(server === 'opensearch' ? 'elasticsearch' : 'loki');
  // followJob checks the server held every line when the Job was deleted; OpenSearch is checked after.
  const lifeP = followJob(stack, ns, 'nightly', { expected: server === 'opensearch' ? 0 : N + 3, filter: stack.filter(ns) });

  // While the pod exists: what kubectl logs shows (the latest run, and the one before it).
  await waitFor('the Job Complete', async () => {
    const j = await stack.batch.readNamespacedJob({ name: 'nightly', namespace: ns });
    return j.status?.conditions?.some((c) => c.type === 'Complete' && c.status === 'True') ? true : undefined;
  }, { timeoutMs: 120_000, intervalMs: 100 });
  let before: { current: string; previous: string; timestamps: string; via: string };
  if (kubectl) {
    before = {
      current: await kubectlRun(['logs', 'job/nightly', '-n', ns]),
      previous: await kubectlRun(['logs', 'job/nightly', '-n', ns, '--previous']),
      timestamps: await kubectlRun(['logs', 'job/nightly', '-n', ns, '--timestamps']),
      via: 'kubectl logs',
    };
  } else {
    const [pod] = (await stack.core.listNamespacedPod({ namespace: ns, labelSelector: 'batch.kubernetes.io/job-name=nightly' })).items;
    const read = (o: { previous?: boolean; timestamps?: boolean }) => stack.core.readNamespacedPodLog({ name: pod!.metadata!.name!, namespace: ns, container: 'main', ...o });
    before = { current: await read({}), previous: await read({ previous: true }), timestamps: await read({ timestamps: true }), via: 'pods/log' };
  }
  const expected = [0, 1, 2].flatMap((k) => [...Array.from({ length: M }, (_, i) => `attempt ${k} line ${i + 1}`), `attempt ${k} done`]);
  expect(lines(before.current), `${before.via} before deletion`).toEqual(expected.slice(2 * (M + 1)));
  expect(lines(before.previous)).toEqual(expected.slice(M + 1, 2 * (M + 1)));

  const life = await lifeP;
  expect(life.violations).toEqual([]);
  expect(life.jobGoneAt, 'the TTL deleted the Job').toBeDefined();
  await expect(stack.batch.readNamespacedJob({ name: 'nightly', namespace: ns })).rejects.toMatchObject({ code: 404 });

  // After deletion: the plugin, found on PATH, reading the namespace's annotations.
  const explain = await plugin(['logs', 'job/nightly', '-n', ns, '--explain']);
  expect(explain.stdout).toContain('Job: gone');
  if (server === 'opensearch') {
    expect(explain.stdout).toContain('sink: elasticsearch (namespace annotation jobharvest.io/sink)');
    expect(explain.stdout).toMatch(/query: elasticsearch at http:\/\/127\.0\.0\.1:\d+ \(derived from the elasticsearch sink endpoint\), index jobharvest/);
    await opensearch!.refresh('jobharvest');
  } else {
    expect(explain.stdout).toContain('sink: loki (namespace annotation jobharvest.io/sink)');
    expect(explain.stdout).toMatch(/query: victorialogs at http:\/\/127\.0\.0\.1:\d+ \(derived from the loki sink endpoint/);
  }

  const all = await plugin(['logs', 'job/nightly', '-n', ns]);
  console.log(`${server}, via ${all.via}: ${lines(all.stdout).length} lines; kubectl's side read with ${before.via}`);
  expect(lines(all.stdout)).toEqual(expected);
  // The latest run and --previous are what kubectl logs printed, line for line.
  expect(lines(all.stdout).slice(2 * (M + 1))).toEqual(lines(before.current));
  expect(lines((await plugin(['logs', 'job/nightly', '-n', ns, '--previous'])).stdout)).toEqual(lines(before.previous));
  // With timestamps: the same instants; the text may differ only in trailing fraction zeros (see docs/logs-command.md).
  const ts = lines((await plugin(['logs', 'job/nightly', '-n', ns, '--timestamps', '--tail', String(M + 1)])).stdout);
  const kts = lines(before.timestamps);
  expect(ts.map(stripTs)).toEqual(kts.map(stripTs));
  expect(ts.map(tsNs)).toEqual(kts.map(tsNs));
  for (const l of ts) expect(l).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d*[1-9])?Z /);
}

describe('kubectl jobharvest logs', () => {
  it('VictoriaLogs: prints every line of a Job with two restarts after the TTL deleted it, as kubectl logs printed them', () => scenario('victorialogs'), 300_000);
  it.skipIf(!openSearchBuildable())('OpenSearch: the same Job through the elasticsearch sink, read back with _search', () => scenario('opensearch'), 300_000);
});
