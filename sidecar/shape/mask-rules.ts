// The mask rules: each finds the spans of a text to replace. Built-in rules
// are JS RegExp that are linear (no quantifiers that overlap; each says why)
// or plain string code; operator patterns are RE2 (re2js), linear for any
// pattern. mask.ts's Masker runs them over what a JSON reader reads of a line.
import { RE2JS } from 're2js';
import { ConfigError } from '../config.ts';
import type { MaskRule } from '../shaping-settings.ts';

/**
 * A rule finds the spans to replace in a text: [from, to) pairs pushed onto
 * `spans`, in any order; `from` written as -1 - from when the span is a JSON
 * value that is no string, so the replacement goes in as a string. Rules only
 * find; Masker decides what the text becomes, so every rule reads the same
 * text and a span found in a decoded view is mapped back to the raw line.
 */
export type Find = (text: string, spans: number[]) => void;

/** `Authorization: Bearer <token>`: the token goes, the scheme stays so the line still reads. */
const BEARER = /(\bbearer[ \t]+)([A-Za-z0-9\-._~+/]+=*)/gi;
const AWS_KEY = /\b(?:AKIA|ASIA)[A-Z0-9]{16}\b/g;
/**
 * `password=x`, `passwd: x`, `"pwd": "x"`, `DB_PASSWORD=x`: only the value.
 * A quoted value ends at its unescaped closing quote (`"ab\"cd"` is one
 * value), or at the end of the line when the quote is never closed (a value
 * cut short by a bound is still a secret). An unquoted value ends where
 * backslashes run into a quote, and never begins there: that is a quote
 * encoded once or more (`password=\"x\"`), read in its decoded view. Linear:
 * the three branches begin with different characters, a quoted scan stops at
 * the first unescaped quote (the next match's own opening quote at the
 * latest), and in an unquoted value a run of backslashes must end in the one
 * character that follows it.
 */
