// Durable progress: per file, the offset up to which everything is
// acknowledged (or dead-lettered), and whether the file is finished. Written
// atomically so a crash leaves either the old or the new checkpoint, never a
// torn one.
import { mkdir, open, readFile, rename } from 'node:fs/promises';
import path from 'node:path';
import { log } from '../log.ts';

export const CHECKPOINT_FILE = 'checkpoint.json';

export interface CheckpointEntry {
  /** node mode: bytes of the file; api mode: lines of the container's log. */
  readonly offset: number;
  /** Read to the end, released, and everything in it settled. */
  readonly done: boolean;
  /** Timestamp of the last acknowledged line, as the API or the kubelet wrote it (node mode keeps it for the termination message only). */
  readonly ts?: string;
  /** How many acknowledged lines carry exactly `ts` (node mode: 1, a lower bound, which can only cause lines to be sent again). */
  readonly n?: number;
}

interface CheckpointFile {
  version: 1;
  podUid: string;
  savedAt: string;
  files: Record<string, CheckpointEntry>;
}

/** temp file, fsync, rename, fsync of the directory. */
export async function writeFileAtomic(file: string, data: string): Promise<void> {
  const dir = path.dirname(file);
  const tmp = path.join(dir, `.${path.basename(file)}.${process.pid}.tmp`);
  const fh = await open(tmp, 'w', 0o600);
  try {
    await fh.writeFile(data);
    await fh.sync();
  } finally {
    await fh.close();
  }
  await rename(tmp, file);
  const dh = await open(dir, 'r');
  try {
    await dh.sync();
  } catch {
    // Some file systems refuse fsync on a directory; the rename is still atomic.
  } finally {
    await dh.close();
  }
}

/** Where a pipeline keeps its progress: a file for the sidecar, memory for a program that keeps it elsewhere. */
export interface CheckpointBackend {
  init(): Promise<void>;
  load(): Promise<Map<string, CheckpointEntry>>;
  save(entries: ReadonlyMap<string, CheckpointEntry>): Promise<void>;
}

/** Progress held in memory, seeded by the caller; the harvester keeps its own in the Job. */
export class MemoryCheckpoint implements CheckpointBackend {
  private entries: Map<string, CheckpointEntry>;
  constructor(seed: ReadonlyMap<string, CheckpointEntry> = new Map()) {
    this.entries = new Map(seed);
  }
  async init(): Promise<void> {}
  async load(): Promise<Map<string, CheckpointEntry>> {
    return new Map(this.entries);
  }
  async save(entries: ReadonlyMap<string, CheckpointEntry>): Promise<void> {
    this.entries = new Map(entries);
  }
  /** The last saved progress. */
  get current(): ReadonlyMap<string, CheckpointEntry> {
    return this.entries;
  }
}

export class CheckpointStore implements CheckpointBackend {
  readonly file: string;
  private writing: Promise<void> = Promise.resolve();

  constructor(
    readonly stateDir: string,
    private readonly podUid: string,
  ) {
    this.file = path.join(stateDir, CHECKPOINT_FILE);
  }

  async init(): Promise<void> {
    await mkdir(this.stateDir, { recursive: true });
  }

  /** A missing, unreadable or foreign checkpoint means: start every file at byte 0. */
  async load(): Promise<Map<string, CheckpointEntry>> {
    let text: string;
    try {
      text = await readFile(this.file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') log.warn('checkpoint unreadable, starting from byte 0', { error: err });
      return new Map();
    }
    try {
      const data = JSON.parse(text) as Partial<CheckpointFile>;
      if (data.version !== 1 || typeof data.files !== 'object' || data.files === null) throw new Error('unknown checkpoint format');
      if (data.podUid !== this.podUid) {
        log.warn('checkpoint belongs to another pod, ignoring it', { checkpointPodUid: data.podUid });
        return new Map();
      }
      const out = new Map<string, CheckpointEntry>();
      for (const [k, v] of Object.entries(data.files)) {
        if (!Number.isSafeInteger(v.offset) || v.offset < 0) continue;
        const entry: CheckpointEntry = { offset: v.offset, done: v.done === true };
        if (typeof v.ts === 'string' && Number.isSafeInteger(v.n) && v.n! > 0) out.set(k, { ...entry, ts: v.ts, n: v.n });
        else out.set(k, entry);
      }
      return out;
    } catch (err) {
      log.warn('checkpoint corrupt, starting from byte 0', { error: err });
      return new Map();
    }
  }

  /** Saves are serialised; a later save always lands after an earlier one. */
  save(entries: ReadonlyMap<string, CheckpointEntry>): Promise<void> {
    const body: CheckpointFile = { version: 1, podUid: this.podUid, savedAt: new Date().toISOString(), files: Object.fromEntries(entries) };
    const text = JSON.stringify(body);
    const next = this.writing.then(() => writeFileAtomic(this.file, text));
    this.writing = next.catch(() => {});
    return next;
  }
}
