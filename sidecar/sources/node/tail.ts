// Readers for one log file each. A PlainTail follows a file by its open
// descriptor, so it keeps reading after the kubelet renames or deletes it,
// and only lets go once the runtime writes somewhere else and everything is
// read. A GzTail reads a compressed rotation that was never seen plain.
// Each step returns what it read, and whether it let go of the file, to the
// node source, which passes the records on and keeps the files' states.
import { stat, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import zlib from 'node:zlib';
import { CriDecoder, type DecoderStats } from './cri.ts';
import { plainFingerprint } from './fingerprint.ts';
import { log } from '../../log.ts';
import { fileKey, type FileMeta, type LogRecord } from '../../records/record.ts';

/**
 * Big enough that syscalls and per-chunk work stay rare; small because records
 * hold their chunk until acknowledged, so every in-flight batch pins one or two
 * chunks (measured: 256 KiB beats 1 MiB on RSS by 8 MiB and on CPU too).
 */
export const CHUNK_BYTES = 256 * 1024;

/** What the source knows about one file identity (container, restart, fingerprint). */
export interface FileState {
  readonly meta: FileMeta;
  released: boolean;
  /** Offset the file was read to when released. */
  end: number;
  /**
   * Released because the runtime moved on (rotated away, deleted, or a
   * compressed rotation read to its end): nothing can be appended any more.
   * A live file released by the drain is not complete, so a restarted
   * sidecar would still follow it from its offset.
   */
  complete: boolean;
  /** Consecutive scans that did not find the file on disk. */
  missing: number;
  /** Timestamp of the last acknowledged line as the checkpoint had it, until a new one is acknowledged. */
  readonly resumeTs?: string;
}

/** A file identity a tail has finished with: read to `end`. */
export interface Release {
  readonly state: FileState;
  readonly end: number;
  /** See FileState.complete. */
  readonly complete: boolean;
  /**
   * A rotated file that ended in P fragments: its decoder still holds them,
   * for the next file of the run to take (the runtime reopened the log in
   * the middle of a line) or, if none does, to end() as incomplete lines.
   */
  readonly fragments?: CriDecoder;
}

/** What one step of a tail hands back to the source. */
export interface Step {
  /** 'progress': step again soon; 'idle': nothing new for now; 'done': the tail has finished and can be closed. */
  readonly result: 'progress' | 'idle' | 'done';
  /** Records read by this step, in file order. */
  readonly records: LogRecord[];
  /** Bytes taken from the file (decompressed, for a compressed rotation). */
  readonly bytes: number;
  /** Set on the step that finished with a file identity. */
  readonly released: Release | undefined;
}

const NO_RECORDS: LogRecord[] = [];
// Shared: a tail that is waiting for its file to grow makes no object per poll.
export const IDLE: Step = Object.freeze({ result: 'idle', records: NO_RECORDS, bytes: 0, released: undefined });
export const DONE: Step = Object.freeze({ result: 'done', records: NO_RECORDS, bytes: 0, released: undefined });

/**
 * The read buffer the tails share: the source reads one chunk at a time. A
 * big read gives the buffer away (its records hold it until they are
 * acknowledged) and reading goes on in a new one; a small read, a live file's
 * few new lines, is copied out, so that a trickle of lines does not pin a
 * whole chunk per read.
 */
export class ReadBuffer {
  buffer: Buffer = Buffer.allocUnsafeSlow(CHUNK_BYTES);

  /** The first `n` bytes of `buffer` as a buffer of their own, never read into again. */
  take(n: number): Buffer {
    const buf = this.buffer;
    if (n < CHUNK_BYTES / 4) return Buffer.from(buf.subarray(0, n));
    this.buffer = Buffer.allocUnsafeSlow(CHUNK_BYTES);
    return buf.subarray(0, n);
  }
}

/** What every tail reads with. */
export interface TailOptions {
  readonly maxRecordBytes: number;
  readonly pollMs: number;
  readonly stats: DecoderStats;
  readonly reads: ReadBuffer;
}

export type Adoption = 'adopted' | 'resumed' | 'late';

export interface Tail {
  readonly id: string;
  readonly container: string;
  readonly restart: number;
  path: string;
  readonly state: FileState | undefined;
  step(final: boolean): Promise<Step>;
  /**
   * Offers the fragments a rotated file ended with to the next file of its
   * run. `adopted`: this tail reads its file from byte 0 and has decoded
   * nothing yet; it took them, and holds its checkpoint at byte 0 until those
   * lines are complete. `resumed`: it resumed past byte 0 from a checkpoint,
   * which it can only have reached once those lines were shipped, before a
   * restart of the sidecar; it did not take them. `late`: it decoded lines
   * already; it did not take them.
   */
  adopt(from: CriDecoder): Adoption;
  /** Bytes known to exist but not read yet (plain files only). */
  unread(): Promise<number>;
  close(): Promise<void>;
}

export class PlainTail implements Tail {
  state: FileState | undefined;
  private decoder: CriDecoder | undefined;
  private eofSince = 0;
  private decoded = false;

  constructor(
    private readonly fh: FileHandle,
    readonly id: string,
    private readonly ino: number,
    public path: string,
    readonly container: string,
    readonly restart: number,
    private readonly opts: TailOptions,
  ) {}

  /** Checkpoint key, once the head could be fingerprinted. */
  key: string | undefined;

  /** Fingerprints the head; undefined while it is too short to tell (unless `final`). */
  async fingerprint(final: boolean): Promise<string | undefined> {
    const fp = await plainFingerprint(this.fh, final);
    if (fp) this.key = fileKey(this.container, this.restart, fp);
    return fp;
  }

  /** Starts reading the identity `state` at `start`, or from byte 0 if the file is shorter than that now. */
  async begin(state: FileState, start: number): Promise<void> {
    const { size } = await this.fh.stat();
    const from = start <= size ? start : 0;
    this.state = state;
    if (from !== start) state.meta.progress.committed = 0;
    this.decoder = new CriDecoder(state.meta, from, this.opts.maxRecordBytes, this.opts.stats);
  }

  /** One read; `begin` must have been called. */
  async step(final: boolean): Promise<Step> {
    const d = this.decoder!;
    const reads = this.opts.reads;
    const buf = reads.buffer;
    const { bytesRead } = await this.fh.read(buf, 0, buf.length, d.position);
    if (bytesRead > 0) {
      this.eofSince = 0;
      this.decoded = true;
      const records: LogRecord[] = [];
      d.push(reads.take(bytesRead), records);
      return { result: 'progress', records, bytes: bytesRead, released: undefined };
    }
    const st = await this.fh.stat();
    if (st.size < d.position) {
      log.warn('file shrank, reading it again from byte 0', { path: this.path, size: st.size, offset: d.position });
      const step = this.finish('progress', true, false);
      this.decoder = undefined;
      this.state = undefined;
      this.decoded = false;
      return step;
    }
    const gone = st.nlink === 0 || (await this.replaced());
    if (final) return this.finish('done', gone, gone);
    if (gone) {
      // The runtime writes elsewhere now; wait one poll so that a write that
      // raced with the reopen is still picked up before letting go.
      const now = Date.now();
      if (this.eofSince === 0) this.eofSince = now;
      else if (now - this.eofSince >= this.opts.pollMs) return this.finish('done', true, true);
    }
    return IDLE;
  }

  adopt(from: CriDecoder): Adoption {
    const d = this.decoder!;
    if (this.decoded) return 'late';
    if (d.position !== 0) return 'resumed';
    d.adopt(from.handOver());
    return 'adopted';
  }

  /** True once `<restart>.log` is another file: the kubelet rotated and the runtime reopened. */
  private async replaced(): Promise<boolean> {
    try {
      const live = await stat(path.join(path.dirname(this.path), `${this.restart}.log`));
      return live.ino !== this.ino;
    } catch {
      return false;
    }
  }

  /** `rotated`: the runtime went on in another file, where a line left in P fragments here goes on. */
  private finish(result: Step['result'], complete: boolean, rotated: boolean): Step {
    const d = this.decoder!;
    const records: LogRecord[] = [];
    const kept = d.end(records, rotated);
    return { result, records, bytes: 0, released: { state: this.state!, end: d.position, complete, ...(kept ? { fragments: d } : {}) } };
  }

  /** True once `begin` ran and until a shrunk file needs identifying again. */
  get started(): boolean {
    return this.decoder !== undefined;
  }

  async unread(): Promise<number> {
    try {
      const { size } = await this.fh.stat();
      return Math.max(0, size - (this.decoder?.position ?? 0));
    } catch {
      return 0;
    }
  }

  async close(): Promise<void> {
    await this.fh.close().catch(() => {});
  }
}

export class GzTail implements Tail {
  private iterator: AsyncIterator<Buffer> | undefined;
  private readonly decoder: CriDecoder;
  /** Decompressed bytes consumed so far, including the skipped checkpointed prefix. */
  private consumed = 0;
  private decoded = false;

  constructor(
    private readonly fh: FileHandle,
    readonly id: string,
    public path: string,
    readonly container: string,
    readonly restart: number,
    readonly state: FileState,
    private readonly start: number,
    opts: TailOptions,
  ) {
    this.decoder = new CriDecoder(state.meta, start, opts.maxRecordBytes, opts.stats);
  }

  async step(): Promise<Step> {
    if (!this.iterator) {
      const rs = this.fh.createReadStream({ start: 0, autoClose: false, highWaterMark: CHUNK_BYTES });
      const gunzip = zlib.createGunzip({ chunkSize: CHUNK_BYTES });
      rs.on('error', (err) => gunzip.destroy(err));
      rs.pipe(gunzip);
      this.iterator = gunzip[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
    }
    let next: IteratorResult<Buffer>;
    try {
      next = await this.iterator.next();
    } catch (err) {
      log.warn('compressed log ends early or is corrupt; shipped what it held', { path: this.path, error: err });
      next = { done: true, value: undefined };
    }
    if (next.done) {
      const records: LogRecord[] = [];
      const kept = this.decoder.end(records, true);
      return { result: 'done', records, bytes: 0, released: { state: this.state, end: this.decoder.position, complete: true, ...(kept ? { fragments: this.decoder } : {}) } };
    }
    let chunk = next.value;
    const from = this.consumed;
    this.consumed += chunk.length;
    if (this.consumed <= this.start) return { result: 'progress', records: NO_RECORDS, bytes: 0, released: undefined };
    if (from < this.start) chunk = chunk.subarray(this.start - from);
    this.decoded = true;
    const records: LogRecord[] = [];
    this.decoder.push(chunk, records);
    return { result: 'progress', records, bytes: chunk.length, released: undefined };
  }

  adopt(from: CriDecoder): Adoption {
    if (this.decoded) return 'late';
    if (this.start !== 0) return 'resumed';
    this.decoder.adopt(from.handOver());
    return 'adopted';
  }

  async unread(): Promise<number> {
    return 0;
  }

  async close(): Promise<void> {
    await this.iterator?.return?.();
    await this.fh.close().catch(() => {});
  }
}
