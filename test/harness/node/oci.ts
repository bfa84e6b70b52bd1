/**
 * Writes container images as OCI image-layout archives, the form
 * `ctr images import` reads, without Docker or a registry: each layer is a
 * folder packed by GNU tar (sorted, mtime 0, owned by root, so the same
 * folder gives the same digest), plus an image config and a manifest, and an
 * index whose `io.containerd.image.name` annotation names the image.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, mkdtemp, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export const MEDIA = {
  index: 'application/vnd.oci.image.index.v1+json',
  manifest: 'application/vnd.oci.image.manifest.v1+json',
  config: 'application/vnd.oci.image.config.v1+json',
  layer: 'application/vnd.oci.image.layer.v1.tar',
} as const;

/** The parts of an image config's `config` that a runtime acts on. */
export interface ImageRuntimeConfig {
  User?: string;
  Entrypoint?: string[];
  Cmd?: string[];
  WorkingDir?: string;
  Env?: string[];
  ExposedPorts?: Record<string, Record<string, never>>;
  Labels?: Record<string, string>;
}

export interface ImageSpec {
  /** Full reference, e.g. `docker.io/library/jobharvest:0.1.0`; containerd stores it under this name. */
  name: string;
  /** Folders, bottom layer first; each is packed as it is, owners included as root. */
  layers: string[];
  config: ImageRuntimeConfig;
}

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
}

export interface WrittenImage {
  archive: string;
  manifest: Descriptor;
  /** The image config as written. */
  imageConfig: { architecture: string; os: string; config: ImageRuntimeConfig; rootfs: { type: 'layers'; diff_ids: string[] } };
}

async function sha256File(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return `sha256:${hash.digest('hex')}`;
}

function sha256(data: string | Buffer): string {
  return `sha256:${createHash('sha256').update(data).digest('hex')}`;
}

/** The tag part of a reference, for the OCI `ref.name` annotation. */
export function refTag(name: string): string {
  const noDigest = name.split('@')[0]!;
  const last = noDigest.slice(noDigest.lastIndexOf('/') + 1);
  const colon = last.indexOf(':');
  return colon < 0 ? 'latest' : last.slice(colon + 1);
}

export function goArch(arch: string = process.arch): string {
  const map: Record<string, string> = { x64: 'amd64', arm64: 'arm64', arm: 'arm', ppc64: 'ppc64le', s390x: 's390x' };
  const out = map[arch];
  if (out === undefined) throw new Error(`no OCI architecture for node's ${arch}`);
  return out;
}

/** Writes `archive` (a tar of an OCI layout holding one image). */
export async function writeOciArchive(spec: ImageSpec, archive: string): Promise<WrittenImage> {
  await mkdir(dirname(archive), { recursive: true });
  const layout = await mkdtemp(`${archive}.layout-`);
  try {
    const blobs = join(layout, 'blobs', 'sha256');
    await mkdir(blobs, { recursive: true });
    const putBlob = async (data: string): Promise<{ digest: string; size: number }> => {
      const digest = sha256(data);
      await writeFile(join(blobs, digest.slice('sha256:'.length)), data);
      return { digest, size: Buffer.byteLength(data) };
    };

    const layers: Descriptor[] = [];
    for (const dir of spec.layers) {
      const tmp = join(layout, 'layer.tar');
      // --numeric-owner with owner 0: images are built by root here, but the
      // files must not carry this machine's names or IDs either way.
      await run('tar', [
        '--sort=name',
        '--mtime=@0',
        '--owner=0',
        '--group=0',
        '--numeric-owner',
        '--format=posix',
        '--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime',
        '-C',
        dir,
        '-cf',
        tmp,
        '.',
      ]);
      const digest = await sha256File(tmp);
      const { size } = await stat(tmp);
      await rename(tmp, join(blobs, digest.slice('sha256:'.length)));
      layers.push({ mediaType: MEDIA.layer, digest, size });
    }

    const imageConfig: WrittenImage['imageConfig'] = {
      architecture: goArch(),
      os: 'linux',
      config: spec.config,
      // Uncompressed layers: the diff ID is the layer's own digest.
      rootfs: { type: 'layers', diff_ids: layers.map((l) => l.digest) },
    };
    const config = await putBlob(JSON.stringify(imageConfig));
    const manifestJson = JSON.stringify({
      schemaVersion: 2,
      mediaType: MEDIA.manifest,
      config: { mediaType: MEDIA.config, ...config },
      layers,
    });
    const manifestBlob = await putBlob(manifestJson);
    const manifest: Descriptor = {
      mediaType: MEDIA.manifest,
      ...manifestBlob,
      annotations: {
        'io.containerd.image.name': spec.name,
        'org.opencontainers.image.ref.name': refTag(spec.name),
      },
    };
    await writeFile(join(layout, 'index.json'), JSON.stringify({ schemaVersion: 2, mediaType: MEDIA.index, manifests: [manifest] }));
    await writeFile(join(layout, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
    await run('tar', ['--sort=name', '--mtime=@0', '--owner=0', '--group=0', '--numeric-owner', '-C', layout, '-cf', archive, 'oci-layout', 'index.json', 'blobs']);
    return { archive, manifest, imageConfig };
  } finally {
    await rm(layout, { recursive: true, force: true });
  }
}
