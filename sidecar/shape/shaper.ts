// The shaping stage, between a source's emit and the batcher: joins
// multiline events, parses JSON lines into fields and masks secrets. Built
// only when some shaping option is on, and loaded with import() so that a
// default sidecar never parses any of it.
//
// Lossless: a line held in an open event is not acknowledged, so no record
// may let its file's checkpoint move past that line. Joining is per file and
// stream; a line of the other stream of the same file (or a joined event of
// it) goes out while an event is open with its `safe` capped at the open
// event's first offset, rather than ending the open event at every change of
// stream: a Python traceback on stderr is routinely interleaved with progress
// lines on stdout, and ending it there would cut it into pieces. What was
// capped is owed, and the next record of the file that may carry it does
// (`FileShape.owed`), so a file's checkpoint still reaches its end.
import { ConfigError } from '../config.ts';
import type { Stats } from '../stats.ts';
import { AnyValueArena, JSON_OK, JSON_PLAIN, JsonScan, objectAhead, scanJson } from '../encode/json-anyvalue.ts';
import { SEVERITY_KEY_BYTES, severityFound } from '../encode/severity.ts';
import { CriRecord, type FileMeta, type LogRecord, type Stream } from '../records/record.ts';
import { PreparedJsonRecord, ShapedRecord, type JsonFields } from '../records/shaped.ts';
import { utf8Valid } from '../records/utf8.ts';
import { parseJsonFields } from './json.ts';
import { Masker, type MaskState } from './mask.ts';
import { Joiner, literalPrefixes, type Group, type Slot } from './multiline.ts';
import type { JsonSettings, ShapingSettings } from '../shaping-settings.ts';

interface FileShape {
  /** One slot per stream. */
  readonly slots: Record<Stream, Slot>;
  /** The highest `safe` a record of the file was given less than: the checkpoint may go there once nothing before it is held. */
  owed: number;
  /** Per stream: where a private key begun in an earlier record stands. */
  readonly masks: Record<Stream, MaskState>;
}

export type Emit = (records: LogRecord[]) => Promise<void>;

const NO_LINES: readonly LogRecord[] = [];

/** Compiles the RE2 patterns the way building the stage would; the problems, or none. */
export function shapingProblems(settings: ShapingSettings): string[] {
  try {
    if (settings.multiline) new Joiner(settings.multiline);
    if (settings.mask) new Masker(settings.mask);
    return [];
  } catch (err) {
    return err instanceof ConfigError ? [...err.problems] : [(err as Error).message];
  }
}

export interface ShaperOptions {
  /**
   * The sink encodes OTLP protobuf: a JSON line's value is written here, in
   * the pass that decides it is JSON, for the encoder to copy (instead of a
   * pass to decide here and another to write there).
   */
  readonly otlpValues?: boolean;
  /** How long push() works on its lines before it lets the event loop run (default SLICE_MS). */
  readonly sliceMs?: number;
}

/**
 * The longest push() keeps the event loop to itself while RE2 patterns are
 * matched: with a line's own bound (a start pattern reads 1 KiB of it), the
 * loop gets a turn at least every SLICE_MS plus one line. The harvester runs
 * this engine in the loop that renews its Lease, and a batch of a tenant's
 * lines must not outlast the renew deadline.
 */
export const SLICE_MS = 20;

const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

export class Shaper {
  private readonly joiner: Joiner | undefined;
  private readonly arena: AnyValueArena | undefined;
  /** What the last look at a line's JSON bytes found. */
  private readonly scan = new JsonScan();
  private readonly masker: Masker | undefined;
  private readonly json: JsonSettings | undefined;
  private readonly files = new Map<FileMeta, FileShape>();
  // The JsonFields its records share: parsed or scanned, with or without the line as written.
  private readonly jsonFields: JsonFields | undefined;
  private readonly jsonFieldsExact: JsonFields | undefined;
  private readonly jsonScanned: JsonFields | undefined;
  private readonly jsonScannedExact: JsonFields | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** Set when a line may cost more than a few microseconds (an RE2 start pattern or mask): push() then watches the clock. */
  private readonly sliced: boolean;
  private readonly sliceMs: number;
  /** Settles when the push in progress has shaped its lines: flush() and endFile() wait for it, the timer defers to it. */
  private shaping: Promise<void> | undefined;
  // Masker.hintsIn of the buffers records point into: most reads hold no rule's word, and their lines then need no masking at all.
  private hintSrc: Buffer | undefined;
  private hintHits: number[] = [];
  private readonly hintCache = new WeakMap<Buffer, number[]>();

