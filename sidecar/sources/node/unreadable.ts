// Files and directories under the pod log directory that exist but cannot be
// opened (EACCES with CRI-O's 0600 files, a user-namespaced pod, ...). Their
// lines are lost, so they must not look like success: each is warned about
// once, counted with its size from lstat, and makes the outcome incomplete.
// A file that becomes readable later (permissions fixed) is forgotten again.
import { lstat } from 'node:fs/promises';
import { log } from '../../log.ts';
import type { Stats } from '../../stats.ts';

export class UnreadableFiles {
  /** path -> bytes lost (0 for a directory: its files are not known). */
  private readonly files = new Map<string, number>();

  constructor(private readonly stats: Stats) {}

  async note(file: string, err: unknown): Promise<void> {
    let bytes = 0;
    try {
      const st = await lstat(file);
      if (st.isFile()) bytes = st.size;
    } catch {
      // Gone meanwhile: still unread, size unknown.
    }
    const known = this.files.has(file);
    this.files.set(file, Math.max(bytes, this.files.get(file) ?? 0));
    this.update();
    if (!known) log.warn('cannot open a log file or directory; its lines are not shipped', { path: file, bytes, error: err });
  }

  readable(file: string): void {
    if (!this.files.delete(file)) return;
    this.update();
    log.info('log file or directory readable again', { path: file });
  }

  private update(): void {
    let bytes = 0;
    for (const b of this.files.values()) bytes += b;
    this.stats.unreadableFiles = this.files.size;
    this.stats.unreadableBytes = bytes;
  }
}
