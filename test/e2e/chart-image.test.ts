/**
 * The container image, without a Docker engine: hadolint on the Dockerfile, the
 * files it copies exist after `npm run build`, and the runtime stage's layout,
 * rebuilt in an empty folder with no node_modules, starts both entry points
 * the way the chart and the injected sidecar call them.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultConfig } from '../../src/core/config.ts';
import { copies, execForm, readDockerfile, REPO_ROOT, workdir } from '../harness/chart/dockerfile.ts';
import { httpCall } from '../harness/cluster/http.ts';
import { freePort } from '../support/ports.ts';
import { waitFor } from '../support/wait.ts';

const NODE = join(REPO_ROOT, 'node_modules/.bin/node');
const stages = readDockerfile();
const build = stages.find((s) => s.name === 'build');
const runtime = stages.at(-1)!;

// The environment of a container: no NODE_PATH or NODE_OPTIONS that could find modules outside the layout.
const cleanEnv = (): NodeJS.ProcessEnv => {
  const { NODE_PATH: _path, NODE_OPTIONS: _options, ...env } = process.env;
  return env;
};

function run(file: string, args: string[], opts: { cwd?: string; input?: string } = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile(file, args, { cwd: opts.cwd, env: cleanEnv() }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr });
    });
    if (opts.input !== undefined) child.stdin?.end(opts.input);
  });
}

describe('Dockerfile', () => {
  let hadolint = '';
  beforeAll(async () => {
    const install = await run('bash', [join(REPO_ROOT, 'test/harness/chart/hadolint.sh')]);
    if (install.code !== 0) throw new Error(`installing hadolint failed: ${install.stderr}`);
    hadolint = install.stdout.trim();
  }, 300_000);

  it('passes hadolint', async () => {
    const result = await run(hadolint, ['--no-color', 'Dockerfile'], { cwd: REPO_ROOT });
    expect(result.stdout + result.stderr).toBe('');
    expect(result.code).toBe(0);
  });

  it('is linted for real (hadolint refuses a careless Dockerfile)', async () => {
    const result = await run(hadolint, ['--no-color', '-'], { input: 'FROM node:latest\nRUN apt-get install -y curl\n' });
    expect(result.code).not.toBe(0);
    expect(result.stdout).toContain('DL3007');
  });

  it('is multi-stage: builds on Node 24, runs on distroless Node 24 as a numeric non-root user', () => {
    expect(build?.from).toMatch(/^node:24[-.]/);
    expect(runtime.from).toMatch(/\/distroless\/nodejs24-[a-z0-9]+:nonroot$/);
    // Distroless has no shell: a RUN in the runtime stage could not work.
    expect(runtime.instructions.filter((i) => i.keyword === 'RUN')).toEqual([]);
    const user = runtime.instructions.filter((i) => i.keyword === 'USER').at(-1)?.args;
    expect(user).toMatch(/^[1-9][0-9]*(:[0-9]+)?$/);
    expect(Number(user!.split(':')[0])).toBe(defaultConfig().sidecar.runAsUser);
    expect(execForm(runtime, 'ENTRYPOINT')).toEqual(['/nodejs/bin/node']);
    const labels = runtime.instructions.filter((i) => i.keyword === 'LABEL').map((i) => i.args).join(' ');
    for (const key of ['title', 'description', 'version', 'licenses']) expect(labels).toContain(`org.opencontainers.image.${key}=`);
  });

  it('copies into the build stage only files that exist and that .dockerignore lets through', () => {
    const allowed = readFileSync(join(REPO_ROOT, '.dockerignore'), 'utf8')
      .split('\n')
      .filter((l) => l.startsWith('!'))
      .map((l) => l.slice(1).replace(/\/$/, ''));
    const sources = copies(build!).filter((c) => c.from === undefined).flatMap((c) => c.sources.map((s) => s.replace(/\/$/, '')));
    expect(sources.length).toBeGreaterThan(0);
    for (const source of sources) {
      expect(existsSync(join(REPO_ROOT, source)), source).toBe(true);
      expect(allowed, `${source} is excluded by .dockerignore`).toContain(source);
    }
    // The bundler's inputs: everything it imports must be inside what is copied.
    expect(sources).toEqual(expect.arrayContaining(['package.json', 'package-lock.json', 'scripts/bundle.mjs', 'src', 'sidecar']));
  });
});

describe('the runtime image layout', () => {
  let app = '';
  let layoutRoot = '';
  const children: ChildProcess[] = [];

  beforeAll(() => {
    // The image's /app, rebuilt from dist/ (npm run build ran before the tests) in
    // an empty folder under the temp dir: no node_modules anywhere above it.
    layoutRoot = mkdtempSync(join(tmpdir(), 'jobharvest-image-'));
    const buildDir = workdir(build!);
    for (const c of copies(runtime)) {
      expect(c.from).toBe('build');
      for (const source of c.sources) {
        const local = join(REPO_ROOT, relative(buildDir, source));
        expect(existsSync(local), `${source} (${local}) exists after npm run build`).toBe(true);
        const target = c.destination.endsWith('/') && !statSync(local).isDirectory()
          ? join(layoutRoot, c.destination, source.split('/').at(-1)!)
          : join(layoutRoot, c.destination);
        // The build stage deletes the source maps before this copy.
        cpSync(local, target, { recursive: true, filter: (f) => !f.endsWith('.map') });
      }
    }
    app = join(layoutRoot, 'app');
    for (let dir = layoutRoot; dir !== dirname(dir); dir = dirname(dir)) {
      expect(existsSync(join(dir, 'node_modules')), `node_modules above the layout in ${dir}`).toBe(false);
    }
  });

  afterAll(() => {
    for (const c of children) c.kill('SIGKILL');
    if (layoutRoot !== '') rmSync(layoutRoot, { recursive: true, force: true });
  });

  /** A path inside the image mapped into the rebuilt layout. */
  const inImage = (p: string): string => (p.startsWith('/app/') ? join(layoutRoot, p) : p);

  it('holds the files the chart and the injected sidecar name', async () => {
    const cmd = execForm(runtime, 'CMD');
    expect(cmd.slice(0, 2)).toEqual(['/app/jobharvest.mjs', 'webhook']);
    expect(existsSync(inImage(cmd[0]!))).toBe(true);
    const { args, startedCommand } = defaultConfig().sidecar;
    // args = node flags, then the script; the image's entry point is node.
    const script = args.find((a) => !a.startsWith('-'));
    expect(script).toBe('/app/sidecar.mjs');
    expect(existsSync(inImage(script!))).toBe(true);
    // The postStart hook runs the image's own node on the same script.
    expect(startedCommand[0]).toBe(execForm(runtime, 'ENTRYPOINT')[0]);
    expect(existsSync(inImage(startedCommand[1]!))).toBe(true);
    expect(existsSync(join(app, 'chunks'))).toBe(true);
    expect(readdirSync(app, { recursive: true }).filter((f) => String(f).endsWith('.map'))).toEqual([]);
  });

  it('starts the CLI with --help', async () => {
    const r = await run(NODE, [join(app, 'jobharvest.mjs'), '--help'], { cwd: layoutRoot });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('Usage: jobharvest');
    expect(r.stdout).toContain('webhook');
  });

  it('starts the sidecar entry point with --help, as the injected container calls it', async () => {
    const r = await run(NODE, [...defaultConfig().sidecar.args.map(inImage), '--help'], { cwd: layoutRoot });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('JOBHARVEST_SINK');
  });

  it('starts the sidecar through the CLI too (jobharvest sidecar --help)', async () => {
    const r = await run(NODE, [join(app, 'jobharvest.mjs'), 'sidecar', '--help'], { cwd: layoutRoot });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('JOBHARVEST_SINK');
  });

  it('serves the webhook from the layout: the lazily loaded chunks resolve without node_modules', async () => {
    const port = await freePort();
    const caOut = join(layoutRoot, 'ca.pem');
    const child = spawn(
      NODE,
      [join(app, 'jobharvest.mjs'), 'webhook', '--standalone', '--host', '127.0.0.1', '--port', String(port), '--ca-out', caOut],
      { cwd: layoutRoot, env: cleanEnv(), stdio: ['ignore', 'pipe', 'pipe'] },
    );
    children.push(child);
    let output = '';
    child.stdout?.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr?.on('data', (d: Buffer) => (output += d.toString()));
    const health = await waitFor(
      'the webhook to answer /healthz',
      async () => {
        if (!existsSync(caOut)) return undefined;
        const res = await httpCall(`https://127.0.0.1:${port}/healthz`, { caPem: readFileSync(caOut, 'utf8') }).catch(() => undefined);
        return res?.status === 200 ? res : undefined;
      },
      { timeoutMs: 30_000, abortIf: () => (child.exitCode === null ? undefined : `the webhook exited ${child.exitCode}: ${output}`) },
    );
    expect(JSON.parse(health.body)).toEqual({ status: 'ok' });
    expect(output).not.toMatch(/ERR_MODULE_NOT_FOUND|Cannot find (module|package)/);
    child.kill('SIGTERM');
  });
});
