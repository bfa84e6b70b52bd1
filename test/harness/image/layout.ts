/**
 * An OCI image layout folder holding one image per platform under one index,
 * the form `skopeo copy --all oci:<dir> docker://…` pushes as a manifest list.
 * Layers are packed as test/harness/node/oci.ts packs them (GNU tar sorted,
 * mtime 0, owner 0, uncompressed), so the same folders give the same digests.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { promisify } from 'node:util';
import { MEDIA, type Descriptor, type ImageRuntimeConfig } from '../node/oci.ts';

const run = promisify(execFile);

/** The tag the layout's index is under: copy from `oci:<dir>:${LAYOUT_TAG}`. */
export const LAYOUT_TAG = 'image';

export interface PlatformImage {
  /** OCI architecture: amd64, arm64. */
  architecture: string;
  /** Folders, bottom layer first. */
  layers: string[];
  config: ImageRuntimeConfig;
}

async function sha256File(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return `sha256:${hash.digest('hex')}`;
}

/** Writes `dir` (emptied first); resolves to the index's manifest descriptors. */
export async function writeOciLayout(dir: string, images: PlatformImage[]): Promise<Descriptor[]> {
  await rm(dir, { recursive: true, force: true });
  const blobs = join(dir, 'blobs', 'sha256');
  await mkdir(blobs, { recursive: true });
  const putBlob = async (data: string): Promise<{ digest: string; size: number }> => {
    const digest = `sha256:${createHash('sha256').update(data).digest('hex')}`;
    await writeFile(join(blobs, digest.slice('sha256:'.length)), data);
    return { digest, size: Buffer.byteLength(data) };
  };
  const manifests: Descriptor[] = [];
  for (const image of images) {
    const layers: Descriptor[] = [];
    for (const folder of image.layers) {
      const tmp = join(dir, 'layer.tar');
      await run('tar', [
        '--sort=name',
        '--mtime=@0',
        '--owner=0',
        '--group=0',
        '--numeric-owner',
        '--format=posix',
        '--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime',
        '-C',
        folder,
        '-cf',
        tmp,
        '.',
      ]);
      const digest = await sha256File(tmp);
      const { size } = await stat(tmp);
      await rename(tmp, join(blobs, digest.slice('sha256:'.length)));
      layers.push({ mediaType: MEDIA.layer, digest, size });
    }
    const config = await putBlob(
      JSON.stringify({
        architecture: image.architecture,
        os: 'linux',
        // Fixed, so that the stand-ins have one digest wherever they are built.
        created: '1970-01-01T00:00:00Z',
        config: image.config,
        rootfs: { type: 'layers', diff_ids: layers.map((l) => l.digest) },
        // One entry per layer: buildah checks the two agree.
        history: image.layers.map((folder) => ({ created: '1970-01-01T00:00:00Z', created_by: `stand-in layer ${basename(folder)}` })),
      }),
    );
    const manifest = await putBlob(JSON.stringify({ schemaVersion: 2, mediaType: MEDIA.manifest, config: { mediaType: MEDIA.config, ...config }, layers }));
    manifests.push({ mediaType: MEDIA.manifest, ...manifest, platform: { architecture: image.architecture, os: 'linux' } } as Descriptor);
  }
  // index.json names one image index, tagged LAYOUT_TAG, that lists the
  // platforms: `oci:<dir>:<tag>` then copies as a list even with one platform.
  const list = await putBlob(JSON.stringify({ schemaVersion: 2, mediaType: MEDIA.index, manifests }));
  await writeFile(
    join(dir, 'index.json'),
    JSON.stringify({ schemaVersion: 2, mediaType: MEDIA.index, manifests: [{ mediaType: MEDIA.index, ...list, annotations: { 'org.opencontainers.image.ref.name': LAYOUT_TAG } }] }),
  );
  await writeFile(join(dir, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
  return manifests;
}
