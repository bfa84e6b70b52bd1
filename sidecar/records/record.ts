// The unit that moves from the parser to the sinks. Kept flat and small: at
// 100 MiB/s of 200-byte lines this object is allocated half a million times a
// second.
import { createHash } from 'node:crypto';
import type { FileProgress } from './progress.ts';

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
  readonly progress: FileProgress<LogRecord>;
}

/** A value parsed from a JSON log line, bounded in width and depth by the shaping stage. */
export type FieldValue = string | number | boolean | null | readonly FieldValue[] | { readonly [key: string]: FieldValue };
export type Fields = { readonly [key: string]: FieldValue };

/**
 * The value with `leaf` applied to every string, number, boolean and null in
 * it: the same object where nothing in it changed (most values), copies only
 * along the paths that did.
 */
export function mapLeaves<T>(v: FieldValue, leaf: (x: string | number | boolean | null) => FieldValue | T): FieldValue | T {
  if (v === null || typeof v !== 'object') return leaf(v);
  if (Array.isArray(v)) {
    let out: Array<FieldValue | T> | undefined;
    for (let i = 0; i < v.length; i++) {
      const x = v[i] as FieldValue;
      const m = mapLeaves(x, leaf);
      if (m !== x) (out ??= v.slice() as Array<FieldValue | T>)[i] = m;
    }
    return (out ?? v) as FieldValue;
  }
  let out: Record<string, FieldValue | T> | undefined;
  const o = v as { readonly [key: string]: FieldValue };
  for (const k of Object.keys(o)) {
    const x = o[k]!;
    const m = mapLeaves(x, leaf);
    // Defined, not assigned, like fromEntries does: a "__proto__" key stays a field and never sets a prototype.
    if (m !== x) Object.defineProperty((out ??= Object.fromEntries(Object.entries(o))), k, { value: m, enumerable: true, writable: true, configurable: true });
  }
  return (out ?? v) as FieldValue;
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
  /**
   * The checkpoint may advance to this offset once this record is
   * acknowledged. Not readonly: the shaping stage lowers it in place, before
   * the record is handed on, while lines before it are still held (remaking
   * the record would cost an object per line of a busy stream).
   */
  safe: number;
  readonly flags: number;
  /** JSON parsing on and the message is a JSON object: its fields. The message stays the line as written. */
  readonly fields?: Fields;
  /** A multiline record: how many lines were joined (their messages joined by "\n"). Absent: one line. */
  readonly lines?: number;
}

const STREAMS: readonly Stream[] = ['stdout', 'stderr', 'unknown'];
/** `bits` holds, from the low end: timestamp length (6 bits), stream (2), flags (3), message start minus timestamp start (20). */
const STREAM_SHIFT = 6;
const FLAGS_SHIFT = 8;
const DELTA_SHIFT = 11;
const MAX_DELTA = 1 << 20;

/**
 * A record as the node-mode parser makes it: the line's bytes stay in the
 * chunk they were read into, and the timestamp and message become strings
 * only if a sink asks for them. Encoders that write bytes (NDJSON) copy them
 * straight from `src`, so the common path makes no string per line. Half a
 * million of these are made a second and each lives until its batch is
 * acknowledged, so the fields are packed: fewer bytes to allocate and for
 * the garbage collector to copy.
 */
export class CriRecord implements LogRecord {
  protected constructor(
    readonly file: FileMeta,
    readonly offset: number,
    /** Holds the timestamp at [tsAt, tsEnd) and the message at [msgAt, msgEnd). Never written to afterwards. */
    readonly src: Buffer,
    readonly tsAt: number,
    readonly msgEnd: number,
    private readonly bits: number,
    public safe: number,
  ) {}

  /**
   * `size` is the file bytes the record takes; a plain line takes its bytes
   * in `src` plus the newline, and only other records store it.
   */
  static of(file: FileMeta, offset: number, stream: Stream, src: Buffer, tsAt: number, tsEnd: number, msgAt: number, msgEnd: number, size: number, safe: number, flags: number): CriRecord {
    if (msgAt - tsAt >= MAX_DELTA) {
      // A tag longer than a megabyte: keep only what the record needs.
      const ts = src.subarray(tsAt, tsEnd);
      src = Buffer.concat([ts, src.subarray(msgAt, msgEnd)]);
      tsAt = 0;
      tsEnd = msgAt = ts.length;
      msgEnd = src.length;
    }
    const bits = (tsEnd - tsAt) | (STREAMS.indexOf(stream) << STREAM_SHIFT) | (flags << FLAGS_SHIFT) | ((msgAt - tsAt) << DELTA_SHIFT);
    if (size === msgEnd - tsAt + 1) return new CriRecord(file, offset, src, tsAt, msgEnd, bits, safe);
    return new SizedCriRecord(file, offset, src, tsAt, msgEnd, bits, safe, size);
  }

  get stream(): Stream {
    return STREAMS[(this.bits >> STREAM_SHIFT) & 3]!;
  }

  get flags(): number {
    return (this.bits >> FLAGS_SHIFT) & 7;
  }

  get tsEnd(): number {
    return this.tsAt + (this.bits & 63);
  }

  get msgAt(): number {
    return this.tsAt + (this.bits >>> DELTA_SHIFT);
  }

  get size(): number {
    return this.msgEnd - this.tsAt + 1;
  }

  get ts(): string {
    return this.src.toString('latin1', this.tsAt, this.tsEnd);
  }

  get message(): string {
    return this.src.toString('utf8', this.msgAt, this.msgEnd);
  }
}

/** Reassembled, truncated or malformed records, whose file bytes are not their bytes in `src`. */
class SizedCriRecord extends CriRecord {
  constructor(file: FileMeta, offset: number, src: Buffer, tsAt: number, msgEnd: number, bits: number, safe: number, private readonly fileBytes: number) {
    super(file, offset, src, tsAt, msgEnd, bits, safe);
  }

  override get size(): number {
    return this.fileBytes;
  }
}

/** Message length without making the message a string: bytes for parsed records, UTF-16 units otherwise. */
export function messageLength(r: LogRecord): number {
  if (r instanceof CriRecord) return r.msgEnd - r.msgAt;
  // A shaped record that is one unchanged line (records/shaped.ts) has its bytes too.
  const origin = (r as { readonly origin?: CriRecord }).origin;
  return origin ? origin.msgEnd - origin.msgAt : r.message.length;
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
