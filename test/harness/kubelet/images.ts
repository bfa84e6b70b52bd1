/**
 * Images are not pulled: a container runs as a local process, and the test
 * picks its command. An image only matters when the pod relies on what is in
 * it; the jobharvest image is the one case, and it maps to this checkout.
 */
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ENV } from '../../../src/contract/env.ts';
import type { Mount } from './volumes.ts';

export interface ImageSpec {
  /** ENTRYPOINT, used when the container has no `command`. */
  entrypoint: string[];
  /** CMD, used when the container has neither `command` nor `args`. */
  cmd: string[];
  /** Folders of the image's file system that exist on this machine, e.g. /app. */
  files: Mount[];
  /** The image's ENV, under the container's own env. */
  env: Record<string, string>;
}

/** Image name without registry, path, tag or digest: `reg.io/x/jobharvest:0.1.0` → `jobharvest`. */
export function imageName(image: string): string {
  const noDigest = image.split('@')[0]!;
  const last = noDigest.slice(noDigest.lastIndexOf('/') + 1);
  return last.split(':')[0]!;
}

export const REPO = resolve(fileURLToPath(new URL('../../../', import.meta.url)));

/** The Node.js the repository pins (v24), which the image ships too. */
export function repoNode(): string {
  const pinned = join(REPO, 'node_modules/.bin/node');
  return existsSync(pinned) ? pinned : process.execPath;
}

/**
 * The jobharvest image (Dockerfile): ENTRYPOINT /nodejs/bin/node, the bundles
 * in /app. Here /app is this checkout's dist/, built by scripts/bundle.mjs.
 */
export function jobharvestImage(): ImageSpec {
  // The sidecar falls back to container paths (state, log and token
  // directories) when a variable is unset. Declared as the image's ENV, they
  // go through the same path translation as the pod's own env (README.md).
  const env: Record<string, string> = {};
  for (const spec of Object.values(ENV) as Array<{ name: string; default?: string }>) {
    if (spec.default?.startsWith('/')) env[spec.name] = spec.default;
  }
  return {
    env,
    entrypoint: [repoNode()],
    cmd: ['/app/jobharvest.mjs', 'webhook'],
    files: [
      { mountPath: '/app', local: join(REPO, 'dist'), readOnly: true },
      { mountPath: '/nodejs/bin/node', local: repoNode(), readOnly: true },
    ],
  };
}

export type ImageTable = Record<string, ImageSpec>;

export function defaultImages(): ImageTable {
  return { jobharvest: jobharvestImage() };
}

const NO_IMAGE: ImageSpec = { entrypoint: [], cmd: [], files: [], env: {} };

export function lookupImage(table: ImageTable, image: string | undefined): ImageSpec {
  return (image && table[imageName(image)]) || NO_IMAGE;
}
