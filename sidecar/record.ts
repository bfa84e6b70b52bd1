// The unit that moves from the parser to the sinks. Kept flat and small: at
// 100 MiB/s of 200-byte lines this object is allocated half a million times a
// second.
import { createHash } from 'node:crypto';
import type { FileProgress } from './acks.ts';

export type Stream = 'stdout' | 'stderr' | 'unknown';

/** The record's message was cut at JOBHARVEST_MAX_RECORD_BYTES. */
export const FLAG_TRUNCATED = 1;
/** The line was not CRI; it is forwarded raw with the time it was read. */
export const FLAG_MALFORMED = 2;
/** P fragments whose F never came (file ended or drain). */
export const FLAG_INCOMPLETE = 4;

/** One log file as the pipeline knows it: where it came from and how far it is acknowledged. */
export interface FileMeta {
  readonly container: string;
  readonly restart: number;
  readonly fingerprint: string;
  /** Checkpoint key: stable across renames, compression and sidecar restarts. */
  readonly key: string;
  /** Deterministic record ids are this prefix plus the record's byte offset. */
  readonly idPrefix: string;
  readonly progress: FileProgress;
}

export interface LogRecord {
  readonly file: FileMeta;
  /** Byte offset of the record's first line in the (uncompressed) file. */
  readonly offset: number;
  /** The CRI timestamp text as written by the runtime (RFC 3339, up to ns). */
  readonly ts: string;
  readonly stream: Stream;
  readonly message: string;
  /** Bytes of the file that this record's lines take, newline included. */
  readonly size: number;
  /** The checkpoint may advance to this offset once this record is acknowledged. */
  readonly safe: number;
  readonly flags: number;
}

/**
 * A record as the node-mode parser makes it: the line's bytes stay in the
 * chunk they were read into, and the timestamp and message become strings
 * only if a sink asks for them. Encoders that write bytes (NDJSON) copy them
 * straight from `src`, so the common path makes no string per line, and an
 * in-flight record costs the heap one small object instead of two strings.
 */
export class CriRecord implements LogRecord {
  constructor(
    readonly file: FileMeta,
    readonly offset: number,
    readonly stream: Stream,
    /** Holds the timestamp at [tsAt, tsEnd) and the message at [msgAt, msgEnd). Never written to afterwards. */
    readonly src: Buffer,
    readonly tsAt: number,
    readonly tsEnd: number,
    readonly msgAt: number,
    readonly msgEnd: number,
    readonly size: number,
    readonly safe: number,
    readonly flags: number,
  ) {}

  get ts(): string {
    return this.src.toString('latin1', this.tsAt, this.tsEnd);
  }

  get message(): string {
    return this.src.toString('utf8', this.msgAt, this.msgEnd);
  }
}

/** Message length without making the message a string: bytes for parsed records, UTF-16 units otherwise. */
export function messageLength(r: LogRecord): number {
  return r instanceof CriRecord ? r.msgEnd - r.msgAt : r.message.length;
}

export function fileKey(container: string, restart: number, fingerprint: string): string {
  return `${container}/${restart}/${fingerprint}`;
}

/**
 * Hashing the long parts keeps ids short (ids travel with every record) while
 * the offset stays readable. Same pod uid, container, restart, file and offset
 * always give the same id, so a re-sent record is recognisable downstream.
 */
export function idPrefix(podUid: string, container: string, restart: number, fingerprint: string): string {
  return createHash('sha256').update(`${podUid}\0${container}\0${restart}\0${fingerprint}`).digest('base64url').slice(0, 16) + '-';
}

export function recordId(r: LogRecord): string {
  return r.file.idPrefix + r.offset;
}
