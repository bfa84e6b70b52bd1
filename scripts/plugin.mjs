// Builds the kubectl plugin as one executable that needs no Node.js on the
// machine: a Node single-executable application (SEA). The logs and status
// commands are bundled into one CommonJS script, Node turns it into a preparation blob, and
// postject injects the blob into a copy of this Node binary. Also writes the
// krew manifest for the platform it was built on.
//
//   npm run build:plugin   →  dist/plugin/kubectl-jobharvest, dist/plugin/jobharvest.yaml
import { build } from 'esbuild';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import process from 'node:process';
import { NODE_BUNDLE } from './esbuild-options.mjs';

const out = 'dist/plugin';
const pkg = JSON.parse(readFileSync('package.json', 'utf8'));
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });

// One CommonJS file: a SEA's main script is run as CommonJS, and it can only
// require Node's built-in modules, so every dependency is inside.
await build({
  ...NODE_BUNDLE,
  entryPoints: ['src/cli/plugin.ts'],
  outfile: join(out, 'plugin.cjs'),
  format: 'cjs',
  minify: true,
});

const blob = join(out, 'sea-prep.blob');
writeFileSync(join(out, 'sea-config.json'), JSON.stringify({ main: join(out, 'plugin.cjs'), output: blob, disableExperimentalSEAWarning: true, useCodeCache: true }));
execFileSync(process.execPath, ['--experimental-sea-config', join(out, 'sea-config.json')], { stdio: 'inherit' });

const exe = join(out, 'kubectl-jobharvest');
copyFileSync(process.execPath, exe);
chmodSync(exe, 0o755);
const postject = createRequire(import.meta.url).resolve('postject/dist/cli.js');
execFileSync(process.execPath, [postject, exe, 'NODE_SEA_BLOB', blob, '--sentinel-fuse', 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2'], { stdio: 'inherit' });
for (const f of ['plugin.cjs', 'sea-prep.blob', 'sea-config.json']) rmSync(join(out, f));

// krew wants an archive per platform with its sha256; this build's platform only.
const os = process.platform === 'darwin' ? 'darwin' : process.platform === 'win32' ? 'windows' : 'linux';
const arch = process.arch === 'x64' ? 'amd64' : process.arch;
const archive = `kubectl-jobharvest_${pkg.version}_${os}_${arch}.tar.gz`;
execFileSync('tar', ['-czf', join(out, archive), '-C', out, 'kubectl-jobharvest']);
const sha256 = createHash('sha256').update(readFileSync(join(out, archive))).digest('hex');
writeFileSync(
  join(out, 'jobharvest.yaml'),
  `apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: jobharvest
spec:
  version: v${pkg.version}
  shortDescription: Read a Job's logs back from the log server, also after the Job is gone
  description: |
    kubectl jobharvest logs job/NAME prints a Job's logs from the log server
    jobharvest's sidecar shipped them to (VictoriaLogs, Loki, Elasticsearch or
    OpenSearch), with kubectl logs' flags, whether the Job still exists or not.
    kubectl jobharvest status lists Jobs with where their logs went: lines
    shipped, harvested and lost, and whether the delivery record verifies.
    A single executable: it needs no Node.js on the machine.
  platforms:
    - selector:
        matchLabels:
          os: ${os}
          arch: ${arch}
      uri: ${process.env.JOBHARVEST_PLUGIN_URI_BASE ?? 'https://example.invalid/jobharvest/releases'}/v${pkg.version}/${archive}
      sha256: ${sha256}
      bin: kubectl-jobharvest
`,
);
process.stdout.write(`${exe}: ${(readFileSync(exe).length / 1024 / 1024).toFixed(1)} MiB; ${archive} sha256 ${sha256}\n`);
