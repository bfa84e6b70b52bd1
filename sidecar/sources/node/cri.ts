// CRI log decoding: `<RFC3339Nano> <stdout|stderr> <P|F>[:tags] <text>\n`.
// Works on raw bytes so that a chunk turns into records without a regex or an
// intermediate string per line: a record points into the chunk, so callers
// hand over each chunk and never write to it again. Never throws on input:
// anything that is not CRI becomes a raw "malformed" record.
import { CriRecord, FLAG_INCOMPLETE, FLAG_MALFORMED, FLAG_TRUNCATED, type FileMeta, type LogRecord, type Stream } from '../../records/record.ts';
import { timestampShape, TS_CHAR } from '../../records/timestamp.ts';
import { joined, LineSplitter, truncated, type LineHandler } from '../lines.ts';

const SP = 32;
const COLON = 58;
const P = 80;
const F = 70;

interface Pending {
  /** Where the line began in this file: the checkpoint may not pass it until the line is shipped. */
  start: number;
  /**
   * The record's offset, for its id. A line carried over from a rotated file
   * takes the offset of its first fragment in this file, which no other
   * record of this file has.
   */
  offset: number | undefined;
  /** The first fragment's timestamp bytes (a copy). */
  ts: Buffer;
  parts: Buffer[];
  bytes: number;
  dropped: number;
  lineBytes: number;
}

/** P fragments of a rotated file whose rest the runtime wrote into the next file. */
export interface Carried {
  readonly stdout: Pending | undefined;
  readonly stderr: Pending | undefined;
}

export interface DecoderStats {
  malformed: number;
  truncated: number;
}

/** Room for the timestamp, stream and tag in front of a capped message. */
const HEADER_ROOM = 512;

function streamAt(b: Buffer, s: number, e: number): Stream | undefined {
  if (s + 6 > e || b[s] !== 115 || b[s + 1] !== 116 || b[s + 2] !== 100) return undefined; // "std"
  if (b[s + 3] === 111 && b[s + 4] === 117 && b[s + 5] === 116) return 'stdout';
  if (b[s + 3] === 101 && b[s + 4] === 114 && b[s + 5] === 114) return 'stderr';
  return undefined;
}

export class CriDecoder implements LineHandler<LogRecord> {
  private readonly lines: LineSplitter<LogRecord>;
  private pendingOut: Pending | undefined;
  private pendingErr: Pending | undefined;

  constructor(
    private readonly file: FileMeta,
    startOffset: number,
    private readonly maxRecordBytes: number,
    readonly stats: DecoderStats = { malformed: 0, truncated: 0 },
    private readonly now: () => string = () => new Date().toISOString(),
  ) {
    this.lines = new LineSplitter<LogRecord>(this, maxRecordBytes + HEADER_ROOM, startOffset);
  }

  /** File offset of the next byte pushed. */
  get position(): number {
    return this.lines.position;
  }

  /** Decode a chunk that starts at `position`; complete records are appended to `out`. */
  push(chunk: Buffer, out: LogRecord[]): void {
    this.lines.push(chunk, out);
  }

  /**
   * The file is finished (released or drained): whatever is left, an
   * unterminated last line or P fragments without their F, is emitted too.
   * With `keepFragments` (a rotated file, whose lines may go on in the next
   * one), P fragments stay for handOver() or a later end(); returns whether
   * any did.
   */
  end(out: LogRecord[], keepFragments = false): boolean {
    this.lines.end(out);
    if (keepFragments && (this.pendingOut || this.pendingErr)) return true;
    const rest = [this.pendingOut, this.pendingErr].filter((p): p is Pending => p !== undefined).sort((a, b) => a.start - b.start);
    const streams = new Map<Pending, Stream>([
      ...(this.pendingOut ? [[this.pendingOut, 'stdout'] as const] : []),
      ...(this.pendingErr ? [[this.pendingErr, 'stderr'] as const] : []),
    ]);
    this.pendingOut = undefined;
    this.pendingErr = undefined;
    for (const p of rest) out.push(this.finish(p, streams.get(p)!, FLAG_INCOMPLETE, this.position));
    return false;
  }

  /** Gives away the P fragments end() kept. */
  handOver(): Carried {
    const c = { stdout: this.pendingOut, stderr: this.pendingErr };
    this.pendingOut = undefined;
    this.pendingErr = undefined;
    return c;
  }

  /**
   * Takes the fragments a rotated file ended with as the beginning of this
   * file's next line of each stream. Until those lines are complete, the
   * checkpoint of this file stays where reading began, so that a restarted
   * sidecar reads them here again after the rotated file's fragments.
   */
  adopt(c: Carried): void {
    const at = this.position;
    const move = (p: Pending | undefined): Pending | undefined => (p ? { ...p, start: at, offset: undefined } : undefined);
    this.pendingOut = move(c.stdout);
    this.pendingErr = move(c.stderr);
  }

  /** Bytes held back because they do not yet form a complete record. */
  get buffered(): number {
    return this.lines.buffered + (this.pendingOut?.bytes ?? 0) + (this.pendingErr?.bytes ?? 0);
  }

