// CRI log decoding: `<RFC3339Nano> <stdout|stderr> <P|F>[:tags] <text>\n`.
// Works on raw bytes with indexOf so that a 1 MiB chunk turns into records
// without a regex or an intermediate string per line: a record points into
// the chunk, so callers hand over each chunk and never write to it again. Never throws on input:
// anything that is not CRI becomes a raw "malformed" record.
import { CriRecord, FLAG_INCOMPLETE, FLAG_MALFORMED, FLAG_TRUNCATED, type FileMeta, type LogRecord, type Stream } from '../../records/record.ts';

const NL = 10;
const SP = 32;
const COLON = 58;
const P = 80;
const F = 70;

interface Pending {
  start: number;
  /** The first fragment's timestamp bytes (a copy). */
  ts: Buffer;
  parts: Buffer[];
  bytes: number;
  dropped: number;
  lineBytes: number;
}

export interface DecoderStats {
  malformed: number;
  truncated: number;
}

/** Room for the timestamp, stream and tag in front of a capped message. */
const HEADER_ROOM = 512;

export function truncationMarker(dropped: number): string {
  return ` [jobharvest: truncated ${dropped} bytes]`;
}

/**
 * Longest prefix of at most `max` bytes that does not end inside a UTF-8
 * sequence, so a truncated message decodes without a replacement character.
 */
export function utf8Prefix(buf: Buffer, max: number): number {
  const len = Math.min(max, buf.length);
  for (let i = len - 1; i >= 0 && i >= len - 4; i--) {
    const c = buf[i]!;
    if ((c & 0x80) === 0) return len;
    if ((c & 0xc0) === 0xc0) {
      const need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
      return i + need <= len ? len : i;
    }
  }
  return len;
}

/** `head` then the first `keep` bytes of `body`, then `tail`, in one new buffer: the rare records that are not a plain slice of a chunk. */
function joined(head: Buffer, body: Buffer, keep: number, tail?: string): Buffer {
  const t = tail === undefined ? 0 : Buffer.byteLength(tail, 'latin1');
  const out = Buffer.allocUnsafe(head.length + keep + t);
  head.copy(out, 0);
  body.copy(out, head.length, 0, keep);
  if (tail !== undefined) out.write(tail, head.length + keep, 'latin1');
  return out;
}

/** digits, '+', '-', '.', ':', 'T', 'Z': keeps the text safe to splice into JSON. */
const TS_CHAR = new Uint8Array(256);
for (const c of '0123456789+-.:TZ') TS_CHAR[c.charCodeAt(0)] = 1;

function timestampShape(b: Buffer, s: number, e: number): boolean {
  const n = e - s;
  return n >= 20 && n <= 40 && b[s + 4] === 45 && b[s + 7] === 45 && b[s + 10] === 84;
}

export function isTimestamp(b: Buffer, s: number, e: number): boolean {
  if (!timestampShape(b, s, e)) return false;
  for (let i = s; i < e; i++) if (TS_CHAR[b[i]!] !== 1) return false;
  return true;
}

function streamAt(b: Buffer, s: number, e: number): Stream | undefined {
  if (s + 6 > e || b[s] !== 115 || b[s + 1] !== 116 || b[s + 2] !== 100) return undefined; // "std"
  if (b[s + 3] === 111 && b[s + 4] === 117 && b[s + 5] === 116) return 'stdout';
  if (b[s + 3] === 101 && b[s + 4] === 114 && b[s + 5] === 114) return 'stderr';
  return undefined;
}

export class CriDecoder {
  /** File offset of the next byte pushed. */
  position: number;
  private carry: Buffer | undefined;
  private carryLen = 0;
  private carryStart = 0;
  private overflow = 0;
  private pendingOut: Pending | undefined;
  private pendingErr: Pending | undefined;
  private readonly lineLimit: number;

  constructor(
    private readonly file: FileMeta,
    startOffset: number,
    private readonly maxRecordBytes: number,
    readonly stats: DecoderStats = { malformed: 0, truncated: 0 },
    private readonly now: () => string = () => new Date().toISOString(),
  ) {
    this.position = startOffset;
    this.lineLimit = maxRecordBytes + HEADER_ROOM;
  }

  /** Decode a chunk that starts at `position`; complete records are appended to `out`. */
  push(chunk: Buffer, out: LogRecord[]): void {
    const base = this.position;
    const len = chunk.length;
    let s = 0;
    if (this.carryLen > 0 || this.overflow > 0) {
      const nl = chunk.indexOf(NL);
      if (nl < 0) {
        this.appendCarry(chunk, 0, len);
        this.position = base + len;
        return;
      }
      this.appendCarry(chunk, 0, nl);
      const size = this.carryLen + this.overflow + 1;
      const dropped = this.overflow;
      const line = this.carry!;
      const lineLen = this.carryLen;
      const start = this.carryStart;
      this.carryLen = 0;
      this.overflow = 0;
      this.carry = undefined;
      this.line(line, 0, lineLen, start, size, dropped, out);
      s = nl + 1;
    }
    for (;;) {
      const nl = chunk.indexOf(NL, s);
      if (nl < 0) break;
      if (nl - s > this.lineLimit) {
        this.line(chunk, s, s + this.lineLimit, base + s, nl - s + 1, nl - s - this.lineLimit, out);
      } else {
        this.line(chunk, s, nl, base + s, nl - s + 1, 0, out);
      }
      s = nl + 1;
    }
    if (s < len) {
      this.carryStart = base + s;
      this.appendCarry(chunk, s, len);
    }
    this.position = base + len;
  }

