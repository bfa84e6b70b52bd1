// The masking stage: a line's or an event's text with its secrets replaced
// (mask.ts's Masker), and what it must remember between records: where a
// private key begun in an earlier record of a stream stands, and, per read
// buffer, where the rules' words are (most reads hold none, and their lines
// then need no masking at all).
import type { CriRecord, Fields, FileMeta, LogRecord, Stream } from '../records/record.ts';
import type { MaskSettings } from '../shaping-settings.ts';
import { Masker } from './mask.ts';
import type { MaskState } from './mask-rules.ts';

export class MaskStage {
  private readonly masker: Masker;
  /** Per file and stream: where a private key begun in an earlier record stands. */
  private readonly states = new Map<FileMeta, Record<Stream, MaskState>>();
  // Masker.hintsIn of the buffers records point into.
  private hintSrc: Buffer | undefined;
  private hintHits: number[] = [];
  private readonly hintCache = new WeakMap<Buffer, number[]>();

  constructor(settings: MaskSettings) {
    this.masker = new Masker(settings);
  }

  /** Matches replaced so far. */
  get matches(): number {
    return this.masker.matches;
  }

  /** Only built-in rules: what they find in a line's text holds all they would find in its fields (Masker.coversFields). */
  get coversFields(): boolean {
    return this.masker.coversFields;
  }

  /** The text with its secrets replaced (Masker.text), following a private key over the records of `first`'s stream. */
  text(message: string, first: LogRecord): string {
    const m = this.masker;
    return m.pem ? m.textIn(message, this.stateOf(first.file, first.stream)) : m.text(message);
  }

  /** The fields with their string values masked (the same object when none changed). */
  fields(f: Fields): Fields {
    return this.masker.fields(f);
  }

  /**
   * A parsed line's text when masks changed it; undefined when they leave it
   * as it is (most lines: they hold no rule's word), then without making the
   * line a string.
   */
  line(r: CriRecord): string | undefined {
    if (this.noHint(r)) return undefined;
    const before = this.masker.matches;
    const text = this.text(r.message, r);
    return this.masker.matches === before ? undefined : text;
  }

  /** Lets go of a file the source is done with. */
  forget(file: FileMeta): void {
    this.states.delete(file);
  }

  clear(): void {
    this.states.clear();
  }

  private stateOf(file: FileMeta, stream: Stream): MaskState {
    let s = this.states.get(file);
    if (!s) {
      s = { stdout: { pemLines: 0 }, stderr: { pemLines: 0 }, unknown: { pemLines: 0 } };
      this.states.set(file, s);
    }
    return s[stream];
  }

  /** The line holds no word of any mask and no escape that may spell one, and no private key runs on from before it in its stream. */
  private noHint(r: CriRecord): boolean {
    const m = this.masker;
    if (m.pem && this.stateOf(r.file, r.stream).pemLines > 0) return false;
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
}