  constructor(
    settings: ShapingSettings,
    private readonly stats: Stats,
    private readonly out: Emit,
    private readonly now: () => number = Date.now,
    options: ShaperOptions = {},
  ) {
    this.arena = options.otlpValues && settings.json ? new AnyValueArena() : undefined;
    const start = settings.multiline?.start;
    this.sliced = (start !== undefined && literalPrefixes(start) === undefined) || (settings.mask?.patterns.length ?? 0) > 0;
    this.sliceMs = options.sliceMs ?? SLICE_MS;
    this.joiner = settings.multiline ? new Joiner(settings.multiline, now) : undefined;
    this.masker = settings.mask ? new Masker(settings.mask) : undefined;
    this.json = settings.json;
    const json = settings.json;
    // The same parse and masks as shape(), on a masker of its own so that nothing is counted twice. None when
    // the masks read the whole text (built-in rules only): the message is masked, and its fields are its JSON as it stands.
    const quiet = settings.mask && !this.masker!.coversFields ? new Masker(settings.mask) : undefined;
    this.jsonFields = json && {
      fieldsOf: (message) => {
        const parsed = parseJsonFields(message, json);
        if (typeof parsed !== 'object') return undefined;
        return quiet ? quiet.fields(parsed.fields) : parsed.fields;
      },
      maxFields: json.maxFields,
      maxDepth: json.maxDepth,
      verbatim: !quiet,
      scanned: false,
      keepOriginal: true,
    };
    // Fields that hold the line exactly let it go, unless the operator wants it on every record.
    const always = json?.original === 'always';
    this.jsonFieldsExact = this.jsonFields && { ...this.jsonFields, keepOriginal: always };
    this.jsonScanned = this.jsonFields && { ...this.jsonFields, scanned: true };
    this.jsonScannedExact = this.jsonFields && { ...this.jsonFields, scanned: true, keepOriginal: always };
  }

  /** The source's emit: lines in, shaped records out. */
  readonly push = async (records: LogRecord[]): Promise<void> => {
    this.stats.linesRead += records.length;
    const out: LogRecord[] = [];
    const groups: Group[] = [];
    this.joiner?.tick();
    let done: (() => void) | undefined;
    let sliceStart = 0;
    if (this.sliced) {
      this.shaping = new Promise((resolve) => (done = resolve));
      sliceStart = performance.now();
    }
    try {
      for (let i = 0; i < records.length; i++) {
        const r = records[i]!;
        if (!this.joiner) out.push(this.shape(r));
        else {
          // Read from where this line's groups start: setting the length back to 0 per line would give up the array's storage each time.
          const from = groups.length;
          this.joiner.feed(this.fileOf(r.file).slots[r.stream], r, groups);
          for (let k = from; k < groups.length; k++) out.push(this.shape(groups[k]!));
        }
        if (this.sliced && i + 1 < records.length && performance.now() - sliceStart >= this.sliceMs) {
          await nextTurn();
          sliceStart = performance.now();
        }
      }
    } finally {
      if (done) {
        this.shaping = undefined;
        done();
      }
    }
    if (this.joiner && !this.timer && this.anyOpen()) this.arm();
    if (out.length > 0) await this.out(this.settle(out));
  };

  /** Until the push in progress, if any, has shaped its lines (not until its records are taken: that may wait on delivery). */
  private async shaped(): Promise<void> {
    while (this.shaping) await this.shaping;
  }

  /**
   * The source is done with a file (it ended, rotated away, or the drain let
   * go of it): its open events go out, so its checkpoint can reach its end.
   */
  async endFile(file: FileMeta): Promise<void> {
    if (this.shaping) await this.shaped();
    const f = this.files.get(file);
    if (!f) return;
    const out = this.endAll(f);
    const settled = this.settle(out);
    this.files.delete(file);
    if (out.length > 0) await this.out(settled);
  }

