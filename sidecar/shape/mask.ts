// Masks secrets before a record leaves the pod: the rules (mask-rules.ts)
// read what a JSON reader reads of a line (View). Matches are counted; their
// values are never logged.
import { mapLeaves, type FieldValue, type Fields } from '../records/record.ts';
import type { MaskSettings } from '../shaping-settings.ts';
import { BUILT_IN, HINT, PEM_BODY, PEM_HEADER, PEM_MAX_LINES, opensPrivateKey, re2Rule, type Find, type MaskState } from './mask-rules.ts';

/**
 * What masks read. A JSON string in a line is read as a JSON reader reads it,
 * its escapes decoded (`\u0070assword`, `\/`, `\n`), and the text inside a
 * string is read again, decoded, as text of its own: a serialized body
 * (`"body={\"password\":\"x\"}"`) is then `body={"password":"x"}`, whatever
 * the parse setting and however wide the line. A view is that text with,
 * for each of its characters, where it starts in the raw line, so that a
 * span found in it replaces exactly the raw bytes that spell it (an escape
 * whole, never half of one).
 */
interface View {
  readonly text: string;
  /** How many times the view's text is JSON-encoded in the raw line. */
  readonly depth: number;
  /** The view it was read from; absent: the raw line itself. */
  readonly base?: View;
  /** spelled(): the base's literals; inside(): the quotes of the literal it is the inside of. */
  readonly lits?: readonly number[];
  readonly open?: number;
  readonly close?: number;
  /**
   * Raw offset of each character, and of the end (length text.length + 1),
   * made when first asked for: only a view with a match in it needs it.
   */
  at?: Int32Array;
}

/** A string inside a string inside …: read this many levels down, no further (a line is read once per level). */
const MASK_MAX_NESTING = 6;

function rawAt(v: View, i: number): number {
  const base = v.base;
  if (!base) return i;
  if (!v.at) {
    const at = new Int32Array(v.text.length + 1);
    if (v.lits) spell(base, v.lits, [], at);
    else {
      const src = base.text;
      let n = 0;
      for (let j = v.open! + 1; j < v.close!; j++) {
        at[n++] = rawAt(base, j);
        if (src.charCodeAt(j) === 0x5c) j++;
      }
      at[n] = rawAt(base, v.close!);
    }
    v.at = at;
  }
  return v.at[i]!;
}

const HEX = /^[0-9a-fA-F]{4}$/;

/**
 * The JSON string literals of a text, as [open, close, escapes] triples
 * (quote positions; escapes: 1 when it has `\"` or `\\`, 2 when it has
 * another, 3 both, 0 none): from
 * the left, each `"` to its unescaped closing quote, when every escape in
 * between is one JSON has and no raw control character is. Linear: a scan
 * that fails does so before the next quote, where the next one starts.
 */
function literals(text: string): number[] {
  const out: number[] = [];
  let i = 0;
  // The next quote, backslash and newline at or after where they were last looked for (-1: none left).
  let quote = -2;
  let slash = -2;
  let nl = -2;
  for (;;) {
    const q = text.indexOf('"', i);
    if (q < 0) return out;
    let j = q + 1;
    let ok = false;
    let escaped = 0;
    for (;;) {
      if (quote !== -1 && quote < j) quote = text.indexOf('"', j);
      if (quote < 0) break;
      if (slash !== -1 && slash < j) slash = text.indexOf('\\', j);
      if (slash < 0 || slash > quote) {
        ok = true;
        j = quote;
        break;
      }
      const x = text[slash + 1];
      escaped |= x === '"' || x === '\\' ? 1 : 2;
      if (x !== undefined && '"\\/bfnrt'.includes(x)) j = slash + 2;
      else if (x === 'u' && HEX.test(text.slice(slash + 2, slash + 6))) j = slash + 6;
      else break;
    }
    if (ok) {
      // A string never runs over a line's end: in a joined event, quotes pair within their lines.
      if (nl !== -1 && nl < q) nl = text.indexOf('\n', q);
      if (nl >= 0 && nl < j) {
        i = q + 1;
        continue;
      }
      out.push(q, j, escaped);
      i = j + 1;
    } else i = q + 1;
  }
}

