/**
 * Record shaping end to end, at the operator's and the tenant's settings as a
 * user sets them: the webhook reads the operator's masks and carried keys
 * from its configuration file (what the chart renders) and the Job's own
 * annotations (multiline python, JSON parsing), and passes them to the real
 * sidecar, which ships through the loki sink into a real VictoriaLogs. There
 * the fields are queryable: the JSON line's level, the carried label and
 * annotation; the traceback is one record of its four lines, in order; the
 * password never reaches the server.
 */
import type { V1Job } from '@kubernetes/client-node';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { ENV } from '../../src/contract/env.ts';
import { useCluster, waitFor } from '../harness/cluster/client.ts';
import { shellJob, Stack } from '../harness/kubelet/stack.ts';
import { ensureSidecarBundle } from '../support/sidecar.ts';

const cluster = useCluster();
let stack: Stack;
let dir: string;

const TRACEBACK = ['Traceback (most recent call last):', '  File "job.py", line 3, in <module>', '    main()', 'ValueError: bad input'];

beforeAll(async () => {
  ensureSidecarBundle();
  dir = mkdtempSync(join(tmpdir(), 'jh-shaping-'));
  const config = join(dir, 'config.yaml');
  // The operator's part: masks and carried keys are theirs alone.
  writeFileSync(config, ['sidecar:', '  mask:', '    builtin: [all]', '  carry:', '    labels: [team]', '    annotations: [example.com/pipeline]', ''].join('\n'));
  stack = await Stack.start({ info: cluster.info, name: 'shp', webhookArgs: ['--config', config], kubelet: { restartBackoffMs: 300 } });
}, 600_000);

afterAll(async () => {
  await stack?.stop();
  rmSync(dir, { recursive: true, force: true });
}, 120_000);

it('JSON fields, a joined traceback, carried label and annotation, and a masked password, as VictoriaLogs holds them', async () => {
  const ns = await stack.namespace('shaping', { ttlSeconds: 600 });
  const script = [
    `echo '{"level":"error","msg":"payment failed","step":3}'`,
    `printf '${TRACEBACK.join('\\n')}\\n'`,
    `echo 'login password=hunter2 accepted'`,
    `echo 'plain line'`,
  ].join('; ');
  const job: V1Job = shellJob('shaped', { script });
  job.metadata = {
    ...job.metadata,
    labels: { team: 'payments', unlisted: 'not-carried' },
    annotations: { 'jobharvest.io/multiline': 'python', 'jobharvest.io/parse': 'json', 'example.com/pipeline': 'nightly', 'example.com/other': 'not-carried' },
  };
  const stored = await stack.batch.createNamespacedJob({ namespace: ns, body: job });
  const env = Object.fromEntries((stored.spec!.template.spec!.initContainers![0]!.env ?? []).map((e) => [e.name, e.value]));
  expect(env[ENV.MULTILINE.name]).toBe('python');
  expect(env[ENV.PARSE.name]).toBe('json');
  expect(env[ENV.MASK.name]).toBe('all');
  expect(JSON.parse(env[ENV.JOB_LABELS.name]!)).toEqual({ team: 'payments' });
  expect(JSON.parse(env[ENV.JOB_ANNOTATIONS.name]!)).toEqual({ 'example.com/pipeline': 'nightly' });

  const filter = stack.filter(ns);
  await waitFor('the Job Complete', async () => {
    const j = await stack.batch.readNamespacedJob({ name: 'shaped', namespace: ns });
    return j.status?.conditions?.some((c) => c.type === 'Complete' && c.status === 'True') ? true : undefined;
  }, { timeoutMs: 120_000, intervalMs: 200 });
  await waitFor('four records at VictoriaLogs', async () => ((await stack.vl.count(filter)) >= 4 ? true : undefined), { timeoutMs: 60_000, intervalMs: 250 });

  const rows = await stack.vl.query(`${filter} | sort by (_time) | fields _msg, json_level, json_step, lines, label_team, annotation_example_com_pipeline`);
  console.log(`shaped records at VictoriaLogs:\n${rows.map((r) => JSON.stringify(r)).join('\n')}`);
  expect(rows.map((r) => r._msg)).toEqual(['{"level":"error","msg":"payment failed","step":3}', TRACEBACK.join('\n'), 'login password=[MASKED] accepted', 'plain line']);
  // Queryable by field, as a user searches.
  expect(await stack.vl.count(`${filter} json_level:=error`)).toBe(1);
  expect(await stack.vl.count(`${filter} label_team:=payments`)).toBe(4);
  expect(await stack.vl.count(`${filter} annotation_example_com_pipeline:=nightly`)).toBe(4);
  expect(rows[1]!.lines).toBe('4');
  expect(await stack.vl.count(`${filter} hunter2`)).toBe(0);

  const pod = stack.jobWorkers(ns, 'shaped')[0]!;
  const summary = stack.sidecarSummary(pod.uid);
  expect(summary).toMatchObject({ outcome: 'complete', lines_shipped: 7, multiline_records: 1, json_records: 1, masked: 1 });
});