  /** The drain: every open event goes out as it is. */
  async flush(): Promise<void> {
    if (this.shaping) await this.shaped();
    const out: LogRecord[] = [];
    for (const f of this.files.values()) out.push(...this.endAll(f));
    const settled = this.settle(out);
    this.files.clear();
    this.stop();
    if (out.length > 0) await this.out(settled);
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  private fileOf(file: FileMeta): FileShape {
    let f = this.files.get(file);
    if (!f) {
      f = { slots: { stdout: { ev: undefined }, stderr: { ev: undefined }, unknown: { ev: undefined } }, owed: 0, masks: { stdout: { pemLines: 0 }, stderr: { pemLines: 0 }, unknown: { pemLines: 0 } } };
      this.files.set(file, f);
    }
    return f;
  }

  private endAll(f: FileShape): LogRecord[] {
    const groups: Group[] = [];
    for (const slot of Object.values(f.slots)) this.joiner?.end(slot, groups);
    return groups.map((g) => this.shape(g));
  }

  private anyOpen(): boolean {
    for (const f of this.files.values()) for (const s of Object.values(f.slots)) if (s.ev) return true;
    return false;
  }

  /** One timer for all open events, set for the earliest to expire; fires as each is due. */
  private arm(): void {
    const j = this.joiner!;
    let due = Infinity;
    for (const f of this.files.values()) for (const s of Object.values(f.slots)) if (s.ev) due = Math.min(due, s.ev.lastAt + j.flushMs);
    if (due === Infinity) return;
    this.timer = setTimeout(this.expire, Math.max(0, due - this.now()));
    this.timer.unref?.();
  }

  private readonly expire = (): void => {
    this.timer = undefined;
    if (this.shaping) {
      // A push is between two of its lines: the events it is feeding are not idle, and what it holds must go out first.
      this.timer = setTimeout(this.expire, this.sliceMs);
      this.timer.unref?.();
      return;
    }
    const j = this.joiner!;
    const now = this.now();
    const out: LogRecord[] = [];
    for (const f of this.files.values()) {
      const groups: Group[] = [];
      for (const slot of Object.values(f.slots)) if (j.expired(slot, now)) j.end(slot, groups);
      for (const g of groups) out.push(this.shape(g));
    }
    if (this.anyOpen()) this.arm();
    // Backpressure cannot be honoured from a timer; the next read waits for it.
    if (out.length > 0) void this.out(this.settle(out));
  };

  /** The lowest first offset of the file's open events: no record of the file may let its checkpoint pass it. */
  private openCap(file: FileMeta): number {
    let cap = Infinity;
    const f = this.files.get(file);
    if (f) for (const s of Object.values(f.slots)) if (s.ev && s.ev.first.offset < cap) cap = s.ev.first.offset;
    return cap;
  }

  /**
   * Sets each record's `safe` just before the records go on: no higher than
   * the first offset of a line still held (open events) or going out after it
   * (a record later in `out`, of the other stream), and raised to what is
   * owed from records capped before. Tickets settle in order, so reaching a
   * position needs every record handed on before it acknowledged.
   */
  private settle(out: LogRecord[]): LogRecord[] {
    if (!this.joiner) return out;
    const limit = new Array<number>(out.length);
    const later = new Map<FileMeta, number>();
    for (let i = out.length - 1; i >= 0; i--) {
      const r = out[i]!;
      const cap = later.get(r.file) ?? this.openCap(r.file);
      limit[i] = cap;
      if (r.offset < cap) later.set(r.file, r.offset);
    }
    for (let i = 0; i < out.length; i++) {
      const r = out[i]!;
      const f = this.fileOf(r.file);
      const safe = Math.min(Math.max(r.safe, f.owed), limit[i]!);
      if (r.safe > safe && r.safe > f.owed) f.owed = r.safe;
      // In place: the record is not handed on yet, and no one else holds it.
      if (safe !== r.safe) r.safe = safe;
    }
    return out;
  }

  /**
   * Whether a message parsed the slow way (a joined event, masks configured,
   * a line not read from a file) is one whose fields hold every value of it
   * exactly: the verdict the byte path gives the same text, so that a line
   * gets the same record whichever way it was parsed.
   */
  private exactText(message: string): boolean {
    const json = this.json!;
    if (json.original === 'always') return false;
    const bytes = Buffer.from(message, 'utf8');
    return scanJson(this.scan, bytes, 0, bytes.length, json.maxFields, json.maxDepth) === JSON_OK && this.scan.exact;
  }

  /** The line holds no word of any mask and no escape that may spell one, and no private key runs on from before it in its stream. */
  private noHint(r: CriRecord): boolean {
    const m = this.masker!;
    if (m.pem && this.fileOf(r.file).masks[r.stream].pemLines > 0) return false;
    let hits = this.hintHits;
    if (r.src !== this.hintSrc) {
      const cached = this.hintCache.get(r.src);
      hits = cached ?? m.hintsIn(r.src.toString('latin1'));
      if (!cached) this.hintCache.set(r.src, hits);
      this.hintSrc = r.src;
      this.hintHits = hits;
    }
    if (hits.length === 0) return true;
    // The first hit that ends after the line starts: the line is clear unless it starts before the line ends.
    let lo = 0;
    let hi = hits.length / 2;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (hits[mid * 2 + 1]! <= r.msgAt) lo = mid + 1;
      else hi = mid;
    }
    return lo * 2 >= hits.length || hits[lo * 2]! >= r.msgEnd;
  }

  private maskText(message: string, first: LogRecord): string {
    const m = this.masker!;
    return m.pem ? m.textIn(message, this.fileOf(first.file).masks[first.stream]) : m.text(message);
  }

