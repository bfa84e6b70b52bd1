// The rules that say where a multiline event starts and whether a line
// belongs to the open one: the built-in ones (python, java, go, nodejs) and
// an operator's or tenant's start pattern.
//
// The built-in rules use JS RegExp only where the pattern is anchored and has
// no nested or adjacent overlapping quantifiers, so every match is linear in
// the line; anything fancier is plain string code. A pattern from the
// configuration is compiled with re2js, which is linear for any pattern, but
// with a factor of the program's size and a slow start on each new line: it
// reads only a line's first START_MATCH_BYTES bytes and its program is capped
// (see src/contract/shaping-settings.ts), so no line costs more than a few
// milliseconds whatever a tenant writes.
import { RE2JS } from 're2js';
import { MAX_START_PROGRAM, START_MATCH_BYTES } from '../../src/contract/shaping-settings.ts';
import { ConfigError } from '../config.ts';
import { CriRecord, type LogRecord } from '../records/record.ts';
import type { MultilineRule } from '../shaping-settings.ts';

/** What a rule keeps of an open event between its lines: the state it is in. */
interface RuleState {
  state: number;
}

/**
 * `join`: the line belongs to the event. `maybe`: it belongs only if a later
 * line confirms it (a blank line inside a Go dump, or after a Python
 * exception that may be chained). `last`: it belongs and ends the event.
 * `end`: it does not belong; the event ends before it.
 */
type Next = 'join' | 'maybe' | 'last' | 'end';

export interface Rule {
  readonly name: string;
  /**
   * A start-pattern rule answers from the record alone: a line starts an
   * event exactly when this says so, and any other line joins the open one.
   * Set, it replaces start() and next(), and the line need not become a string.
   */
  readonly startsEvent?: (r: LogRecord) => boolean;
  /** The state an event starting with this line begins in, or -1: the line starts no event. */
  start(line: string): number;
  next(line: string, ev: RuleState): Next;
}

const INDENTED = /^[ \t]/;

const TRACEBACK = 'Traceback (most recent call last):';
const PY_CHAINED = ['During handling of the above exception, another exception occurred:', 'The above exception was the direct cause of the following exception:'];
/** Python 3.11+: an ExceptionGroup's traceback is drawn indented, its exceptions included. */
const GROUP_TRACEBACK = '  + Exception Group Traceback (most recent call last):';
const enum Py {
  Frames,
  Exception,
  Gap,
  Chain,
  Group,
}

const python: Rule = {
  name: 'python',
  start: (line) => (line.startsWith(TRACEBACK) ? Py.Frames : line.startsWith(GROUP_TRACEBACK) ? Py.Group : -1),
  next(line, ev) {
    switch (ev.state) {
      case Py.Group:
        if (INDENTED.test(line)) return 'join';
        if (PY_CHAINED.includes(line)) {
          ev.state = Py.Chain;
          return 'join';
        }
        if (line !== '') return 'end';
        ev.state = Py.Gap;
        return 'maybe';
      case Py.Frames:
        if (line === '' || INDENTED.test(line)) return 'join';
        // The first unindented line after the frames is the exception itself.
        ev.state = Py.Exception;
        return 'join';
      case Py.Exception:
        if (INDENTED.test(line)) return 'join';
        if (PY_CHAINED.includes(line)) {
          ev.state = Py.Chain;
          return 'join';
        }
        if (line === '') {
          ev.state = Py.Gap;
          return 'maybe';
        }
        return 'end';
      case Py.Gap:
        if (PY_CHAINED.includes(line)) {
          ev.state = Py.Chain;
          return 'join';
        }
        return 'end';
      default:
        if (line === '') return 'join';
        if (line.startsWith(TRACEBACK)) {
          ev.state = Py.Frames;
          return 'join';
        }
        if (line.startsWith(GROUP_TRACEBACK)) {
          ev.state = Py.Group;
          return 'join';
        }
        return 'end';
    }
  },
};

const JAVA_CONTINUATION = [/^\s+at /, /^\s*Caused by: /, /^\s+\.\.\. \d+ (?:more|common frames omitted)/, /^\s*Suppressed: /];

/** `java.lang.IllegalStateException: boom`, `Exception in thread "main" java.lang...`. */
function javaHeader(line: string): boolean {
  if (line.startsWith('Exception in thread "')) return true;
  const colon = line.indexOf(':');
  const head = colon >= 0 ? line.slice(0, colon) : line;
  if (head === '' || !head.includes('.') || /\s/.test(head)) return false;
  return head.endsWith('Exception') || head.endsWith('Error') || head.endsWith('Throwable');
}

