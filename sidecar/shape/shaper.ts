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
import type { JsonPreparer } from '../delivery/sink.ts';
import { CriRecord, type FileMeta, type LogRecord, type Stream } from '../records/record.ts';
import { ShapedRecord, type JsonFields } from '../records/shaped.ts';
import { utf8Valid } from '../records/utf8.ts';
import { JsonStage } from './json-stage.ts';
import { Masker } from './mask.ts';
import { MaskStage } from './mask-stage.ts';
import { Joiner, type Group, type Slot } from './multiline.ts';
import { literalPrefixes } from './multiline-rules.ts';
import type { ShapingSettings } from '../shaping-settings.ts';

interface FileShape {
  /** One slot per stream. */
  readonly slots: Record<Stream, Slot>;
  /** The highest `safe` a record of the file was given less than: the checkpoint may go there once nothing before it is held. */
  owed: number;
}

export type Emit = (records: LogRecord[]) => Promise<void>;

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
  /** The sink's encoder, which reads a JSON line in the pass that decides it (delivery/sink.ts). */
  readonly jsonPreparer?: JsonPreparer;
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

/**
 * The stages, each on its own, composed here as the lines come: the joiner
 * (multiline.ts) makes events of lines, the masker (mask-stage.ts) replaces
 * secrets in their text, the JSON detector (json-stage.ts) decides which are
 * JSON objects. The shaper keeps what no stage may decide alone: that no
 * record lets a checkpoint pass a line still held.
 */
export class Shaper {
  private readonly joiner: Joiner | undefined;
  private readonly mask: MaskStage | undefined;
  private readonly json: JsonStage | undefined;
  private readonly files = new Map<FileMeta, FileShape>();
  private timer: NodeJS.Timeout | undefined;
  /** Set when a line may cost more than a few microseconds (an RE2 start pattern or mask): push() then watches the clock. */
  private readonly sliced: boolean;
  private readonly sliceMs: number;
  /** Settles when the push in progress has shaped its lines: flush() and endFile() wait for it, the timer defers to it. */
  private shaping: Promise<void> | undefined;

  constructor(
    settings: ShapingSettings,
    private readonly stats: Stats,
    private readonly out: Emit,
    private readonly now: () => number = Date.now,
    options: ShaperOptions = {},
  ) {
    const start = settings.multiline?.start;
    this.sliced = (start !== undefined && literalPrefixes(start) === undefined) || (settings.mask?.patterns.length ?? 0) > 0;
    this.sliceMs = options.sliceMs ?? SLICE_MS;
    this.joiner = settings.multiline ? new Joiner(settings.multiline, now) : undefined;
    this.mask = settings.mask ? new MaskStage(settings.mask) : undefined;
    if (settings.json) {
      // A record's fields parsed again go through the same masks, on a masker of their own so that nothing is counted twice. None when
      // the masks read the whole text (built-in rules only): the message is masked, and its fields are its JSON as it stands.
      const quiet = settings.mask && !this.mask!.coversFields ? new Masker(settings.mask) : undefined;
      this.json = new JsonStage(settings.json, stats, quiet && ((f) => quiet.fields(f)), options.jsonPreparer);
    }
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
    if (!f) {
      this.mask?.forget(file);
      return;
    }
    const out = this.endAll(f);
    const settled = this.settle(out);
    this.files.delete(file);
    this.mask?.forget(file);
    if (out.length > 0) await this.out(settled);
  }

  /** The drain: every open event goes out as it is. */
  async flush(): Promise<void> {
    if (this.shaping) await this.shaped();
    const out: LogRecord[] = [];
    for (const f of this.files.values()) out.push(...this.endAll(f));
    const settled = this.settle(out);
    this.files.clear();
    this.mask?.clear();
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
      f = { slots: { stdout: { ev: undefined }, stderr: { ev: undefined }, unknown: { ev: undefined } }, owed: 0 };
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

  /** The record for a group of lines; its `safe` is the last line's until settle() looks at it. */
  private shape(group: Group): LogRecord {
    if (!Array.isArray(group)) return this.shapeLine(group);
    const first = group[0]!;
    const parts: string[] = [];
    let size = first.size;
    let flags = first.flags;
    for (const l of group) {
      parts.push(l.message);
      if (l !== first) {
        size += l.size;
        flags |= l.flags;
      }
    }
    this.stats.multilineRecords++;
    return this.shapeText(group, parts.join('\n'), size, flags, group[group.length - 1]!.safe, false, this.mask?.matches ?? 0);
  }

  /** One line: its bytes decide where they can (masks first, then JSON), and it goes on as the source made it when nothing changed. */
  private shapeLine(first: LogRecord): LogRecord {
    const mask = this.mask;
    const json = this.json;
    if (!mask && !json) return first;
    const before = mask?.matches ?? 0;
    let message: string | undefined;
    // Masks ran on the line and found nothing, and its fields would show them nothing more: it goes on as if masks were off.
    let clean = !mask;
    const masked = mask !== undefined && mask.coversFields && first instanceof CriRecord;
    if (masked) {
      // Masks first: most lines hold no secret, and those need neither JSON.parse nor a look at their fields.
      message = mask.line(first);
      clean = message === undefined;
      if (clean && !json) return first;
    }
    if (clean && json && first instanceof CriRecord) {
      const r = json.line(first);
      if (r) return r;
    }
    return this.shapeText(first, message ?? first.message, first.size, first.flags, first.safe, masked, before);
  }

  /**
   * The record for a text the stages read as a string: masked (unless
   * `masked`: the line's masks ran already), then parsed for JSON. `group`:
   * one line, or the lines joined into the text; `before`: the masks'
   * matches before this record.
   */
  private shapeText(group: Group, message: string, size: number, flags: number, safe: number, masked: boolean, before: number): LogRecord {
    const single = !Array.isArray(group);
    const first = single ? group : group[0]!;
    const mask = this.mask;
    // Masks read what a JSON reader reads of the line (mask.ts), at any parse setting; only a secret's own bytes change.
    if (mask && !masked) {
      const text = mask.text(message, first);
      if (mask.matches > before) message = text;
    }
    let json: JsonFields | undefined;
    if (this.json) {
      const parsed = this.json.text(message, mask && !mask.coversFields ? (f) => mask.fields(f) : undefined);
      if (parsed) ({ json, message } = parsed);
    }
    const changed = mask !== undefined && mask.matches > before;
    if (changed) this.stats.masked += mask.matches - before;
    if (single && !changed) {
      // Nothing changed: the line goes on as the source made it (a CriRecord keeps its bytes for the encoders).
      if (json === undefined) return first;
      const origin = first instanceof CriRecord && utf8Valid(first.src, first.msgAt, first.msgEnd) ? first : undefined;
      return new ShapedRecord({ file: first.file, offset: first.offset, ts: origin ? undefined : first.ts, stream: first.stream, message: origin ? undefined : message, size, safe, flags, json, origin });
    }
    return new ShapedRecord({ file: first.file, offset: first.offset, ts: first.ts, stream: first.stream, message, size, safe, flags, lines: single ? undefined : group.length, json });
  }
}
