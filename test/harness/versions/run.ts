/**
 * `npm run test:versions`: the Kubernetes version matrix. Builds each minor
 * of test/harness/versions/<minor>/ (versions/build.sh, cached) and the default
 * pins (cluster and node builds), then runs test/versions/smoke.test.ts once
 * per minor on the real node, the release selected with
 * JOBHARVEST_KUBERNETES_BIN, and prints one row per minor.
 *
 *   tsx test/harness/versions/run.ts [--only 1.32,1.37] [--build-only]
 *
 * Exits non-zero when a build or a smoke test failed.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { KUBERNETES_BIN_ENV, readSelection } from './select.ts';

const HERE = fileURLToPath(new URL('.', import.meta.url));
const ROOT = join(HERE, '../../..');

interface Row {
  minor: string;
  kubernetes: string;
  etcd: string;
  build: string;
  smoke: string;
  seconds: number;
  notes: string[];
  ok: boolean;
}

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i === -1 ? undefined : process.argv[i + 1];
}

/** Runs a command with inherited stderr; returns its stdout, or throws with its exit status. */
function run(cmd: string, args: string[], env: NodeJS.ProcessEnv = process.env): string {
  const r = spawnSync(cmd, args, { cwd: ROOT, env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], maxBuffer: 1 << 26 });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} exited with ${r.status ?? r.signal}`);
  return r.stdout;
}

const defaultRelease = /^\s*k8s\.io\/kubernetes\s+(v1\.(\d+)\.\d+)/m.exec(readFileSync(join(ROOT, 'test/harness/cluster/go.mod'), 'utf8'));
if (defaultRelease === null) throw new Error('test/harness/cluster/go.mod pins no k8s.io/kubernetes');
const defaultMinor = `1.${defaultRelease[2]}`;
const matrixMinors = readdirSync(HERE).filter((d) => /^1\.\d+$/.test(d) && existsSync(join(HERE, d, 'go.mod')));
const all = [...new Set([...matrixMinors, defaultMinor])].sort((a, b) => Number(a.split('.')[1]) - Number(b.split('.')[1]));
const only = arg('--only')?.split(',');
const minors = only ? all.filter((m) => only.includes(m)) : all;
if (only && minors.length !== only.length) throw new Error(`--only ${only.join(',')}: the matrix has ${all.join(', ')}`);

// The default pins are what every minor shares (containerd, kubectl, helm) and the default row.
run('bash', ['test/harness/cluster/build.sh']);
run('bash', ['test/harness/node/build.sh']);
const dirs = new Map<string, string | Error>();
for (const minor of minors) {
  if (minor === defaultMinor) continue;
  try {
    dirs.set(minor, run('bash', [join(HERE, 'build.sh'), minor]).trim().split('\n').at(-1)!);
  } catch (err) {
    dirs.set(minor, err as Error);
  }
}
if (process.argv.includes('--build-only')) process.exit([...dirs.values()].some((d) => d instanceof Error) ? 1 : 0);

// The image the node runs is built from dist/.
run('npm', ['run', 'build']);

const rows: Row[] = [];
const outDir = join(ROOT, '.tmp', 'versions');
mkdirSync(outDir, { recursive: true });
for (const minor of minors) {
  const dir = dirs.get(minor);
  const row: Row = { minor, kubernetes: '', etcd: '', build: '', smoke: '', seconds: 0, notes: [], ok: false };
  rows.push(row);
  if (dir instanceof Error) {
    row.smoke = 'not built';
    row.notes.push(dir.message);
    continue;
  }
  const env = { ...process.env };
  if (dir === undefined) {
    const v = JSON.parse(readFileSync(join(ROOT, 'test/harness/cluster/bin/versions.json'), 'utf8')) as { kubernetes: string; etcd: string };
    Object.assign(row, { kubernetes: v.kubernetes, etcd: v.etcd, build: 'default pins' });
    delete env[KUBERNETES_BIN_ENV];
  } else {
    const s = readSelection(dir);
    Object.assign(row, { kubernetes: s.kubernetes, etcd: s.etcd, build: `${s.buildSeconds} s` });
    env[KUBERNETES_BIN_ENV] = dir;
  }
  const report = join(outDir, `${minor}.json`);
  rmSync(report, { force: true });
  console.error(`\n=== Kubernetes ${row.kubernetes} (etcd ${row.etcd}) ===`);
  const started = Date.now();
  const r = spawnSync(
    join(ROOT, 'node_modules/.bin/vitest'),
    ['run', '--project', 'versions', '--reporter=default', '--reporter=json', `--outputFile.json=${report}`],
    { cwd: ROOT, env, stdio: 'inherit' },
  );
  row.seconds = Math.round((Date.now() - started) / 1000);
  try {
    const j = JSON.parse(readFileSync(report, 'utf8')) as {
      numPassedTests: number;
      numFailedTests: number;
      numPendingTests: number;
      testResults: Array<{ assertionResults: Array<{ title: string; status: string }> }>;
    };
    row.smoke = `${j.numPassedTests} passed, ${j.numFailedTests} failed, ${j.numPendingTests} skipped`;
    for (const t of j.testResults.flatMap((f) => f.assertionResults)) if (t.status !== 'passed') row.notes.push(`${t.status}: ${t.title}`);
    row.ok = r.status === 0 && j.numFailedTests === 0 && j.numPassedTests > 0;
  } catch {
    row.smoke = `vitest exited with ${r.status ?? r.signal} and no report`;
  }
}

writeFileSync(join(outDir, 'results.json'), `${JSON.stringify(rows, null, 2)}\n`);
const table = [
  // "built in": the wall time of the build that made the cached entry.
  '| minor | release | etcd | built in | smoke | run |',
  '| --- | --- | --- | --- | --- | --- |',
  ...rows.map((r) => `| ${r.minor} | ${r.kubernetes || '-'} | ${r.etcd || '-'} | ${r.build || '-'} | ${r.ok ? 'pass' : 'FAIL'}: ${r.smoke} | ${r.seconds} s |`),
];
console.log(`\nKubernetes version matrix:\n${table.join('\n')}`);
for (const r of rows) for (const n of r.notes) console.log(`  ${r.minor}: ${n}`);
const passed = rows.filter((r) => r.ok).length;
console.log(`versions: ${passed} passed, ${rows.length - passed} failed`);
process.exit(passed === rows.length ? 0 : 1);
