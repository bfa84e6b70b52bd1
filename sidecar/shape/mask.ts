// Masks secrets before a record leaves the pod. Built-in rules are JS RegExp
// that are provably linear (no nested or overlapping quantifiers) or plain
// string code; operator patterns are RE2 (re2js), linear for any pattern.
// Matches are counted; their values are never logged.
import { RE2JS } from 're2js';
import { ConfigError } from '../config.ts';
import { mapLeaves, type FieldValue, type Fields } from '../records/record.ts';
import type { MaskRule, MaskSettings } from './settings.ts';

type Replace = (text: string, replacement: string, count: (n: number) => void) => string;

/** `Authorization: Bearer <token>`: the token goes, the scheme stays so the line still reads. */
const BEARER = /(\bbearer[ \t]+)([A-Za-z0-9\-._~+/]+=*)/gi;
const AWS_KEY = /\b(?:AKIA|ASIA)[A-Z0-9]{16}\b/g;
/** `password=x`, `passwd: x`, `"pwd": "x"`, `DB_PASSWORD=x`: only the value is replaced. */
const PASSWORD = /((?:password|passwd|pwd)["']?[ \t]*[:=][ \t]*)(?:"([^"]*)"|'([^']*)'|([^\s"'&,;]+))/gi;

function regexRule(re: RegExp, keep: (m: string[]) => [string, string]): Replace {
  return (text, replacement, count) => {
    let n = 0;
    const out = text.replace(re, (...m: string[]) => {
      n++;
      const [before, after] = keep(m);
      return before + replacement + after;
    });
    if (n > 0) count(n);
    return out;
  };
}

const PEM_BEGIN = '-----BEGIN ';
const PEM_TAIL = 'PRIVATE KEY-----';

/**
 * PEM private keys: the body between the BEGIN and END lines is replaced,
 * the markers stay. After multiline joining a key spans lines; without an
 * END (a single line, or a key cut by a bound) everything after the header
 * goes, so the part of the key on this line never leaves.
 */
const privateKey: Replace = (text, replacement, count) => {
  let from = 0;
  let out = '';
  let n = 0;
  for (;;) {
    const begin = text.indexOf(PEM_BEGIN, from);
    if (begin < 0) break;
    const headerEnd = text.indexOf(PEM_TAIL, begin + PEM_BEGIN.length);
    const eol = text.indexOf('\n', begin);
    if (headerEnd < 0 || (eol >= 0 && eol < headerEnd) || headerEnd - begin > 80) {
      out += text.slice(from, begin + PEM_BEGIN.length);
      from = begin + PEM_BEGIN.length;
      continue;
    }
    const bodyAt = headerEnd + PEM_TAIL.length;
    const end = text.indexOf('-----END ', bodyAt);
    // A BEGIN line on its own: the key is in the records after it (Masker.textIn).
    if (end < 0 && text.slice(bodyAt).trim() === '') break;
    n++;
    out += text.slice(from, bodyAt) + replacement;
    if (end < 0) {
      from = text.length;
      break;
    }
    from = end;
    // Skip the END marker itself, so its "PRIVATE KEY-----" is not read as a header.
    const endTail = text.indexOf(PEM_TAIL, end);
    if (endTail >= 0 && endTail - end < 80) {
      out += text.slice(end, endTail + PEM_TAIL.length);
      from = endTail + PEM_TAIL.length;
    }
  }
  if (n === 0) return text;
  count(n);
  return out + text.slice(from);
};

const BUILT_IN: Readonly<Record<MaskRule, Replace>> = {
  bearer: regexRule(BEARER, (m) => [m[1]!, '']),
  'aws-access-key': regexRule(AWS_KEY, () => ['', '']),
  'private-key': privateKey,
  password: regexRule(PASSWORD, (m) => {
    const quote = m[2] !== undefined ? '"' : m[3] !== undefined ? "'" : '';
    return [m[1]! + quote, quote];
  }),
};

