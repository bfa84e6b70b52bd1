/**
 * The kubectl plugin as a standalone executable (npm run build:plugin: a Node
 * single-executable application): kubectl, the one the harness builds, finds
 * it on a PATH that holds no node at all and runs `kubectl jobharvest logs`
 * and `kubectl jobharvest status`, against the test control plane and a real
 * VictoriaLogs.
 */
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useCluster } from '../harness/cluster/client.ts';
import { VictoriaLogs } from '../harness/servers/victorialogs.ts';

const run = promisify(execFile);
const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const PLUGIN = join(repo, 'dist', 'plugin', 'kubectl-jobharvest');
const KUBECTL = join(repo, 'test', 'harness', 'node', 'bin', 'kubectl');
const cluster = useCluster();
let vl: VictoriaLogs;
let bin: string;
let home: string;

beforeAll(async () => {
  // Built here so the test always runs what the sources give (about 25 s).
  execFileSync(process.execPath, ['scripts/plugin.mjs'], { cwd: repo, stdio: 'inherit' });
  vl = await VictoriaLogs.start();
  bin = mkdtempSync(join(tmpdir(), 'jh-nonode-'));
  home = mkdtempSync(join(tmpdir(), 'jh-home-'));
  symlinkSync(PLUGIN, join(bin, 'kubectl-jobharvest'));
  symlinkSync(KUBECTL, join(bin, 'kubectl'));
}, 300_000);

afterAll(async () => {
  await vl?.dispose();
  for (const d of [bin, home]) if (d) rmSync(d, { recursive: true, force: true });
});

/** The environment: a PATH with kubectl and the plugin only. */
const env = (): NodeJS.ProcessEnv => ({ PATH: bin, HOME: home, KUBECONFIG: cluster.info.kubeconfigPath });

describe('the standalone kubectl plugin', () => {
  it('runs as kubectl jobharvest logs with no node on PATH', async () => {
    expect(existsSync(KUBECTL), 'the harness kubectl (npm run node:build)').toBe(true);
    // Nothing named node is reachable.
    await expect(run('/bin/sh', ['-c', 'command -v node'], { env: env() })).rejects.toThrow(/Command failed/);
    const lines = Array.from({ length: 50 }, (_, i) => `standalone line ${i + 1}`);
    const t0 = 1764574800000000000n;
    const body = { streams: [{ stream: { namespace: 'plugin', job: 'standalone', pod: 'standalone-x', container: 'main', stream: 'stdout' }, values: lines.map((l, i) => [String(t0 + BigInt(i) * 1000n), l, { pod_uid: 'u-1', restart_count: '0', id: `p-${i * 30}` }]) }] };
    const res = await fetch(vl.endpoints.loki, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    expect(res.status).toBeLessThan(300);
    await vl.flush();

    const out = await run(KUBECTL, ['jobharvest', 'logs', 'job/standalone', '-n', 'plugin', '--query-endpoint', vl.url, '--query-type', 'victorialogs'], { env: env() });
    expect(out.stderr).toBe('');
    expect(out.stdout.split('\n').slice(0, -1)).toEqual(lines);

    // The figures for the record: size and start-up (the median of five --version runs through kubectl).
    const times: number[] = [];
    for (let i = 0; i < 5; i++) {
      const t = process.hrtime.bigint();
      const v = await run(KUBECTL, ['jobharvest', '--version'], { env: env() });
      times.push(Number(process.hrtime.bigint() - t) / 1e6);
      expect(v.stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
    }
    const direct: number[] = [];
    for (let i = 0; i < 5; i++) {
      const t = process.hrtime.bigint();
      await run(PLUGIN, ['--version'], { env: env() });
      direct.push(Number(process.hrtime.bigint() - t) / 1e6);
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    console.log(`standalone plugin: ${(statSync(PLUGIN).size / 1024 / 1024).toFixed(1)} MiB; --version ${median(direct).toFixed(0)} ms alone, ${median(times).toFixed(0)} ms through kubectl (medians of 5)`);
  }, 120_000);

  it('runs as kubectl jobharvest status with no node on PATH: a record it cannot check reads unverified, and lines lost exit 1', async () => {
    const ns = `plugin-status-${process.pid}`;
    await cluster.core.createNamespace({ body: { metadata: { name: ns } } });
    try {
      // A record as a Job's author could write it: signed with nothing this cluster holds.
      const record = JSON.stringify({ sink: 'loki', pods: 1, shipped: 40, lost: 2, unaccounted: 0, sig: 'v2.AAAAAAAA.forged' });
      const status = JSON.stringify({ version: '0.1.0', mode: 'api', sink: 'loki', container: 'jobharvest', volumes: [], ttlSecondsAfterFinished: 60, terminationGracePeriodSeconds: null, defaultContainer: 'main' });
      await cluster.batch.createNamespacedJob({
        namespace: ns,
        body: {
          metadata: { name: 'recorded', annotations: { 'jobharvest.io/status': status, 'jobharvest.io/delivery': record } },
          spec: { suspend: true, template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: 'busybox:1.36', command: ['true'] }] } } },
        },
      });
      // A namespace with no release: no key to check with, whatever else the cluster holds.
      const out = await run(KUBECTL, ['jobharvest', 'status', '-n', ns, '-o', 'json', '--chart-namespace', ns], { env: env() }).then(
        (r) => ({ ...r, code: 0 }),
        (e: { stdout: string; stderr: string; code: number }) => e,
      );
      expect(out.code).toBe(1);
      expect(JSON.parse(out.stdout).items).toEqual([expect.objectContaining({ name: 'recorded', record: 'unverified', shipped: 40, lost: 2 })]);
      expect(out.stderr).toBe(`records unverified: no jobharvest release installed (no webhook configuration names its Service)\n`);
    } finally {
      await cluster.core.deleteNamespace({ name: ns }).catch(() => undefined);
    }
  }, 60_000);
});
