import { createHash } from 'node:crypto';
import { homedir } from 'node:os';
import { join } from 'node:path';

/** Root of the build cache shared by every clone on this machine. */
export function cacheRoot(): string {
  return process.env.JOBHARVEST_CACHE || join(homedir(), '.cache', 'jobharvest');
}

/**
 * A cache folder keyed by everything that determines the build output, so that
 * changing a pin (or the toolchain) lands in a fresh folder instead of reusing
 * a stale binary.
 */
export function keyedDir(kind: string, parts: readonly (string | Buffer)[]): string {
  const h = createHash('sha256');
  for (const p of parts) {
    h.update(p);
    h.update('\0');
  }
  return join(cacheRoot(), kind, h.digest('hex').slice(0, 16));
}
