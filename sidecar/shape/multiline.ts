// Joins the lines of one event (a stack trace, a panic dump) written to one
// container stream into one record. Each rule (multiline-rules.ts) is a small
// state machine over whole lines: it says whether a line starts an event and,
// while one is open, whether the next line belongs to it.
import { CriRecord, type LogRecord } from '../records/record.ts';
import type { MultilineSettings } from '../shaping-settings.ts';
import { BUILT_IN, customRule, type Rule } from './multiline-rules.ts';

class OpenEvent {
  /** The first line; `more` the ones after it, made only when a second line comes (most events, with a start pattern every plain line, stay one line). */
  first!: LogRecord;
  more: LogRecord[] | undefined;
  /** Lines held: 1 + more's length. */
  count = 1;
  rule!: Rule;
  state = 0;
  /** Lines known to belong; the ones after it are `maybe` lines. */
  confirmed = 1;
  /** Message bytes of the joined record so far, newlines included. */
  bytes = 0;
  /** When the last line came (Date.now()), for the flush timeout. */
  lastAt = 0;

  /** Starts the event over with its first line: a Joiner reuses the event it just closed, as one starts at nearly every line. */
  open(rule: Rule, state: number, first: LogRecord, bytes: number, now: number): this {
    this.rule = rule;
    this.state = state;
    this.first = first;
    this.more = undefined;
    this.count = 1;
    this.confirmed = 1;
    this.bytes = bytes;
    this.lastAt = now;
    return this;
  }

  /** The i-th line held. */
  line(i: number): LogRecord {
    return i === 0 ? this.first : this.more![i - 1]!;
  }
}

/** Where a stream's open event lives between lines. */
export interface Slot {
  ev: OpenEvent | undefined;
}

/** Lines that go out as one record: one line as itself (no array for the usual case), or several in order. */
export type Group = LogRecord | LogRecord[];

/**
 * Joins lines per slot (the shaper keeps one per file and stream). Output
 * goes to `out` as groups of lines, in the order they must be shipped.
 */
export class Joiner {
  readonly rules: readonly Rule[];
  readonly maxLines: number;
  readonly maxBytes: number;
  readonly flushMs: number;
  /** The event last closed, for the next to reuse. */
  private spare: OpenEvent | undefined;
  /** The time feed() stamps lines with: set by tick(), once per batch of lines, not read from the clock per line. */
  private nowMs: number;

  constructor(s: MultilineSettings, now: () => number = Date.now) {
    this.rules = [...(s.start !== undefined ? [customRule(s.start)] : []), ...s.rules.map((n) => BUILT_IN[n])];
    this.maxLines = s.maxLines;
    this.maxBytes = s.maxBytes;
    this.flushMs = s.flushMs;
    this.now = now;
    this.nowMs = now();
  }

  private readonly now: () => number;

  /** Reads the clock for the lines fed until the next tick: a batch of lines is read at one time, and the flush timeout counts in hundreds of milliseconds. */
  tick(): void {
    this.nowMs = this.now();
  }

  feed(slot: Slot, r: LogRecord, out: Group[]): void {
    const ev = slot.ev;
    if (!ev) {
      this.startOrSingle(slot, r, out);
      return;
    }
    const rule = ev.rule;
    const d = rule.startsEvent ? (rule.startsEvent(r) ? 'end' : 'join') : rule.next(this.text(r), ev);
    if (d === 'end') {
      this.close(slot, out);
      this.feed(slot, r, out);
      return;
    }
    const bytes = this.byteLength(r);
    if (ev.count >= this.maxLines || ev.bytes + 1 + bytes > this.maxBytes) {
      // At a bound: what is there goes as one record, and the event goes on in the next under the same rule and state.
      const { rule: sameRule, state } = ev;
      ev.confirmed = ev.count;
      this.close(slot, out);
      slot.ev = this.event().open(sameRule, state, r, bytes, this.nowMs);
      if (d === 'last') this.close(slot, out);
      return;
    }
    this.add(ev, r, bytes);
    if (d !== 'maybe') ev.confirmed = ev.count;
    if (d === 'last') this.close(slot, out);
  }

  /** Ends the slot's open event, and any its held-back `maybe` lines open in turn. */
  end(slot: Slot, out: Group[]): void {
    while (slot.ev) this.close(slot, out);
  }

  /** Open for flushMs with no new line. */
  expired(slot: Slot, now = this.now()): boolean {
    return slot.ev !== undefined && now - slot.ev.lastAt >= this.flushMs;
  }

  private event(): OpenEvent {
    const ev = this.spare ?? new OpenEvent();
    this.spare = undefined;
    return ev;
  }

  private startOrSingle(slot: Slot, r: LogRecord, out: Group[]): void {
    for (const rule of this.rules) {
      const state = rule.startsEvent ? (rule.startsEvent(r) ? 0 : -1) : rule.start(this.text(r));
      if (state < 0) continue;
      slot.ev = this.event().open(rule, state, r, this.byteLength(r), this.nowMs);
      return;
    }
    out.push(r);
  }

  /** The record's message as a string, made once per line however many rules ask (a parsed line's `message` decodes at each call). */
  private text(r: LogRecord): string {
    if (r !== this.textOf) {
      this.textOf = r;
      this.textValue = r.message;
    }
    return this.textValue;
  }

  private textOf: LogRecord | undefined;
  private textValue = '';

  private byteLength(r: LogRecord): number {
    return r instanceof CriRecord ? r.msgEnd - r.msgAt : Buffer.byteLength(this.text(r));
  }

  private add(ev: OpenEvent, r: LogRecord, bytes: number): void {
    ev.bytes += 1 + bytes;
    (ev.more ??= []).push(r);
    ev.count++;
    ev.lastAt = this.nowMs;
  }

  /** Ships the confirmed lines as one event; the `maybe` lines after them are taken again from the start. */
  private close(slot: Slot, out: Group[]): void {
    const ev = slot.ev!;
    slot.ev = undefined;
    const n = Math.max(1, ev.confirmed);
    if (n === 1) out.push(ev.first);
    else {
      const lines = [ev.first];
      for (let i = 0; i < n - 1; i++) lines.push(ev.more![i]!);
      out.push(lines);
    }
    const { count, more } = ev;
    // Nothing holds the event now: the next one may reuse it (the lines still to re-feed are read from `more`, kept aside).
    ev.first = undefined as unknown as LogRecord;
    ev.more = undefined;
    this.spare = ev;
    for (let i = n; i < count; i++) this.feed(slot, more![i - 1]!, out);
  }
}
