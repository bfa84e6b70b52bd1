import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { keyedDir } from './cache.ts';

const here = dirname(fileURLToPath(import.meta.url));

export interface GoProgram {
  /** Binary name, and the folder under test/harness/servers holding its go.mod and go.sum (unless `dir` names another). */
  name: string;
  /** Package to build, resolved through that module's pinned dependencies. */
  pkg: string;
  /** The wrapper module's folder, when it is not test/harness/servers/<name>. */
  dir?: string;
  /** `-X` stamps for the linker (a program's version variables), part of the cache key. */
  stamps?: Record<string, string>;
  /** Build tags, part of the cache key (Prometheus' `remove_all_sd` leaves out every cloud service discovery). */
  tags?: readonly string[];
}

export const VICTORIA_LOGS: GoProgram = { name: 'victoria-logs', pkg: 'github.com/VictoriaMetrics/VictoriaLogs/app/victoria-logs' };
export const OTELCOL: GoProgram = { name: 'otelcol', pkg: '.' };
/**
 * vmauth, the authenticating proxy of VictoriaMetrics (Apache-2.0), built
 * through the wrapper module `vmauth/`: it maps each credential to a
 * VictoriaLogs tenant for the per-namespace tenants test.
 */
export const VMAUTH: GoProgram = { name: 'vmauth', pkg: 'github.com/VictoriaMetrics/VictoriaMetrics/app/vmauth' };
/**
 * KWOK (Apache-2.0), the fake-node controller: run out of cluster against the
 * test control plane, it plays nodes and moves their pods through their
 * phases by its stages, for fleets larger than the machine could run.
 */
export const KWOK: GoProgram = { name: 'kwok', pkg: 'sigs.k8s.io/kwok/cmd/kwok' };
/** The JobSet controller manager: the root package of sigs.k8s.io/jobset, built through the wrapper module `jobset/`. */
export const JOBSET: GoProgram = { name: 'jobset', pkg: 'sigs.k8s.io/jobset' };
/**
 * Prometheus (Apache-2.0) and its promtool, both built through the wrapper
 * module `prometheus/`, for the chart's operability pack: the e2e suite scrapes
 * the webhook and the harvester with it, and the unit suite runs `promtool
 * check rules` / `promtool test rules` on the chart's alerts. `remove_all_sd`
 * leaves out the cloud service discoveries and their SDKs: the tests use
 * static targets only.
 */
export const PROMETHEUS: GoProgram = {
  name: 'prometheus',
  pkg: 'github.com/prometheus/prometheus/cmd/prometheus',
  tags: ['remove_all_sd'],
};
export const PROMTOOL: GoProgram = {
  name: 'promtool',
  pkg: 'github.com/prometheus/prometheus/cmd/promtool',
  dir: join(here, 'prometheus'),
  tags: ['remove_all_sd'],
};

export function moduleDir(p: GoProgram): string {
  return p.dir ?? join(here, p.name === 'victoria-logs' ? 'victorialogs' : p.name);
}

function ldflags(p: GoProgram): string {
  return ['-s', '-w', ...Object.entries(p.stamps ?? {}).map(([k, v]) => `-X ${k}=${v}`)].join(' ');
}

function goVersion(): string {
  const r = spawnSync('go', ['env', 'GOVERSION'], { encoding: 'utf8' });
  if (r.status !== 0) {
    throw new Error(`test servers are built from source and need a Go toolchain on PATH: ${r.error?.message ?? r.stderr}`);
  }
  return r.stdout.trim();
}

/** Version of a required module, as pinned in the program's go.mod. */
export function pinnedVersion(p: GoProgram, module: string): string {
  const gomod = readFileSync(join(moduleDir(p), 'go.mod'), 'utf8');
  const m = new RegExp(`${module.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} (v\\S+)`).exec(gomod);
  if (!m?.[1]) throw new Error(`${module} is not pinned in ${p.name}/go.mod`);
  return m[1];
}

function binaryPath(p: GoProgram): string {
  const dir = moduleDir(p);
  const sources = [join(dir, 'go.mod'), join(dir, 'go.sum')];
  if (p.pkg === '.') sources.push(join(dir, 'main.go'));
  const stamps = p.stamps ? [ldflags(p)] : [];
  const tags = p.tags ? [`tags=${p.tags.join(',')}`] : [];
  const dirKey = keyedDir('servers', [p.name, p.pkg, ...sources.map((f) => readFileSync(f)), goVersion(), process.arch, ...stamps, ...tags]);
  return join(dirKey, p.name);
}

/**
 * Returns the path of a pinned Go program, building it first when the cache
 * has none for the current pins (go.mod, go.sum, sources, Go version). Builds
 * into a temp name and renames, so an interrupted build never leaves a
 * half-written binary behind.
 */
export function ensureGoProgram(p: GoProgram, log: (msg: string) => void = () => {}): string {
  const bin = binaryPath(p);
  if (existsSync(bin)) return bin;
  mkdirSync(dirname(bin), { recursive: true });
  const tmp = `${bin}.tmp-${process.pid}`;
  log(`building ${p.name} into ${dirname(bin)}`);
  const started = Date.now();
  try {
    const tags = p.tags ? [`-tags=${p.tags.join(',')}`] : [];
    execFileSync('go', ['build', '-trimpath', ...tags, `-ldflags=${ldflags(p)}`, '-o', tmp, p.pkg], {
      cwd: moduleDir(p),
      // A static binary: no C toolchain needed. -mod=readonly: go.sum is the pin.
      env: { ...process.env, CGO_ENABLED: '0', GOFLAGS: '-mod=readonly' },
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    renameSync(tmp, bin);
  } finally {
    rmSync(tmp, { force: true });
  }
  log(`built ${p.name} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return bin;
}
