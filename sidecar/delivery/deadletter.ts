// Records the server refused for good, or that could not be sent before the
// drain deadline, go to an NDJSON file on the state volume instead of
// vanishing: one line per record with the reason.
import { open, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import type { Identity } from '../config.ts';
import type { LogRecord } from '../records/record.ts';
import { DocumentEncoder } from '../encode/document.ts';

export const DEAD_LETTER_FILE = 'dead-letter.ndjson';

export interface DeadLetterEntry {
  readonly record: LogRecord;
  readonly reason: string;
  readonly status?: number;
}

export class DeadLetter {
  private fh: FileHandle | undefined;
  private readonly encoder: DocumentEncoder;
  private chain: Promise<void> = Promise.resolve();
  readonly file: string;

  constructor(stateDir: string, identity: Identity) {
    this.file = path.join(stateDir, DEAD_LETTER_FILE);
    this.encoder = new DocumentEncoder(identity);
  }

  /** Appends and syncs; writes are serialised so lines never interleave. */
  write(entries: readonly DeadLetterEntry[]): Promise<void> {
    if (entries.length === 0) return Promise.resolve();
    const time = new Date().toISOString();
    let text = '';
    for (const e of entries) {
      text += `{"time":"${time}","reason":${JSON.stringify(e.reason)}${e.status !== undefined ? `,"status":${e.status}` : ''},"record":${this.encoder.encode(e.record)}}\n`;
    }
    const next = this.chain.then(async () => {
      this.fh ??= await open(this.file, 'a', 0o600);
      await this.fh.write(text);
      await this.fh.datasync();
    });
    this.chain = next.catch(() => {});
    return next;
  }

  async close(): Promise<void> {
    await this.chain;
    await this.fh?.close();
    this.fh = undefined;
  }
}