const SIMPLE: Readonly<Record<string, string>> = { '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };

/**
 * The view with the escapes inside its JSON strings spelled out, but for a
 * quote and a backslash (however written: `\u0022` reads as `\"`), which keep
 * the strings where they are. Its literals come along: those still holding an
 * escape are the strings to read again, decoded. The view itself when no
 * string in it has an escape.
 */
function spelled(v: View): { view: View; lits: number[] } {
  const text = v.text;
  if (!text.includes('\\')) return { view: v, lits: [] };
  const lits = literals(text);
  let spells = false;
  for (let k = 2; k < lits.length && !spells; k += 3) if ((lits[k]! & 2) !== 0) spells = true;
  if (!spells) {
    // Nothing to spell out: the view as it is, and the strings with an escaped quote or backslash in them to read again.
    const again: number[] = [];
    for (let k = 0; k < lits.length; k += 3) if (lits[k + 2] !== 0) again.push(lits[k]!, lits[k + 1]!);
    return { view: v, lits: again };
  }
  const outLits: number[] = [];
  return { view: { text: spell(v, lits, outLits, undefined), depth: v.depth, base: v, lits }, lits: outLits };
}

/** Copies base.text[from, to) onto the spelled text, and its map when one is made; the spelled text's length after. */
function copyTo(v: View, parts: string[], at: Int32Array | undefined, n: number, from: number, to: number): number {
  if (to <= from) return n;
  if (at) for (let i = from; i < to; i++) at[n + i - from] = rawAt(v, i);
  parts.push(v.text.slice(from, to));
  return n + to - from;
}

/** spelled()'s text, its literals still holding an escape (into `outLits`), and, when asked for, its map to the raw line (into `at`). */
function spell(v: View, lits: readonly number[], outLits: number[], at: Int32Array | undefined): string {
  const text = v.text;
  const parts: string[] = [];
  let n = 0;
  let from = 0;
  for (let k = 0; k < lits.length; k += 3) {
    const open = lits[k]!;
    const close = lits[k + 1]!;
    if (lits[k + 2] === 0) continue;
    let kept = (lits[k + 2]! & 1) !== 0;
    n = copyTo(v, parts, at, n, from, open + 1);
    const litAt = n - 1;
    from = open + 1;
    for (let i = text.indexOf('\\', from); i >= 0 && i < close; i = text.indexOf('\\', from)) {
      n = copyTo(v, parts, at, n, from, i);
      const x = text[i + 1]!;
      let ch: string;
      let len = 2;
      if (x === 'u') {
        ch = String.fromCharCode(parseInt(text.slice(i + 2, i + 6), 16));
        len = 6;
      } else ch = x === '"' || x === '\\' ? x : SIMPLE[x]!;
      if (ch === '"' || ch === '\\') {
        // Still escaped, as a pair that maps to the escape whole.
        parts.push('\\' + ch);
        if (at) at[n] = at[n + 1] = rawAt(v, i);
        n += 2;
        kept = true;
      } else {
        parts.push(ch);
        if (at) at[n] = rawAt(v, i);
        n++;
      }
      from = i + len;
    }
    n = copyTo(v, parts, at, n, from, close);
    from = close;
    if (kept) outLits.push(litAt, n);
  }
  n = copyTo(v, parts, at, n, from, text.length);
  if (at) at[n] = rawAt(v, text.length);
  return parts.join('');
}

/** The inside of a literal of a spelled view (only `\"` and `\\` left in it), decoded: a view one level down. */
function inside(v: View, open: number, close: number): View {
  return { text: v.text.slice(open + 1, close).replace(ESCAPED_PAIR, '$1'), depth: v.depth + 1, base: v, open, close };
}

/**
 * An escape that may spell a rule's word once decoded: `\uXXXX`, `\\` (an
 * escape one level down), or `:\/\/`. The others (`\"`, `\/` elsewhere,
 * `\n`, `\t`, …) decode to a quote, a slash or a control character, which no
 * word holds but the URL rule's `://`.
 */
const MAY_SPELL = /\\[u\\]|:\\?\/\\?\//;
const ESCAPED_PAIR = /\\(["\\])/g;

/** `s` written inside a JSON string, `times` times over. */
function encoded(s: string, times: number): string {
  for (let i = 0; i < times; i++) s = JSON.stringify(s).slice(1, -1);
  return s;
}

/**
 * 1 when `at` falls inside one of the literals (in order, as literals()
 * gives them), else 0: a replacement there is written as that string would
 * hold it.
 */
function inLiteral(lits: readonly number[], at: number): number {
  let lo = 0;
  let hi = lits.length / 3;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (lits[mid * 3 + 1]! < at) lo = mid + 1;
    else hi = mid;
  }
  return lo * 3 < lits.length && lits[lo * 3]! < at ? 1 : 0;
}

/** A replacement a JSON string holds as it is, at any depth: JSON writes it back unescaped. */
const plainInJson = (s: string): boolean => JSON.stringify(s) === `"${s}"` && !/[\u2028\u2029]/.test(s);

export class Masker {
  private readonly builtIn: readonly Find[];
  private readonly hint: RegExp;
  /** The hint words, everywhere in a text (hintsIn). */
  private readonly hints: RegExp;
  private readonly patterns: readonly Find[];
  /**
   * Only built-in rules: what they find in a JSON line read as text (every
   * string decoded, in context) holds all they would find in its parsed
   * field values, so a line they leave alone needs no look at its fields.
   * An operator pattern may be anchored (`^…$`) to a whole value, which
   * only a field shows it.
   */
  readonly coversFields: boolean;
  /** The private-key rule is on: masking then follows a key over the lines after its BEGIN line. */
  readonly pem: boolean;
  private readonly replacement: string;
  private readonly plainReplacement: boolean;
  /** Matches replaced so far. */
  matches = 0;

  constructor(s: MaskSettings) {
    this.builtIn = s.rules.map((r) => BUILT_IN[r]);
    this.hint = new RegExp(s.rules.map((r) => HINT[r]).join('|') || '(?!)');
    this.hints = new RegExp(s.rules.map((r) => HINT[r]).join('|') || '(?!)', 'g');
    this.patterns = s.patterns.map(re2Rule);
    this.coversFields = s.patterns.length === 0;
    this.replacement = s.replacement;
    this.plainReplacement = plainInJson(s.replacement);
    this.pem = s.rules.includes('private-key');
  }

  /**
   * text() for one record of a stream whose earlier records may have begun a
   * private key: without joining, a key's body lines are records of their
   * own, and each of them is the secret. They are replaced whole while they
   * look like a PEM body, up to the END line.
   */
  textIn(s: string, state: MaskState): string {
    if (!this.pem) return this.text(s);
    if (state.pemLines > 0) {
      const end = s.indexOf('-----END ');
      if (end >= 0) {
        state.pemLines = 0;
        if (end > 0) {
          this.matches++;
          s = this.replacement + s.slice(end);
        }
      } else if (PEM_BODY.test(s) || PEM_HEADER.test(s)) {
        state.pemLines--;
        if (s.trim() === '') return s;
        this.matches++;
        return this.replacement;
      } else state.pemLines = 0;
    }
    s = this.text(s);
    if (opensPrivateKey(s)) state.pemLines = PEM_MAX_LINES;
    return s;
  }

  /**
   * Where a rule's word, or an escape other than `\"`, is in `bytes` (a
   * buffer's bytes one character each, as latin1 reads them: the words are
   * ASCII, and a byte of a multi-byte character matches none of them), as
   * sorted [from, to) pairs. A line of the buffer that overlaps none holds
   * nothing text() would find, when the rules are the built-in ones only
   * (coversFields): one scan of a whole read instead of one per line.
   */
  hintsIn(bytes: string): number[] {
    const words: number[] = [];
    const re = this.hints;
    re.lastIndex = 0;
    for (let m = re.exec(bytes); m !== null; m = re.exec(bytes)) words.push(m.index, m.index + m[0].length);
    // Escapes apart: a backslash is found far faster alone than as one more branch of the words' pattern, and most reads have none.
    let i = bytes.indexOf('\\');
    if (i < 0) return words;
    const out: number[] = [];
    let w = 0;
    for (; i >= 0; i = bytes.indexOf('\\', i + 1)) {
      const x = bytes[i + 1];
      const spells = x === 'u' || x === 'U' || x === '\\' || (x === '/' && (bytes[i - 1] === ':' || (bytes[i - 1] === '/' && bytes[i - 2] === ':')));
      if (!spells) continue;
      for (; w < words.length && words[w]! < i; w += 2) out.push(words[w]!, words[w + 1]!);
      out.push(i, i + 2);
    }
    for (; w < words.length; w += 2) out.push(words[w]!, words[w + 1]!);
    return out;
  }

  /**
   * The text with every secret the rules find in it, or in what a JSON
   * reader reads of it, replaced; every byte outside a secret as it was, so
   * a JSON line stays the same JSON but for the secrets.
   */
  text(s: string): string {
    // No rule's word, and no escape that may spell one: no view of the text, decoded however deep, holds one either.
    if (this.patterns.length === 0 && !this.hint.test(s) && !MAY_SPELL.test(s)) return s;
    const found: number[] = [];
    this.read({ text: s, depth: 0 }, found);
    if (found.length === 0) return s;
    return this.replaced(s, found);
  }

  /** Pushes the raw spans the rules find in the view and in the strings inside it, as [from, to, depth, a JSON value] quadruples. */
  private read(v: View, found: number[]): void {
    const { view, lits } = spelled(v);
    const spans: number[] = [];
    const hinted = this.builtIn.length > 0 && this.hint.test(view.text);
    if (hinted) for (const rule of this.builtIn) rule(view.text, spans);
    for (const rule of this.patterns) rule(view.text, spans);
    // Only a replacement a JSON string cannot hold as it is needs to know whether it lands in one.
    const all = this.plainReplacement || spans.length === 0 ? undefined : literals(view.text);
    for (let k = 0; k < spans.length; k += 2) {
      const value = spans[k]! < 0;
      const start = value ? -1 - spans[k]! : spans[k]!;
      const from = rawAt(view, start);
      const to = rawAt(view, spans[k + 1]!);
      if (to > from) found.push(from, to, view.depth + (all ? inLiteral(all, start) : 0), value ? 1 : 0);
    }
    if (view.depth + 1 >= MASK_MAX_NESTING) return;
    // The strings inside hold no rule's word this view lacks, unless an escape left in it may spell one (as in text()).
    if (this.patterns.length === 0 && !hinted && !MAY_SPELL.test(view.text)) return;
    for (let k = 0; k < lits.length; k += 2) this.read(inside(view, lits[k]!, lits[k + 1]!), found);
  }

  /** The raw text with the spans (overlapping ones as one) replaced, the replacement encoded for where it lands. */
  private replaced(s: string, found: number[]): string {
    const order = Array.from({ length: found.length / 4 }, (_, i) => i * 4).sort((a, b) => found[a]! - found[b]! || found[b + 1]! - found[a + 1]!);
    let out = '';
    let from = 0;
    let n = 0;
    for (let k = 0; k < order.length; ) {
      const i = order[k]!;
      const start = found[i]!;
      let end = found[i + 1]!;
      let depth = found[i + 2]!;
      let value = found[i + 3] === 1;
      for (k++; k < order.length && found[order[k]!]! < end; k++) {
        const j = order[k]!;
        end = Math.max(end, found[j + 1]!);
        depth = Math.min(depth, found[j + 2]!);
        value ||= found[j + 3] === 1;
      }
      const written = value ? encoded(`"${encoded(this.replacement, 1)}"`, depth) : depth === 0 ? this.replacement : encoded(this.replacement, depth);
      // Masked already (a field of a line masked before it was parsed): not a new match.
      if (end - start !== written.length || s.slice(start, end) !== written) n++;
      out += s.slice(from, start) + written;
      from = end;
    }
    this.matches += n;
    return out + s.slice(from);
  }

  /** String values at every level; keys are the program's names and stay. */
  fields(f: Fields): Fields {
    return this.value(f) as Fields;
  }

  /** The value with its strings masked; the same object when nothing in it changed (most values), so no copy is made per line. */
  private value(v: FieldValue): FieldValue {
    return mapLeaves(v, (x) => (typeof x === 'string' ? this.text(x) : x));
  }
}