const java: Rule = {
  name: 'java',
  start: (line) => (javaHeader(line) ? 0 : -1),
  next: (line) => (JAVA_CONTINUATION.some((re) => re.test(line)) ? 'join' : 'end'),
};

const GOROUTINE = /^goroutine \d+ \[/;
const enum Go {
  Head,
  Goroutine,
}

/** A frame's function line: `main.main()`, `net/http.(*conn).serve(0xc000...)`, `panic({0x46c3a0?, 0x4c47e8?})`. */
function goFunction(line: string): boolean {
  const paren = line.indexOf('(');
  return paren > 0 && line.endsWith(')') && !/\s/.test(line.slice(0, paren));
}

const go: Rule = {
  name: 'go',
  start(line) {
    if (line.startsWith('panic: ') || line.startsWith('fatal error: ')) return Go.Head;
    return GOROUTINE.test(line) ? Go.Goroutine : -1;
  },
  next(line, ev) {
    if (line === '') return 'maybe';
    if (GOROUTINE.test(line)) {
      ev.state = Go.Goroutine;
      return 'join';
    }
    if (INDENTED.test(line) || line.startsWith('[signal ') || line === 'runtime stack:') return 'join';
    if (ev.state === Go.Head) return line.startsWith('panic: ') ? 'join' : 'end';
    if (goFunction(line) || line.startsWith('created by ')) return 'join';
    // `go run` reports the exit last.
    return line.startsWith('exit status ') ? 'last' : 'end';
  },
};

const NODE_HEADER = /^(?:Uncaught )?[A-Z]?[A-Za-z]*Error(?: \[[A-Z0-9_]+\])?(?::|$)/;
const NODE_CARET = /^\s*\^+\s*$/;
const NODE_FRAME = /^\s+at /;
const enum Node {
  Location,
  Source,
  Caret,
  Gap,
  Frames,
  Tail,
}

/** The first line of Node's preamble for an uncaught error: `/app/index.js:3`, `file:///app/x.mjs:12`. */
function nodeLocation(line: string): boolean {
  const colon = line.lastIndexOf(':');
  if (colon <= 0 || colon === line.length - 1 || /\s/.test(line)) return false;
  for (let i = colon + 1; i < line.length; i++) {
    const c = line.charCodeAt(i);
    if (c < 48 || c > 57) return false;
  }
  const file = line.slice(0, colon);
  return file.endsWith('.js') || file.endsWith('.mjs') || file.endsWith('.cjs') || file.endsWith('.ts');
}

const nodejs: Rule = {
  name: 'nodejs',
  start(line) {
    if (NODE_HEADER.test(line)) return Node.Frames;
    return nodeLocation(line) ? Node.Location : -1;
  },
  next(line, ev) {
    switch (ev.state) {
      case Node.Location:
        ev.state = Node.Source;
        return 'maybe';
      case Node.Source:
        if (!NODE_CARET.test(line)) return 'end';
        ev.state = Node.Caret;
        return 'maybe';
      case Node.Caret:
      case Node.Gap:
        if (line === '') {
          ev.state = Node.Gap;
          return 'maybe';
        }
        if (!NODE_HEADER.test(line)) return 'end';
        ev.state = Node.Frames;
        return 'join';
      case Node.Frames:
        if (NODE_FRAME.test(line) || INDENTED.test(line) || line === '}') return 'join';
        if (line !== '') return 'end';
        ev.state = Node.Tail;
        return 'maybe';
      default:
        return line.startsWith('Node.js v') ? 'last' : 'end';
    }
  },
};

export const BUILT_IN: Readonly<Record<MultilineRule, Rule>> = { python, java, go, nodejs };

/** The operator's or tenant's start-of-event pattern: a matching line starts an event, any other continues the open one. */
export function customRule(pattern: string): Rule {
  let re: RE2JS;
  try {
    re = RE2JS.compile(pattern);
  } catch (err) {
    throw new ConfigError([`JOBHARVEST_MULTILINE_START is not a valid RE2 pattern: ${(err as Error).message}`]);
  }
  // Checked here too, not only at admission: the harvester runs this for pods a webhook of any version signed.
  const size = re.programSize();
  if (size > MAX_START_PROGRAM) throw new ConfigError([`JOBHARVEST_MULTILINE_START compiles to ${size} instructions, more than ${MAX_START_PROGRAM} (lower the repeat counts)`]);
  // A line that ends the open event is asked again at once, as the start of
  // the next: one match per line, not two (the match is most of the cost).
  let last: string | undefined;
  let lastMatched = false;
  const starts = (line: string): boolean => {
    if (line !== last) {
      lastMatched = re.test(lineStart(line));
      last = line;
    }
    return lastMatched;
  };
  const literals = literalPrefixes(pattern);
  return {
    name: 'custom',
    start: (line) => (starts(line) ? 0 : -1),
    next: (line) => (starts(line) ? 'end' : 'join'),
    ...(literals && { startsEvent: startsWithAny(literals) }),
  };
}

/**
 * The line's first START_MATCH_BYTES bytes of UTF-8, cut before a character
 * that would not fit whole: what a start pattern is matched against. `$`
 * matches at the cut of a longer line.
 */
export function lineStart(line: string): string {
  // No UTF-16 unit takes more than 3 bytes: a line this short fits whole.
  if (line.length <= START_MATCH_BYTES / 3) return line;
  let bytes = 0;
  let i = 0;
  while (i < line.length) {
    const c = line.charCodeAt(i);
    const pair = c >= 0xd800 && c < 0xdc00 && i + 1 < line.length && (line.charCodeAt(i + 1) & 0xfc00) === 0xdc00;
    const w = c < 0x80 ? 1 : c < 0x800 ? 2 : pair ? 4 : 3;
    if (bytes + w > START_MATCH_BYTES) return line.slice(0, i);
    bytes += w;
    i += pair ? 2 : 1;
  }
  return line;
}

/** Enough for `^(DEBUG|INFO|WARN|ERROR) ` spelled out several ways; more, and the match is left to RE2. */
const MAX_LITERALS = 64;

/**
 * The lines an anchored pattern made only of literal characters, escaped
 * punctuation, groups and alternation starts, as the literal prefixes it
 * stands for: `^(?:\{|(?:INFO|WARN) )` is "{", "INFO " and "WARN ". Undefined
 * for anything else (a class, a quantifier, a flag, an alternation outside
 * a group, which would not be anchored), and those go to RE2. A line matches
 * such a pattern exactly when it starts with one of them, which a byte
 * comparison tells without making the line a string or running a matcher.
 */
export function literalPrefixes(pattern: string): string[] | undefined {
  if (!pattern.startsWith('^')) return undefined;
  let i = 1;
  let bad = false;
  const seq = (): string[] => {
    let acc = [''];
    while (i < pattern.length && !bad) {
      const c = pattern[i]!;
      if (c === ')' || c === '|') break;
      let part: string[];
      if (c === '(') {
        i++;
        if (pattern.startsWith('?:', i)) i += 2;
        else if (pattern[i] === '?') bad = true;
        part = alt();
        if (pattern[i] !== ')') bad = true;
        i++;
      } else if (c === '\\') {
        // RE2 reads a backslash before punctuation as that character; before a letter or digit it is a class, an anchor or a code.
        const x = pattern[i + 1];
        if (x === undefined || x.charCodeAt(0) > 0x7e || /[A-Za-z0-9]/.test(x)) bad = true;
        part = [x ?? ''];
        i += 2;
      } else if ('.[]{}*+?^$'.includes(c)) {
        bad = true;
        part = [];
      } else {
        const ch = String.fromCodePoint(pattern.codePointAt(i)!);
        // U+FFFD is what a line's invalid bytes decode to: it would match a decoded line but not its bytes.
        if (ch === '\uFFFD') bad = true;
        part = [ch];
        i += ch.length;
      }
      if (i < pattern.length && '*+?{'.includes(pattern[i]!)) bad = true;
      const next: string[] = [];
      for (const a of acc) for (const b of part) next.push(a + b);
      if (next.length > MAX_LITERALS) bad = true;
      acc = next;
    }
    return acc;
  };
  const alt = (): string[] => {
    const out = seq();
    while (!bad && pattern[i] === '|') {
      i++;
      out.push(...seq());
      if (out.length > MAX_LITERALS) bad = true;
    }
    return out;
  };
  const all = seq();
  return bad || i !== pattern.length ? undefined : all;
}

/** Whether a record's message starts with one of `literals`: on a parsed line's bytes, else on its text. */
function startsWithAny(literals: readonly string[]): (r: LogRecord) => boolean {
  const bytes = literals.map((l) => Buffer.from(l, 'utf8'));
  return (r) => {
    if (!(r instanceof CriRecord)) {
      const text = r.message;
      return literals.some((l) => text.startsWith(l));
    }
    const src = r.src;
    const at = r.msgAt;
    const room = r.msgEnd - at;
    for (const b of bytes) {
      if (b.length > room) continue;
      let k = 0;
      while (k < b.length && src[at + k] === b[k]) k++;
      if (k === b.length) return true;
    }
    return false;
  };
}

