/**
 * A CronJob every minute, through the real CronJob, Job and TTL controllers:
 * every Job it creates is injected at that Job's CREATE and, its controller
 * being a CronJob (which never creates a deleted Job again), gets the TTL;
 * its successfulJobsHistoryLimit still deletes the older runs; and
 * `jobharvest logs cronjob/NAME` lists the runs, newest first, the deleted
 * ones too, and prints the one `--run` chooses, from the log server.
 */
import type { V1CronJob } from '@kubernetes/client-node';
import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { useCluster, waitFor } from '../harness/cluster/client.ts';
import { shellJob, Stack } from '../harness/kubelet/stack.ts';
import { ensureSidecarBundle } from '../support/sidecar.ts';

const run = promisify(execFile);
const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const cluster = useCluster();
const LINES = 40;
let stack: Stack;
let ns = '';

beforeAll(async () => {
  ensureSidecarBundle();
  stack = await Stack.start({ info: cluster.info, name: 'cron' });
  // A TTL far past the test: what deletes the first run is the history limit.
  ns = await stack.namespace('cron', { ttlSeconds: 3600 });
}, 600_000);

afterAll(async () => {
  await stack?.batch.deleteNamespacedCronJob({ name: 'report', namespace: ns }).catch(() => undefined);
  await stack?.stop();
}, 120_000);

async function cli(args: string[]): Promise<string[]> {
  const { stdout } = await run(process.execPath, [join(repo, 'dist', 'jobharvest.mjs'), 'logs', ...args, '-n', ns, '--kubeconfig', cluster.info.kubeconfigPath], { maxBuffer: 16 * 1024 * 1024 });
  return stdout.split('\n').slice(0, -1);
}

it('a CronJob\'s runs get the sidecar and the TTL, its history limit holds, and logs cronjob/NAME shows every run', async () => {
  const template = shellJob('unused', { script: `i=1; while [ $i -le ${LINES} ]; do echo "run $(date +%H%M) line $i"; i=$((i+1)); done` });
  const cron: V1CronJob = {
    apiVersion: 'batch/v1',
    kind: 'CronJob',
    metadata: { name: 'report' },
    spec: { schedule: '* * * * *', successfulJobsHistoryLimit: 1, failedJobsHistoryLimit: 1, concurrencyPolicy: 'Forbid', jobTemplate: { spec: template.spec! } },
  };
  // The webhook patches Jobs, not CronJobs: each Job the CronJob controller creates is injected at its own CREATE.
  const stored = await stack.batch.createNamespacedCronJob({ namespace: ns, body: cron });
  expect(stored.spec.jobTemplate.spec?.template.spec?.initContainers).toBeUndefined();

  // Two runs done: the CronJob controller then deletes the first (history limit 1).
  const seen = new Set<string>();
  await waitFor(
    'two completed runs, and the first deleted by the history limit',
    async () => {
      const jobs = (await stack.batch.listNamespacedJob({ namespace: ns })).items;
      for (const j of jobs) {
        if (j.status?.conditions?.some((c) => c.type === 'Complete' && c.status === 'True')) seen.add(j.metadata!.name!);
        // Every run is a CronJob's, so every run got the TTL.
        expect(j.spec?.ttlSecondsAfterFinished, j.metadata?.name).toBe(3600);
        expect(j.spec?.template.spec?.initContainers?.[0]?.name).toBe('jobharvest');
        // The OTLP resource's owner, from the reference the CronJob controller wrote into the Job.
        const env = Object.fromEntries((j.spec?.template.spec?.initContainers?.[0]?.env ?? []).map((e) => [e.name, e.value]));
        expect(env, j.metadata?.name).toMatchObject({ JOBHARVEST_CRONJOB_NAME: 'report', JOBHARVEST_CRONJOB_UID: stored.metadata!.uid });
      }
      const done = jobs.filter((j) => j.status?.conditions?.some((c) => c.type === 'Complete' && c.status === 'True'));
      return seen.size >= 2 && done.length === 1 ? true : undefined;
    },
    { timeoutMs: 200_000, intervalMs: 1000 },
  );
  const current = await stack.batch.readNamespacedCronJob({ name: 'report', namespace: ns });
  current.spec!.suspend = true;
  await stack.batch.replaceNamespacedCronJob({ name: 'report', namespace: ns, body: current });
  const runs = [...seen].sort();
  await stack.vl.flush();
  await waitFor('every run\'s lines at the log server', async () => {
    const table = await cli(['cronjob/report']);
    return table.filter((l) => /^\d+\s/.test(l)).length >= 2 ? true : undefined;
  });
  const table = await cli(['cronjob/report']);
  console.log(table.join('\n'));
  const rows = table.filter((l) => /^\d+\s/.test(l)).map((l) => l.split(/\s+/));
  // Newest first; the older run's Job object is gone, its lines are not.
  expect(rows.slice(0, 2).map((r) => r[1])).toEqual([runs[1], runs[0]]);
  expect(rows[0]!.at(-1)).toBe('exists');
  expect(rows[1]!.at(-1)).toBe('deleted');
  for (const r of rows.slice(0, 2)) expect(r.at(-2)).toBe(String(LINES));
  const older = await cli(['cronjob/report', '--run', '2']);
  expect(older).toHaveLength(LINES);
  expect(older.at(-1)).toMatch(new RegExp(`line ${LINES}$`));
  expect(await cli(['cronjob/report', '--run', runs[0]!])).toEqual(older);
  // The run still there has its delivery record, written by the harvester.
  const record = await waitFor('the newest run\'s delivery record', async () => {
    const j = await stack.batch.readNamespacedJob({ name: runs[1]!, namespace: ns });
    return j.metadata?.annotations?.['jobharvest.io/delivery'];
  });
  console.log(`delivery record of ${runs[1]}: ${record}`);
  expect(JSON.parse(record)).toMatchObject({ pods: 1, shipped: LINES, lost: 0, unaccounted: 0 });
  // status cronjob/NAME: the runs that still exist, picked by their controller reference, from the Job objects alone.
  const { stdout } = await run(process.execPath, [join(repo, 'dist', 'jobharvest.mjs'), 'status', 'cronjob/report', '-n', ns, '-o', 'json', '--kubeconfig', cluster.info.kubeconfigPath]);
  const items = (JSON.parse(stdout) as { items: Array<{ name: string; shipped: number; lost: number }> }).items;
  console.log(`status cronjob/report: ${JSON.stringify(items.map((i) => [i.name, i.shipped, i.lost]))}`);
  expect(items.map((i) => [i.name, i.shipped, i.lost])).toEqual([[runs[1], LINES, 0]]);
}, 300_000);