const PASSWORD = /((?:password|passwd|pwd)["']?[ \t]*[:=][ \t]*)(?:"((?:[^"\\\n]|\\.)*)"?|'((?:[^'\\\n]|\\.)*)'?|((?:[^\s"'&,;\\]|\\+[^\s"'&,;\\])+))/gi;

function regexRule(re: RegExp, group: number): Find {
  return (text, spans) => {
    re.lastIndex = 0;
    for (let m = re.exec(text); m !== null; m = re.exec(text)) {
      if (group === 0) {
        spans.push(m.index, m.index + m[0].length);
        continue;
      }
      const value = m[group]!;
      // Where the group starts: the match is its prefix groups, then the value.
      const at = m.index + m[0].length - value.length;
      spans.push(at, at + value.length);
    }
  };
}

const JSON_NUMBER = /^-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/;
const JSON_WORD = /^(?:null|true|false)\b/;

const passwordRule: Find = (text, spans) => {
  PASSWORD.lastIndex = 0;
  for (let m = PASSWORD.exec(text); m !== null; m = PASSWORD.exec(text)) {
    const quoted = m[2] !== undefined || m[3] !== undefined;
    const value = m[2] ?? m[3] ?? m[4]!;
    const at = m.index + m[1]!.length + (quoted ? 1 : 0);
    if (!quoted && m[1]!.includes('"')) {
      // A JSON member whose value is no string: null or a boolean hides
      // nothing; a number goes, written as a string so the line stays JSON.
      if (JSON_WORD.test(value)) continue;
      const n = JSON_NUMBER.exec(value);
      if (n) {
        spans.push(-1 - at, at + n[0].length);
        continue;
      }
    }
    spans.push(at, at + value.length);
  }
};

/** Ends the authority of a URL: a path, query or fragment, whitespace, or the quote or bracket around the URL. */
const AUTHORITY_END = /[/?#\s"'<>`\\]/;

/**
 * `scheme://user:password@host`: the password goes, the user and host stay.
 * The password runs to the last `@` of the authority, since a password
 * written by hand often holds a raw `@`. Plain string code: a regexp that
 * finds a scheme backwards from any letter would be quadratic on a long word.
 */
const urlUserinfo: Find = (text, spans) => {
  let from = 0;
  for (;;) {
    const sep = text.indexOf('://', from);
    if (sep < 0) return;
    let end = sep + 3;
    let at = -1;
    let colon = -1;
    for (; end < text.length; end++) {
      const c = text[end]!;
      if (AUTHORITY_END.test(c)) break;
      if (c === '@') at = end;
      else if (c === ':' && colon < 0) colon = end;
    }
    // A scheme (a letter at least) before the separator, and a password: user:password@.
    if (sep > 0 && /[A-Za-z0-9+.-]/.test(text[sep - 1]!) && colon >= 0 && at > colon + 1) spans.push(colon + 1, at);
    from = end;
  }
};

const PEM_BEGIN = '-----BEGIN ';
const PEM_TAIL = 'PRIVATE KEY-----';

/**
 * PEM private keys: the body between the BEGIN and END lines is replaced,
 * the markers stay. After multiline joining a key spans lines; without an
 * END (a single line, or a key cut by a bound) everything after the header
 * goes, so the part of the key on this line never leaves.
 */
const privateKey: Find = (text, spans) => {
  let from = 0;
  // The next header tail and line end, kept while still ahead: looked for again from every BEGIN, they would make a line of BEGINs quadratic.
  let headerEnd = -2;
  let eol = -2;
  for (;;) {
    const begin = text.indexOf(PEM_BEGIN, from);
    if (begin < 0) return;
    if (headerEnd !== -1 && headerEnd < begin + PEM_BEGIN.length) headerEnd = text.indexOf(PEM_TAIL, begin + PEM_BEGIN.length);
    if (headerEnd < 0) return;
    if (eol !== -1 && eol < begin) eol = text.indexOf('\n', begin);
    if ((eol >= 0 && eol < headerEnd) || headerEnd - begin > 80) {
      from = begin + PEM_BEGIN.length;
      continue;
    }
    const bodyAt = headerEnd + PEM_TAIL.length;
    const end = text.indexOf('-----END ', bodyAt);
    // Without an END, the key runs to the end of the text, or of the string it is in (a JSON line stays JSON).
    let quote = end < 0 ? text.indexOf('"', bodyAt) : -1;
    while (quote > 0 && text[quote - 1] === '\\') quote = text.indexOf('"', quote + 1);
    const stop = quote >= 0 ? quote : text.length;
    // A BEGIN line on its own: the key is in the records after it (Masker.textIn).
    if (end < 0 && text.slice(bodyAt, stop).trim() === '') return;
    if (end < 0) {
      spans.push(bodyAt, stop);
      return;
    }
    spans.push(bodyAt, end);
    from = end + 1;
    // Skip the END marker itself, so its "PRIVATE KEY-----" is not read as a header.
    const endTail = text.indexOf(PEM_TAIL, end);
    if (endTail >= 0 && endTail - end < 80) from = endTail + PEM_TAIL.length;
  }
};

/** A line of a PEM body, or one of its header lines (`Proc-Type: …`, `DEK-Info: …`), or blank. */
export const PEM_BODY = /^\s*[A-Za-z0-9+/=]*\s*$/;
export const PEM_HEADER = /^(?:Proc-Type|DEK-Info): /;
/** A 4096-bit RSA key in PEM is about 50 lines; past this, whatever it is, it is not one key. */
export const PEM_MAX_LINES = 200;

/** Per stream: the lines of a private key still to come when its BEGIN line went out on its own (no multiline joining). */
export interface MaskState {
  pemLines: number;
}

/** The text ends inside a private key: a BEGIN … PRIVATE KEY----- header with no END after it. */
export function opensPrivateKey(text: string): boolean {
  const begin = text.lastIndexOf(PEM_BEGIN);
  if (begin < 0) return false;
  const tail = text.indexOf(PEM_TAIL, begin);
  return tail >= 0 && tail - begin <= 80 && !text.includes('\n', begin) && text.indexOf('-----END ', tail) < 0;
}

/**
 * A word each rule's matches hold: a text with none of its rules' words holds
 * no match of theirs, and one scan for all of them is cheaper than a scan per
 * rule. Most lines hold none. Cases spelled out rather than a flag, so that
 * the rules that match one case only (AWS key ids, PEM headers) narrow the
 * scan (the `i` flag folds ASCII letters only, so a class says the same).
 */
export const HINT: Readonly<Record<MaskRule, string>> = {
  bearer: '[bB][eE][aA][rR][eE][rR]',
  'aws-access-key': 'AKIA|ASIA',
  'private-key': '-----BEGIN ',
  password: '[pP][aA][sS][sS][wW]|[pP][wW][dD]',
  'url-userinfo': ':\\/\\/',
};

export const BUILT_IN: Readonly<Record<MaskRule, Find>> = {
  bearer: regexRule(BEARER, 2),
  'aws-access-key': regexRule(AWS_KEY, 0),
  'private-key': privateKey,
  password: passwordRule,
  'url-userinfo': urlUserinfo,
};

export function re2Rule(pattern: string, index: number): Find {
  let re: RE2JS;
  try {
    re = RE2JS.compile(pattern);
  } catch (err) {
    throw new ConfigError([`JOBHARVEST_MASK_PATTERNS[${index}] is not a valid RE2 pattern: ${(err as Error).message}`]);
  }
  return (text, spans) => {
    // A cheap test first: most lines hold no secret.
    if (!re.test(text)) return;
    const m = re.matcher(text);
    // An empty match hides nothing: only spans with something in them are replaced.
    while (m.find()) if (m.end() > m.start()) spans.push(m.start(), m.end());
  };
}