  /** The record for a group of lines; its `safe` is the last line's until settle() looks at it. */
  private shape(group: Group): LogRecord {
    const single = !Array.isArray(group);
    const lines: readonly LogRecord[] = single ? NO_LINES : group;
    const first = single ? group : group[0]!;
    const safe = single ? first.safe : group[group.length - 1]!.safe;
    let message: string | undefined;
    let size = first.size;
    let flags = first.flags;
    const maskedBefore = this.masker?.matches ?? 0;
    // Masks ran on the line and found nothing, and its fields would show them nothing more: it goes on as if masks were off.
    let clean = false;
    if (single) {
      if (!this.masker && !this.json) return first;
      if (this.masker?.coversFields && first instanceof CriRecord) {
        // Masks first: most lines hold no secret, and those need neither JSON.parse nor a look at their fields.
        if (this.noHint(first)) clean = true;
        else {
          const text = this.maskText(first.message, first);
          if (this.masker.matches === maskedBefore) clean = true;
          else message = text;
        }
        if (clean && !this.json) return first;
      }
      // Decided on the line's bytes, without making it a string: most lines are no JSON, and most JSON lines need no JSON.parse.
      if ((!this.masker || clean) && first instanceof CriRecord) {
        // Most lines do not even begin like an object: they go on without a look at the rest of their bytes.
        if (!objectAhead(first.src, first.msgAt, first.msgEnd)) return first;
      }
      if ((!this.masker || clean) && first instanceof CriRecord && utf8Valid(first.src, first.msgAt, first.msgEnd)) {
        const json = this.json!;
        const arena = this.arena;
        const scan = this.scan;
        const verdict = arena ? arena.write(scan, first.src, first.msgAt, first.msgEnd, json.maxFields, json.maxDepth, SEVERITY_KEY_BYTES) : scanJson(scan, first.src, first.msgAt, first.msgEnd, json.maxFields, json.maxDepth);
        if (verdict === JSON_PLAIN) return first;
        if (verdict === JSON_OK) {
          this.stats.jsonRecords++;
          const fields = scan.exact ? this.jsonScannedExact! : this.jsonScanned!;
          if (arena) return new PreparedJsonRecord(first, safe, fields, arena.buffer, arena.at, arena.length, severityFound(scan, first.src, first.msgEnd));
          return new ShapedRecord(first.file, first.offset, undefined, first.stream, undefined, size, safe, flags, undefined, fields, first);
        }
      }
      message ??= first.message;
    } else {
      const parts: string[] = [];
      for (const l of lines) {
        parts.push(l.message);
        if (l !== first) {
          size += l.size;
          flags |= l.flags;
        }
      }
      message = parts.join('\n');
      this.stats.multilineRecords++;
    }
    // Masks read what a JSON reader reads of the line (mask.ts), at any parse setting; only a secret's own bytes change.
    const maskedFirst = this.masker?.coversFields === true && single && first instanceof CriRecord;
    if (this.masker && !maskedFirst) {
      const text = this.maskText(message, first);
      if (this.masker.matches > maskedBefore) message = text;
    }
    let json: JsonFields | undefined;
    if (this.json) {
      const parsed = parseJsonFields(message, this.json);
      if (typeof parsed === 'object') {
        // Parsed here to decide and to count what the masks replace; kept as a way to parse again (see ShapedRecord).
        const maskedFields = this.masker && !this.masker.coversFields ? this.masker.fields(parsed.fields) : parsed.fields;
        // A value only an operator pattern finds in a field (one anchored to a
        // whole value, `^…$`, which the line's text does not show): the line
        // would carry it past the masks, so the message becomes the masked
        // fields' JSON. Its fields are those fields again.
        const rewritten = maskedFields !== parsed.fields;
        if (rewritten) message = JSON.stringify(maskedFields);
        // Exact as the byte path would find the same text, unless a mask rewrote a field.
        json = !rewritten && this.exactText(message) ? this.jsonFieldsExact : this.jsonFields;
        this.stats.jsonRecords++;
      } else if (parsed === 'too-wide') this.stats.jsonTooWide++;
    }
    const masked = this.masker !== undefined && this.masker.matches > maskedBefore;
    if (masked) this.stats.masked += this.masker!.matches - maskedBefore;
    if (single && !masked) {
      // Nothing changed: the line goes on as the source made it (a CriRecord keeps its bytes for the encoders).
      if (json === undefined) return first;
      const origin = first instanceof CriRecord && utf8Valid(first.src, first.msgAt, first.msgEnd) ? first : undefined;
      return new ShapedRecord(first.file, first.offset, origin ? undefined : first.ts, first.stream, origin ? undefined : message, size, safe, flags, undefined, json, origin);
    }
    return new ShapedRecord(first.file, first.offset, first.ts, first.stream, message, size, safe, flags, single ? undefined : lines.length, json);
  }
}