function re2Rule(pattern: string, index: number): Replace {
  let re: RE2JS;
  try {
    re = RE2JS.compile(pattern);
  } catch (err) {
    throw new ConfigError([`JOBHARVEST_MASK_PATTERNS[${index}] is not a valid RE2 pattern: ${(err as Error).message}`]);
  }
  return (text, replacement, count) => {
    // A cheap test first: most lines hold no secret, and replaceAll copies.
    if (!re.test(text)) return text;
    let n = 0;
    // A function result is taken literally, so a `$` in the replacement stays a `$`.
    const out = re.matcher(text).replaceAll(() => {
      n++;
      return replacement;
    });
    if (n > 0) count(n);
    return out;
  };
}

/** A line of a PEM body, or one of its header lines (`Proc-Type: …`, `DEK-Info: …`), or blank. */
const PEM_BODY = /^\s*[A-Za-z0-9+/=]*\s*$/;
const PEM_HEADER = /^(?:Proc-Type|DEK-Info): /;
/** A 4096-bit RSA key in PEM is about 50 lines; past this, whatever it is, it is not one key. */
const PEM_MAX_LINES = 200;

/** Per stream: the lines of a private key still to come when its BEGIN line went out on its own (no multiline joining). */
export interface MaskState {
  pemLines: number;
}

/** The text ends inside a private key: a BEGIN … PRIVATE KEY----- header with no END after it. */
function opensPrivateKey(text: string): boolean {
  const begin = text.lastIndexOf(PEM_BEGIN);
  if (begin < 0) return false;
  const tail = text.indexOf(PEM_TAIL, begin);
  return tail >= 0 && tail - begin <= 80 && !text.includes('\n', begin) && text.indexOf('-----END ', tail) < 0;
}

const HEX = /^[0-9a-fA-F]{4}$/;

/**
 * A JSON object line with the escapes that merely spell a character (`\/`,
 * and `\uXXXX` for a printable one that is no quote, backslash or surrogate
 * half) written as that character, so that masks read the characters a JSON
 * reader sees: `abc\/def` or `\u0041KIA…` no longer hides a secret from them.
 * Every other byte stays as it was (the values are the same JSON); the text
 * itself when it has no such escape or is no JSON object.
 */
export function spelledOut(text: string): string {
  if (!text.includes('\\') || !text.trimStart().startsWith('{')) return text;
  try {
    JSON.parse(text);
  } catch {
    return text;
  }
  let out = '';
  let from = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) inString = !inString;
    else if (c === 0x5c && inString) {
      const x = text[i + 1];
      let ch: string | undefined;
      if (x === '/') ch = '/';
      else if (x === 'u' && HEX.test(text.slice(i + 2, i + 6))) {
        const code = parseInt(text.slice(i + 2, i + 6), 16);
        if (code >= 0x20 && code !== 0x22 && code !== 0x5c && code !== 0x7f && (code < 0xd800 || code > 0xdfff) && code !== 0x2028 && code !== 0x2029) ch = String.fromCharCode(code);
      }
      if (ch !== undefined) {
        out += text.slice(from, i) + ch;
        i += x === '/' ? 1 : 5;
        from = i + 1;
      } else i++;
    }
  }
  return from === 0 ? text : out + text.slice(from);
}

export class Masker {
  private readonly rules: readonly Replace[];
  /** The private-key rule is on: masking then follows a key over the lines after its BEGIN line. */
  readonly pem: boolean;
  private readonly replacement: string;
  /** Matches replaced so far. */
  matches = 0;
  private readonly count = (n: number): void => {
    this.matches += n;
  };

  constructor(s: MaskSettings) {
    this.rules = [...s.rules.map((r) => BUILT_IN[r]), ...s.patterns.map(re2Rule)];
    this.replacement = s.replacement;
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

  text(s: string): string {
    for (const rule of this.rules) s = rule(s, this.replacement, this.count);
    return s;
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