  private safe(end: number): number {
    let safe = end;
    if (this.pendingOut && this.pendingOut.start < safe) safe = this.pendingOut.start;
    if (this.pendingErr && this.pendingErr.start < safe) safe = this.pendingErr.start;
    return safe;
  }

  /** One line: content is b[s, e) without the newline; it occupies `size` file bytes from `start`. */
  line(b: Buffer, s: number, e: number, start: number, size: number, dropped: number, out: LogRecord[]): void {
    const end = start + size;
    // One pass finds the space and checks the timestamp's characters (what isTimestamp does after an indexOf).
    const limit = Math.min(e, s + 41);
    let sp1 = s;
    while (sp1 < limit && TS_CHAR[b[sp1]!] === 1) sp1++;
    if (sp1 >= e || b[sp1] !== SP || !timestampShape(b, s, sp1)) return this.malformed(b, s, e, start, size, dropped, out);
    const stream = streamAt(b, sp1 + 1, e);
    const tagAt = sp1 + 8;
    if (stream === undefined || b[sp1 + 7] !== SP || tagAt >= e) return this.malformed(b, s, e, start, size, dropped, out);
    const tag = b[tagAt];
    if (tag !== P && tag !== F) return this.malformed(b, s, e, start, size, dropped, out);
    let msgStart: number;
    if (tagAt + 1 >= e) msgStart = e;
    else if (b[tagAt + 1] === SP) msgStart = tagAt + 2;
    else if (b[tagAt + 1] === COLON) {
      const sp = b.indexOf(SP, tagAt);
      msgStart = sp < 0 || sp >= e ? e : sp + 1;
    } else return this.malformed(b, s, e, start, size, dropped, out);

    const isOut = stream === 'stdout';
    const pending = isOut ? this.pendingOut : this.pendingErr;
    if (tag === P) {
      const p = pending ?? { start, offset: start, ts: Buffer.from(b.subarray(s, sp1)), parts: [], bytes: 0, dropped: 0, lineBytes: 0 };
      if (!pending) {
        if (isOut) this.pendingOut = p;
        else this.pendingErr = p;
      }
      p.offset ??= start;
      this.appendPart(p, b, msgStart, e);
      p.dropped += dropped;
      p.lineBytes += size;
      return;
    }
    if (pending) {
      pending.offset ??= start;
      this.appendPart(pending, b, msgStart, e);
      pending.dropped += dropped;
      pending.lineBytes += size;
      if (isOut) this.pendingOut = undefined;
      else this.pendingErr = undefined;
      out.push(this.finish(pending, stream, 0, this.safe(end)));
      return;
    }
    const msgLen = e - msgStart;
    if (msgLen > this.maxRecordBytes || dropped > 0) {
      const src = truncated(b.subarray(s, sp1), b.subarray(msgStart, e), this.maxRecordBytes, dropped);
      this.stats.truncated++;
      out.push(CriRecord.of(this.file, start, stream, src, 0, sp1 - s, sp1 - s, src.length, size, this.safe(end), FLAG_TRUNCATED));
      return;
    }
    out.push(CriRecord.of(this.file, start, stream, b, s, sp1, msgStart, e, size, this.safe(end), 0));
  }

  private appendPart(p: Pending, b: Buffer, s: number, e: number): void {
    const room = this.maxRecordBytes - p.bytes;
    const take = Math.max(0, Math.min(room, e - s));
    if (take < e - s) p.dropped += e - s - take;
    if (take > 0) {
      // Copy: the chunk buffer is reused for the next read.
      p.parts.push(Buffer.from(b.subarray(s, s + take)));
      p.bytes += take;
    }
  }

  private finish(p: Pending, stream: Stream, extraFlags: number, safe: number): LogRecord {
    const whole = p.parts.length === 1 ? p.parts[0]! : Buffer.concat(p.parts, p.bytes);
    let flags = extraFlags;
    let src: Buffer;
    if (p.dropped > 0) {
      // The parts were capped as they came; this only backs off a UTF-8 sequence that cap split.
      src = truncated(p.ts, whole, this.maxRecordBytes, p.dropped);
      flags |= FLAG_TRUNCATED;
      this.stats.truncated++;
    } else {
      src = joined(p.ts, whole, whole.length);
    }
    // A carried line that got nothing in this file: the file's end, where no other record starts.
    return CriRecord.of(this.file, p.offset ?? this.position, stream, src, 0, p.ts.length, p.ts.length, src.length, p.lineBytes, safe, flags);
  }

  private malformed(b: Buffer, s: number, e: number, start: number, size: number, dropped: number, out: LogRecord[]): void {
    this.stats.malformed++;
    let flags = FLAG_MALFORMED;
    const line = b.subarray(s, e);
    const ts = Buffer.from(this.now(), 'latin1');
    let src: Buffer;
    if (line.length > this.maxRecordBytes || dropped > 0) {
      src = truncated(ts, line, this.maxRecordBytes, dropped);
      flags |= FLAG_TRUNCATED;
      this.stats.truncated++;
    } else {
      src = joined(ts, line, line.length);
    }
    out.push(CriRecord.of(this.file, start, 'unknown', src, 0, ts.length, ts.length, src.length, size, this.safe(start + size), flags));
  }
}
