/**
 * A released version of jobharvest, built from the commit it was released
 * from (test/golden/skew/releases.json; there are no tags): its source tree
 * from `git archive`, its bundles by its own `npm run build`, its chart as it
 * was. Kept in `${JOBHARVEST_CACHE:-~/.cache/jobharvest}/upgrade/<sha>/`, so
 * a second run costs nothing; the commit pins everything in it.
 *
 * Dependencies: when the release's package-lock.json is this one's but for
 * the project's own version, its tree links this checkout's node_modules;
 * otherwise `npm ci --offline` (from npm's cache), then `npm ci`.
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, rm, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { REPO_ROOT } from '../chart/dockerfile.ts';
import { CACHE } from '../image/standins.ts';

const run = promisify(execFile);

export const RELEASES_FILE = join(REPO_ROOT, 'test/golden/skew/releases.json');

export interface Release {
  version: string;
  sha: string;
  /** The release's source tree. */
  tree: string;
  /** Its bundles (`npm run build`). */
  dist: string;
  /** Its chart. */
  chart: string;
}

/** Released versions and their commits, oldest first. */
export function releases(): Array<{ version: string; sha: string }> {
  const file = JSON.parse(readFileSync(RELEASES_FILE, 'utf8')) as { releases: Record<string, string> };
  return Object.entries(file.releases)
    .map(([version, sha]) => ({ version, sha }))
    .sort((a, b) => compareVersions(a.version, b.version));
}

export function compareVersions(a: string, b: string): number {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < 3; i++) if ((pa[i] ?? 0) !== (pb[i] ?? 0)) return (pa[i] ?? 0) - (pb[i] ?? 0);
  return 0;
}

/** A package-lock.json without the project's own version, which every release changes. */
function lockWithoutOwnVersion(text: string): string {
  const lock = JSON.parse(text) as { version?: string; packages?: Record<string, { version?: string }> };
  delete lock.version;
  if (lock.packages?.['']) delete lock.packages[''].version;
  return JSON.stringify(lock);
}

export async function buildRelease(version: string, log: (line: string) => void = () => undefined): Promise<Release> {
  const entry = releases().find((r) => r.version === version);
  if (!entry) throw new Error(`${version} is not in ${RELEASES_FILE}`);
  const { sha } = entry;
  const dir = join(CACHE, 'upgrade', sha);
  const tree = join(dir, 'tree');
  const done = join(dir, 'built');
  const release: Release = { version, sha, tree, dist: join(tree, 'dist'), chart: join(tree, 'charts/jobharvest') };
  if (existsSync(done)) {
    log(`release ${version} (${sha.slice(0, 7)}): built before, in ${dir}`);
    return release;
  }
  const t = Date.now();
  await rm(dir, { recursive: true, force: true });
  await mkdir(tree, { recursive: true });
  await run('sh', ['-c', 'git -C "$0" archive --format=tar "$1" | tar -x -C "$2"', REPO_ROOT, sha, tree]);
  const theirs = readFileSync(join(tree, 'package-lock.json'), 'utf8');
  const ours = readFileSync(join(REPO_ROOT, 'package-lock.json'), 'utf8');
  if (lockWithoutOwnVersion(theirs) === lockWithoutOwnVersion(ours)) {
    await symlink(join(REPO_ROOT, 'node_modules'), join(tree, 'node_modules'));
  } else {
    log(`release ${version}: its package-lock.json differs from this one's; npm ci`);
    await run('npm', ['ci', '--offline', '--no-audit', '--no-fund'], { cwd: tree, maxBuffer: 1 << 26 }).catch(() => run('npm', ['ci', '--no-audit', '--no-fund'], { cwd: tree, maxBuffer: 1 << 26 }));
  }
  await run('npm', ['run', 'build'], { cwd: tree, maxBuffer: 1 << 26 });
  const pkg = JSON.parse(readFileSync(join(tree, 'package.json'), 'utf8')) as { version: string };
  if (pkg.version !== version) throw new Error(`commit ${sha} says version ${pkg.version}, not ${version}`);
  await writeFile(done, `${new Date().toISOString()}\n`);
  log(`release ${version} (${sha.slice(0, 7)}) built in ${Date.now() - t} ms, in ${dir}`);
  return release;
}
