import { open, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { newStats } from '../stats.ts';
import { OPEN_LOG_FLAGS, SkippedSymlinks } from '../sources/node/symlinks.ts';
import { tmpDir } from '../../test/support/sidecar-helpers.ts';

describe('symlinks in the pod log directory', () => {
  it('a log file swapped for a link after discovery fails to open (ELOOP) instead of being followed', async () => {
    const dir = await tmpDir();
    await writeFile(path.join(dir, 'target'), 'secret');
    await symlink(path.join(dir, 'target'), path.join(dir, '0.log'));
    await expect(open(path.join(dir, '0.log'), OPEN_LOG_FLAGS)).rejects.toMatchObject({ code: 'ELOOP' });
    const fh = await open(path.join(dir, 'target'), OPEN_LOG_FLAGS);
    await fh.close();
  });

  it('counts each link once, however many scans see it', () => {
    const stats = newStats();
    const skipped = new SkippedSymlinks(stats);
    skipped.skip('/a/0.log');
    skipped.skip('/a/0.log');
    skipped.skip('/a/1.log');
    expect(stats.symlinksSkipped).toBe(2);
  });
});
