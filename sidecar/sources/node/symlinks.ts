// The pod log directory holds only what the kubelet and the runtime write:
// directories and regular files. A symlink there is planted (a `0.log` ->
// /proc/self/environ would ship the sidecar's token), so discovery skips
// links and files are opened with O_NOFOLLOW, which also closes the race of a
// file swapped for a link between lstat and open.
import { constants } from 'node:fs';
import { log } from '../../log.ts';
import type { Stats } from '../../stats.ts';

/** open(2) flags for a log file: read-only, and ELOOP instead of following a symlink. */
export const OPEN_LOG_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW;

export class SkippedSymlinks {
  private readonly seen = new Set<string>();
  constructor(private readonly stats: Stats) {}

  /** Counts each link once; warns for the first only, so a directory of links cannot flood the log. */
  skip(file: string): void {
    if (this.seen.has(file)) return;
    this.seen.add(file);
    this.stats.symlinksSkipped++;
    if (this.seen.size === 1) log.warn('skipping a symlink in the pod log directory; links are never followed (the summary counts them)', { path: file });
  }
}
