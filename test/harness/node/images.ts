/**
 * The real node's images, built here as OCI archives (oci.ts) and imported
 * into containerd; there is no registry to pull from.
 *
 * - pause: the static program of ./pause, the pod sandbox image.
 * - busybox: Debian's busybox-static with a link per applet, for workloads.
 * - jobharvest: the Dockerfile's runtime stage, laid out as the Dockerfile
 *   lays it out. The stage's base, distroless nodejs24-debian12:nonroot, is
 *   stood in for by the files of Debian's libc6, libgcc-s1, libstdc++6 and
 *   ca-certificates packages (extracted with dpkg-deb, not installed), the
 *   nonroot user 65532 and /nodejs/bin/node from the pinned `node` npm
 *   package. WORKDIR, USER, ENTRYPOINT, CMD, EXPOSE and the COPY of dist/
 *   are read from the Dockerfile itself, so the two cannot drift apart.
 */
import { execFile } from 'node:child_process';
import { chmod, cp, mkdir, readdir, readFile, rm, symlink, writeFile, copyFile } from 'node:fs/promises';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { copies, execForm, readDockerfile, REPO_ROOT, workdir, type Stage } from '../chart/dockerfile.ts';
import { writeOciArchive, type ImageSpec, type WrittenImage } from './oci.ts';

const run = promisify(execFile);

/** Names as containerd stores them: what a pod's `image: x:y` normalises to. */
export const PAUSE_IMAGE = 'docker.io/library/jobharvest-pause:test';
export const BUSYBOX_IMAGE = 'docker.io/library/busybox:jobharvest-test';

/** `jobharvest:<version>`, the chart's and the webhook's default image, as containerd names it. */
export function jobharvestImageName(): string {
  const pkg = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string };
  return `docker.io/library/jobharvest:${pkg.version}`;
}

/** The base distroless nodejs24-debian12 brings, as Debian packages. */
export const BASE_PACKAGES = ['libc6', 'libgcc-s1', 'libstdc++6', 'ca-certificates'];
export const NONROOT = 65532;

export function runtimeStage(stages: Stage[] = readDockerfile()): Stage {
  const last = stages.at(-1);
  if (last === undefined) throw new Error('the Dockerfile has no stage');
  return last;
}

function lastArgs(stage: Stage, keyword: string): string | undefined {
  return stage.instructions.filter((i) => i.keyword === keyword).at(-1)?.args.trim();
}

/** The runtime config the Dockerfile's last stage gives its image. */
export function dockerfileRuntimeConfig(stage: Stage = runtimeStage()): ImageSpec['config'] {
  const user = lastArgs(stage, 'USER');
  const expose = lastArgs(stage, 'EXPOSE');
  if (user === undefined) throw new Error('the runtime stage sets no USER');
  return {
    User: user,
    Entrypoint: execForm(stage, 'ENTRYPOINT'),
    Cmd: execForm(stage, 'CMD'),
    WorkingDir: workdir(stage),
    // What distroless sets; SSL_CERT_FILE lets Node find the bundle written below.
    Env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt'],
    ...(expose === undefined ? {} : { ExposedPorts: Object.fromEntries(expose.split(/\s+/).map((p) => [p.includes('/') ? p : `${p}/tcp`, {}])) }),
  };
}

/** Architecture-independent packages: `apt-get download` takes them without an architecture. */
const ARCH_ALL = new Set(['ca-certificates']);

/**
 * Debian .debs of `packages`, downloaded once into `debDir` by apt; of the
 * Debian architecture `debArch` when given (a foreign one must have been
 * added with `dpkg --add-architecture`), else of the machine's. One folder
 * per architecture.
 */
export async function fetchDebs(debDir: string, debArch?: string, packages: string[] = BASE_PACKAGES): Promise<string[]> {
  await mkdir(debDir, { recursive: true });
  const have = async () => (await readdir(debDir)).filter((f) => f.endsWith('.deb'));
  const missing = (files: string[]) => packages.filter((p) => !files.some((f) => f.startsWith(`${p}_`)));
  const withArch = (p: string) => (debArch === undefined || ARCH_ALL.has(p) ? p : `${p}:${debArch}`);
  if (missing(await have()).length > 0) {
    const download = () => run('apt-get', ['download', ...missing([]).map(withArch)], { cwd: debDir });
    try {
      await download();
    } catch {
      // A machine that never ran apt-get update has no package lists yet.
      await run('apt-get', ['update']);
      await download();
    }
  }
  const files = await have();
  const left = missing(files);
  if (left.length > 0) throw new Error(`apt-get download did not fetch ${left.join(', ')}`);
  return packages.map((p) => join(debDir, files.filter((f) => f.startsWith(`${p}_`)).sort().at(-1)!));
}

