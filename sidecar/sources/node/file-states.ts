// node mode's checkpoint bookkeeping: every file identity met (container,
// restart and fingerprint, so renames and gzip do not change it), how far
// each is acknowledged, and the loaded entries not met yet. Node mode resumes
// a file from its entry; one read to its end and acknowledged is not read
// again; and entries of files gone from disk are forgotten after a few scans.
import type { CheckpointEntry } from '../../delivery/checkpoint.ts';
import { log } from '../../log.ts';
import { FileProgress } from '../../records/progress.ts';
import { fileKey, idPrefix, type LogRecord } from '../../records/record.ts';
import type { FileState } from './tail.ts';

/** Scans in a row a finished file must be absent before its checkpoint entry is dropped. */
const PRUNE_AFTER_SCANS = 3;

/** A file identity met for the first time, and where to start reading it; 'skip' when it is handled already. */
export type Identified = { readonly state: FileState; readonly start: number } | 'skip';

export class FileStates {
  private readonly states = new Map<string, FileState>();
  private scans = 0;

  /**
   * `checkpoint`: the loaded entries, consumed as their files are met.
   * `advanced`: a file's acknowledged position moved.
   */
  constructor(
    private readonly checkpoint: Map<string, CheckpointEntry>,
    private readonly podUid: string,
    private readonly advanced: () => void,
  ) {}

  identify(container: string, restart: number, fp: string): Identified {
    const key = fileKey(container, restart, fp);
    if (this.states.has(key)) return 'skip';
    const entry = this.checkpoint.get(key);
    this.checkpoint.delete(key);
    const meta = {
      container,
      restart,
      fingerprint: fp,
      key,
      idPrefix: idPrefix(this.podUid, container, restart, fp),
      progress: new FileProgress<LogRecord>(entry?.offset ?? 0, () => this.advanced()),
    };
    const state: FileState = { meta, released: entry?.done ?? false, complete: entry?.done ?? false, end: entry?.offset ?? 0, missing: 0, ...(entry?.ts !== undefined ? { resumeTs: entry.ts } : {}) };
    this.states.set(key, state);
    if (entry?.done) return 'skip';
    if (entry) log.info('resuming file from checkpoint', { container, restart, offset: entry.offset });
    return { state, start: entry?.offset ?? 0 };
  }

  /** Checkpoint view: loaded entries not seen yet, plus every file identity met. */
  entries(): Map<string, CheckpointEntry> {
    const out = new Map(this.checkpoint);
    for (const [key, s] of this.states) {
      const committed = s.meta.progress.committed;
      const done = s.complete && committed >= s.end && s.meta.progress.outstanding === 0;
      // The timestamp lets a reader of pods/log resume after this file's last
      // acknowledged line (the termination message); node mode itself needs only the offset.
      const ts = s.meta.progress.committedMark?.ts ?? s.resumeTs;
      out.set(key, ts !== undefined ? { offset: committed, done, ts, n: 1 } : { offset: committed, done });
    }
    return out;
  }

  /** Forget finished files that are gone from disk, so the checkpoint does not grow forever. */
  prune(present: ReadonlySet<string>): void {
    if (++this.scans >= PRUNE_AFTER_SCANS) {
      for (const key of this.checkpoint.keys()) if (!present.has(key)) this.checkpoint.delete(key);
    }
    for (const [key, s] of this.states) {
      if (present.has(key)) {
        s.missing = 0;
        continue;
      }
      const done = s.complete && s.meta.progress.committed >= s.end && s.meta.progress.outstanding === 0;
      if (done && ++s.missing >= PRUNE_AFTER_SCANS) this.states.delete(key);
    }
  }
}
