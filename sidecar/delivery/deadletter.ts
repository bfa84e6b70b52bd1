// Records the server refused for good, or that could not be sent before the
// drain deadline, go to an NDJSON file on the state volume instead of
// vanishing. Each write is one `{"time","reason","status","records":n}` line
// followed by its n `{"record":{...}}` lines: the reason (often an error page
// from the server) is written once per batch, not repeated on every record.
//
// The file lives in the state emptyDir, whose sizeLimit (64Mi by default)
// gets the pod evicted when passed, so it is capped well below that: what
// does not fit is counted (lines and log bytes), not written.
import { open, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import type { Identity } from '../config.ts';
import { log } from '../log.ts';
import type { LogRecord } from '../records/record.ts';
import { DocumentEncoder } from '../encode/document.ts';
import type { Stats } from '../stats.ts';

export const DEAD_LETTER_FILE = 'dead-letter.ndjson';

/** Half the chart's 64Mi state volume: room for checkpoints and slack before eviction. */
export const DEFAULT_DEAD_LETTER_MAX_BYTES = 32 * 1024 * 1024;

export interface DeadLetterEntry {
  readonly record: LogRecord;
  readonly reason: string;
  readonly status?: number;
}

/** What a pipeline does with records it could not deliver; they are counted in the stats either way. */
export interface DeadLetterSink {
  /** The file written, if any. */
  readonly file: string | undefined;
  write(entries: readonly DeadLetterEntry[]): Promise<void>;
  close(): Promise<void>;
}

/**
 * Keeps nothing: for a program with no volume of its own to fill (the
 * harvester), where a refused line is reported by count only.
 */
export class CountingDeadLetter implements DeadLetterSink {
  readonly file = undefined;
  async write(): Promise<void> {}
  async close(): Promise<void> {}
}

export class DeadLetter implements DeadLetterSink {
  private fh: FileHandle | undefined;
  private readonly encoder: DocumentEncoder;
  private chain: Promise<void> = Promise.resolve();
  /** Bytes in the file, including what an earlier run of the sidecar wrote. */
  private size = 0;
  private fullWarned = false;
  readonly file: string;

  constructor(
    stateDir: string,
    identity: Identity,
    private readonly stats: Stats,
    private readonly maxBytes = DEFAULT_DEAD_LETTER_MAX_BYTES,
  ) {
    this.file = path.join(stateDir, DEAD_LETTER_FILE);
    this.encoder = new DocumentEncoder(identity);
  }

  /** Appends what fits under the cap and syncs; writes are serialised so lines never interleave. */
  write(entries: readonly DeadLetterEntry[]): Promise<void> {
    if (entries.length === 0) return Promise.resolve();
    const next = this.chain.then(async () => {
      if (!this.fh) {
        const fh = await open(this.file, 'a', 0o600);
        this.size = (await fh.stat()).size;
        this.fh = fh;
      }
      const text = this.encode(entries);
      if (text === '') return;
      await this.fh.write(text);
      this.size += Buffer.byteLength(text);
      await this.fh.datasync();
    });
    this.chain = next.catch(() => {});
    return next;
  }

  /** Groups of one reason: a header line, then as many record lines as fit under the cap; the rest is counted. */
  private encode(entries: readonly DeadLetterEntry[]): string {
    const time = new Date().toISOString();
    let out = '';
    let room = this.maxBytes - this.size;
    for (let i = 0; i < entries.length; ) {
      const { reason, status } = entries[i]!;
      let j = i;
      while (j < entries.length && entries[j]!.reason === reason && entries[j]!.status === status) j++;
      const head = `,"reason":${JSON.stringify(reason)}${status !== undefined ? `,"status":${status}` : ''}`;
      // Sized for the largest count it could state, so the header never outgrows its room.
      const headBytes = Buffer.byteLength(`{"time":"${time}"${head},"records":${j - i}}\n`);
      let body = '';
      let n = 0;
      if (headBytes < room) {
        let left = room - headBytes;
        for (let k = i; k < j; k++) {
          const line = `{"record":${this.encoder.encode(entries[k]!.record)}}\n`;
          const bytes = Buffer.byteLength(line);
          if (bytes > left) break;
          body += line;
          left -= bytes;
          n++;
        }
      }
      if (n > 0) {
        const header = `{"time":"${time}"${head},"records":${n}}\n`;
        out += header + body;
        room -= Buffer.byteLength(header) + Buffer.byteLength(body);
      }
      if (n < j - i) this.overflow(entries.slice(i + n, j));
      i = j;
    }
    return out;
  }

  private overflow(lost: readonly DeadLetterEntry[]): void {
    let bytes = 0;
    for (const e of lost) bytes += e.record.size;
    this.stats.deadLetterOverflowLines += lost.length;
    this.stats.deadLetterOverflowBytes += bytes;
    if (!this.fullWarned) {
      this.fullWarned = true;
      log.warn('the dead-letter file is full; further records are only counted (dead_letter_overflow_lines)', { deadLetterFile: this.file, maxBytes: this.maxBytes });
    }
  }

  async close(): Promise<void> {
    await this.chain;
    await this.fh?.close();
    this.fh = undefined;
  }
}