/** The distroless base: BASE_PACKAGES extracted, the CA bundle, nonroot 65532, /tmp. */
export async function baseLayer(dir: string, debDir: string, debArch?: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  for (const deb of await fetchDebs(debDir, debArch)) await run('dpkg-deb', ['-x', deb, dir]);
  // update-ca-certificates, which would write the bundle, is a maintainer script
  // that extraction does not run: concatenate the certificates as it does.
  const certRoot = join(dir, 'usr/share/ca-certificates');
  const pems: string[] = [];
  const walk = async (d: string): Promise<void> => {
    for (const e of (await readdir(d, { withFileTypes: true })).sort((a, b) => a.name.localeCompare(b.name))) {
      const p = join(d, e.name);
      if (e.isDirectory()) await walk(p);
      else if (e.name.endsWith('.crt')) pems.push(await readFile(p, 'utf8'));
    }
  };
  await walk(certRoot);
  await mkdir(join(dir, 'etc/ssl/certs'), { recursive: true });
  await writeFile(join(dir, 'etc/ssl/certs/ca-certificates.crt'), pems.join(''));
  await writeFile(join(dir, 'etc/passwd'), `root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:${NONROOT}:${NONROOT}:nonroot:/home/nonroot:/sbin/nologin\n`);
  await writeFile(join(dir, 'etc/group'), `root:x:0:\nnobody:x:65534:\nnonroot:x:${NONROOT}:\n`);
  for (const d of ['tmp', 'root', 'home/nonroot']) await mkdir(join(dir, d), { recursive: true });
  await chmod(join(dir, 'tmp'), 0o1777);
  await run('chown', [`${NONROOT}:${NONROOT}`, join(dir, 'home/nonroot')]);
  await chmod(join(dir, 'home/nonroot'), 0o700);
  // Docs and man pages are not in distroless either.
  await rm(join(dir, 'usr/share/doc'), { recursive: true, force: true });
  await rm(join(dir, 'usr/share/man'), { recursive: true, force: true });
}

export interface BuiltImages {
  pause: WrittenImage;
  busybox: WrittenImage;
  jobharvest: WrittenImage;
}

export interface BuildImagesOptions {
  /** Scratch folder for the rootfs folders and archives. */
  dir: string;
  /** The pause binary (test/harness/node/bin/pause). */
  pauseBinary: string;
  /** Where the base .debs are kept between runs. */
  debCache: string;
}

export async function buildImages(opts: BuildImagesOptions): Promise<BuiltImages> {
  const root = join(opts.dir, 'rootfs');
  const archives = join(opts.dir, 'archives');

  const pauseDir = join(root, 'pause');
  await mkdir(pauseDir, { recursive: true });
  await copyFile(opts.pauseBinary, join(pauseDir, 'pause'));
  await chmod(join(pauseDir, 'pause'), 0o755);
  const pause = await writeOciArchive(
    { name: PAUSE_IMAGE, layers: [pauseDir], config: { Entrypoint: ['/pause'], User: '65535:65535' } },
    join(archives, 'pause.tar'),
  );

  const busyboxDir = join(root, 'busybox');
  await mkdir(join(busyboxDir, 'bin'), { recursive: true });
  await copyFile('/bin/busybox', join(busyboxDir, 'bin/busybox'));
  await chmod(join(busyboxDir, 'bin/busybox'), 0o755);
  const { stdout: applets } = await run('/bin/busybox', ['--list']);
  for (const applet of applets.split('\n').filter((a) => a !== '' && a !== 'busybox')) {
    await symlink('busybox', join(busyboxDir, 'bin', applet));
  }
  for (const d of ['tmp', 'etc']) await mkdir(join(busyboxDir, d), { recursive: true });
  await chmod(join(busyboxDir, 'tmp'), 0o1777);
  const busybox = await writeOciArchive(
    { name: BUSYBOX_IMAGE, layers: [busyboxDir], config: { Cmd: ['/bin/sh'], Env: ['PATH=/bin'] } },
    join(archives, 'busybox.tar'),
  );

  const jobharvest = await buildJobharvestImage({ dir: opts.dir, debCache: opts.debCache });
  return { pause, busybox, jobharvest };
}

export interface JobharvestImageOptions {
  /** Scratch folder, as buildImages' (rootfs/ and archives/ under it). */
  dir: string;
  debCache: string;
  /** The bundles to lay out (default: this checkout's dist/); another release's dist/ for an upgrade. */
  dist?: string;
  /** The name containerd stores it under (default: jobharvestImageName()). */
  name?: string;
}

/** The jobharvest image of buildImages, from any release's dist/ and under any name. */
export async function buildJobharvestImage(opts: JobharvestImageOptions): Promise<WrittenImage> {
  const root = join(opts.dir, 'rootfs');
  const archives = join(opts.dir, 'archives');
  const dist = opts.dist ?? join(REPO_ROOT, 'dist');
  const name = opts.name ?? jobharvestImageName();
  const tag = name.replace(/^.*:/, '');
  const stage = runtimeStage();
  const appCopies = copies(stage);
  if (appCopies.length !== 1 || appCopies[0]!.from !== 'build' || appCopies[0]!.sources.join() !== '/src/dist/') {
    throw new Error(`the runtime stage's COPY changed (${JSON.stringify(appCopies)}); teach images.ts the new layout`);
  }
  if (!existsSync(join(dist, 'jobharvest.mjs')) || !existsSync(join(dist, 'sidecar.mjs'))) {
    throw new Error(`${dist} has no bundles: run \`npm run build\` first`);
  }
  const baseDir = join(root, 'jobharvest-base');
  if (!existsSync(baseDir)) await baseLayer(baseDir, opts.debCache);
  const nodeDir = join(root, 'jobharvest-node');
  if (!existsSync(nodeDir)) {
    await mkdir(join(nodeDir, 'nodejs/bin'), { recursive: true });
    await copyFile(join(REPO_ROOT, 'node_modules/node/bin/node'), join(nodeDir, 'nodejs/bin/node'));
    await chmod(join(nodeDir, 'nodejs/bin/node'), 0o755);
  }
  const appDir = join(root, `jobharvest-app-${tag}`);
  const destination = appCopies[0]!.destination;
  // The build stage deletes the source maps before the COPY.
  await cp(dist, join(appDir, destination), { recursive: true, filter: (src) => !src.endsWith('.map') });
  return writeOciArchive({ name, layers: [baseDir, nodeDir, appDir], config: dockerfileRuntimeConfig(stage) }, join(archives, `jobharvest-${tag}.tar`));
}