  /**
   * The file is finished (released or drained): whatever is left, an
   * unterminated last line or P fragments without their F, is emitted too.
   */
  end(out: LogRecord[]): void {
    if (this.carryLen > 0 || this.overflow > 0) {
      const line = this.carry!;
      const lineLen = this.carryLen;
      const size = this.carryLen + this.overflow;
      const dropped = this.overflow;
      this.carry = undefined;
      this.carryLen = 0;
      this.overflow = 0;
      this.line(line, 0, lineLen, this.carryStart, size, dropped, out);
    }
    const rest = [this.pendingOut, this.pendingErr].filter((p): p is Pending => p !== undefined).sort((a, b) => a.start - b.start);
    const streams = new Map<Pending, Stream>([
      ...(this.pendingOut ? [[this.pendingOut, 'stdout'] as const] : []),
      ...(this.pendingErr ? [[this.pendingErr, 'stderr'] as const] : []),
    ]);
    this.pendingOut = undefined;
    this.pendingErr = undefined;
    for (const p of rest) out.push(this.finish(p, streams.get(p)!, FLAG_INCOMPLETE, this.position));
  }

  /** Bytes held back because they do not yet form a complete record. */
  get buffered(): number {
    return this.carryLen + (this.pendingOut?.bytes ?? 0) + (this.pendingErr?.bytes ?? 0);
  }

  private appendCarry(src: Buffer, s: number, e: number): void {
    const room = this.lineLimit - this.carryLen;
    const take = Math.min(room, e - s);
    if (take < e - s) this.overflow += e - s - take;
    if (take <= 0) return;
    if (!this.carry || this.carry.length < this.carryLen + take) {
      const next = Buffer.allocUnsafe(Math.min(this.lineLimit, Math.max(this.carryLen + take, (this.carry?.length ?? 0) * 2, 4096)));
      if (this.carry) this.carry.copy(next, 0, 0, this.carryLen);
      this.carry = next;
    }
    src.copy(this.carry, this.carryLen, s, s + take);
    this.carryLen += take;
  }

  private safe(end: number): number {
    let safe = end;
    if (this.pendingOut && this.pendingOut.start < safe) safe = this.pendingOut.start;
    if (this.pendingErr && this.pendingErr.start < safe) safe = this.pendingErr.start;
    return safe;
  }

  /** One line: content is b[s, e) without the newline; it occupies `size` file bytes from `start`. */
  private line(b: Buffer, s: number, e: number, start: number, size: number, dropped: number, out: LogRecord[]): void {
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
      const p = pending ?? { start, ts: Buffer.from(b.subarray(s, sp1)), parts: [], bytes: 0, dropped: 0, lineBytes: 0 };
      if (!pending) {
        if (isOut) this.pendingOut = p;
        else this.pendingErr = p;
      }
      this.appendPart(p, b, msgStart, e);
      p.dropped += dropped;
      p.lineBytes += size;
      return;
    }
    if (pending) {
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
      const msg = b.subarray(msgStart, e);
      const cut = utf8Prefix(msg, this.maxRecordBytes);
      const src = joined(b.subarray(s, sp1), msg, cut, truncationMarker(msgLen - cut + dropped));
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
      const keep = utf8Prefix(whole, whole.length);
      src = joined(p.ts, whole, keep, truncationMarker(p.dropped + whole.length - keep));
      flags |= FLAG_TRUNCATED;
      this.stats.truncated++;
    } else {
      src = joined(p.ts, whole, whole.length);
    }
    return CriRecord.of(this.file, p.start, stream, src, 0, p.ts.length, p.ts.length, src.length, p.lineBytes, safe, flags);
  }

  private malformed(b: Buffer, s: number, e: number, start: number, size: number, dropped: number, out: LogRecord[]): void {
    this.stats.malformed++;
    let flags = FLAG_MALFORMED;
    const line = b.subarray(s, e);
    const ts = Buffer.from(this.now(), 'latin1');
    let src: Buffer;
    if (line.length > this.maxRecordBytes || dropped > 0) {
      const cut = utf8Prefix(line, this.maxRecordBytes);
      src = joined(ts, line, cut, truncationMarker(line.length - cut + dropped));
      flags |= FLAG_TRUNCATED;
      this.stats.truncated++;
    } else {
      src = joined(ts, line, line.length);
    }
    out.push(CriRecord.of(this.file, start, 'unknown', src, 0, ts.length, ts.length, src.length, size, this.safe(start + size), flags));
  }
}
