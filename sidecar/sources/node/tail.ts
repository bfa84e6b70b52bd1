// Readers for one log file each. A PlainTail follows a file by its open
// descriptor, so it keeps reading after the kubelet renames or deletes it,
// and only lets go once the runtime writes somewhere else and everything is
// read. A GzTail reads a compressed rotation that was never seen plain.
import { stat, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import zlib from 'node:zlib';
import { CriDecoder } from './cri.ts';
import { plainFingerprint } from './fingerprint.ts';
import { log } from '../../log.ts';
import { fileKey, type FileMeta, type LogRecord } from '../../records/record.ts';
import type { Stats } from '../../stats.ts';

export type StepResult = 'progress' | 'idle' | 'done';

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
}

export type Identified = { readonly state: FileState; readonly start: number } | 'skip';

export interface TailEnv {
  readonly maxRecordBytes: number;
  readonly pollMs: number;
  readonly stats: Stats;
  /** Read buffer shared by the tails: the source reads one chunk at a time. */
  buffer: Buffer;
  /**
   * The first `n` bytes of `buffer` as a buffer of their own: records point
   * into the chunks they were parsed from, so a chunk must never be read
   * into again.
   */
  keep(n: number): Buffer;
  identify(container: string, restart: number, fingerprint: string): Identified;
  emit(records: LogRecord[]): Promise<void>;
  release(state: FileState, end: number, complete: boolean): void;
}

export interface Tail {
  readonly id: string;
  readonly container: string;
  readonly restart: number;
  path: string;
  readonly state: FileState | undefined;
  step(final: boolean): Promise<StepResult>;
  /** Bytes known to exist but not read yet (plain files only). */
  unread(): Promise<number>;
  close(): Promise<void>;
}

export class PlainTail implements Tail {
  state: FileState | undefined;
  private decoder: CriDecoder | undefined;
  private eofSince = 0;

  constructor(
    private readonly fh: FileHandle,
    readonly id: string,
    private readonly ino: number,
    public path: string,
    readonly container: string,
    readonly restart: number,
    private readonly env: TailEnv,
  ) {}

  /** Checkpoint key, once the head could be fingerprinted. */
  key: string | undefined;

  /** Reads the head; 'skip' when this content is already handled. */
  async identify(final: boolean): Promise<boolean | 'skip'> {
    const fp = await plainFingerprint(this.fh, final);
    if (!fp) return false;
    this.key = fileKey(this.container, this.restart, fp);
    const r = this.env.identify(this.container, this.restart, fp);
    if (r === 'skip') return 'skip';
    const { size } = await this.fh.stat();
    const start = r.start <= size ? r.start : 0;
    this.state = r.state;
    if (start !== r.start) r.state.meta.progress.committed = 0;
    this.decoder = new CriDecoder(r.state.meta, start, this.env.maxRecordBytes, this.env.stats);
    return true;
  }

  async step(final: boolean): Promise<StepResult> {
    if (!this.decoder) {
      const r = await this.identify(final);
      if (r === 'skip') return 'done';
      if (!r) return final ? 'done' : 'idle';
    }
    const d = this.decoder!;
    const buf = this.env.buffer;
    const { bytesRead } = await this.fh.read(buf, 0, buf.length, d.position);
    if (bytesRead > 0) {
      this.eofSince = 0;
      const out: LogRecord[] = [];
      d.push(this.env.keep(bytesRead), out);
      this.env.stats.bytesRead += bytesRead;
      await this.env.emit(out);
      return 'progress';
    }
    const st = await this.fh.stat();
    if (st.size < d.position) {
      log.warn('file shrank, reading it again from byte 0', { path: this.path, size: st.size, offset: d.position });
      await this.finish(true);
      this.decoder = undefined;
      this.state = undefined;
      return 'progress';
    }
    const gone = st.nlink === 0 || (await this.replaced());
    if (final) {
      await this.finish(gone);
      return 'done';
    }
    if (gone) {
      // The runtime writes elsewhere now; wait one poll so that a write that
      // raced with the reopen is still picked up before letting go.
      const now = Date.now();
      if (this.eofSince === 0) this.eofSince = now;
      else if (now - this.eofSince >= this.env.pollMs) {
        await this.finish(true);
        return 'done';
      }
    }
    return 'idle';
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

  private async finish(complete: boolean): Promise<void> {
    const d = this.decoder;
    if (!d || !this.state) return;
    const out: LogRecord[] = [];
    d.end(out);
    if (out.length > 0) await this.env.emit(out);
    this.env.release(this.state, d.position, complete);
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

  constructor(
    private readonly fh: FileHandle,
    readonly id: string,
    public path: string,
    readonly container: string,
    readonly restart: number,
    readonly state: FileState,
    private readonly start: number,
    private readonly env: TailEnv,
  ) {
    this.decoder = new CriDecoder(state.meta, start, env.maxRecordBytes, env.stats);
  }

  async step(): Promise<StepResult> {
    if (!this.iterator) {
      const rs = this.fh.createReadStream({ start: 0, autoClose: false, highWaterMark: 256 * 1024 });
      const gunzip = zlib.createGunzip({ chunkSize: 256 * 1024 });
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
      const out: LogRecord[] = [];
      this.decoder.end(out);
      if (out.length > 0) await this.env.emit(out);
      this.env.release(this.state, this.decoder.position, true);
      return 'done';
    }
    let chunk = next.value;
    const from = this.consumed;
    this.consumed += chunk.length;
    if (this.consumed <= this.start) return 'progress';
    if (from < this.start) chunk = chunk.subarray(this.start - from);
    const out: LogRecord[] = [];
    this.decoder.push(chunk, out);
    this.env.stats.bytesRead += chunk.length;
    await this.env.emit(out);
    return 'progress';
  }

  async unread(): Promise<number> {
    return 0;
  }

  async close(): Promise<void> {
    await this.iterator?.return?.();
    await this.fh.close().catch(() => {});
  }
}

