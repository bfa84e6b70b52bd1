// encode/json-anyvalue.ts reads a JSON object line straight from its bytes;
// the object path (shape/json.ts's parseJsonFields, then otlp.ts's measure
// and writeValue over the parsed object) is the reference. Generated lines,
// broken variants of them and hand-written edge cases are held to the
// contract: scanJson says JSON_PLAIN only for what parseJsonFields calls
// 'plain', JSON_OK only for lines whose fields are the object as parsed, and
// a record encoded from the bytes is byte for byte the record encoded from
// the parsed object.
import { isUtf8 } from 'node:buffer';
import { isDeepStrictEqual } from 'node:util';
import { describe, expect, it } from 'vitest';
import { VERSION } from '../../src/contract/version.ts';
import { JSON_OK, JSON_PLAIN, JSON_SLOW, JsonScan, scanJson } from '../encode/json-anyvalue.ts';
import { OtlpEncoder } from '../encode/otlp.ts';
import { severityOf } from '../encode/severity.ts';
import { CriRecord, type Fields, type LogRecord } from '../records/record.ts';
import { ShapedRecord, type JsonFields } from '../records/shaped.ts';
import { parseJsonFields } from '../shape/json.ts';
import type { JsonSettings } from '../shaping-settings.ts';
import { CriDecoder } from '../sources/node/cri.ts';
import { makeMeta, testConfig } from '../../test/support/sidecar-helpers.ts';
import { otlpRoot } from './otlp-proto.ts';
import { seeded } from '../../test/support/seeded.ts';
import { harness, otlpValues as writtenByEncoder, shaping } from './shape-helpers.ts';

/** The seed of the random lines; JSON_ANYVALUE_SEED=<n> replays a reported failure. */
const SEED = Number(process.env.JSON_ANYVALUE_SEED ?? 0x5eed1e55);
/** Generated valid lines per bound setting; each also gets a truncated and a broken variant. */
const LINES_PER_BOUND = 5000;

const DEFAULTS: JsonSettings = { maxFields: 64, maxDepth: 4 };
const SMALL: JsonSettings = { maxFields: 5, maxDepth: 2 };
const ROOMY: JsonSettings = { maxFields: 1000, maxDepth: 16 };

const id = testConfig().identity;
const encoder = new OtlpEncoder(id, 'jobharvest', VERSION);
const OBSERVED = { sec: 1_714_979_300, nanos: 123_456_789 };
const TS = '2024-05-06T07:08:09.123456789Z';
const FILE = makeMeta('main', 0, 'f00000000000000f');
const Req = otlpRoot.lookupType('otlp.ExportLogsServiceRequest');
const VERDICT: Record<number, string> = { [JSON_OK]: 'JSON_OK', [JSON_PLAIN]: 'JSON_PLAIN', [JSON_SLOW]: 'JSON_SLOW' };
/** The scan the test's own looks at a line use. */
const SCAN = new JsonScan();

// ---------------------------------------------------------------- generator

const STRING_PIECES = [
  'a', 'hello world', ' ', 'x'.repeat(40), 'DEL\x7f', "it's", '{}[],:', 'true', 'null', '-0',
  '\\"', '\\\\', '\\n', '\\/', '\\b\\f\\r\\t', '\\u00e9', '\\u0000', '\\u001f', '\\uD83D\\uDE00', '\\ud83d\\ude00',
  '\\ud800', '\\udfff', '\\udc00\\ud800', '\\u2028', '\\uFFFF',
  'é', 'grüße', '日本', '🚀', '\u2028', '\ufeff',
];
const NUMBER_LITERALS = [
  '0', '-0', '1', '-1', '-12', '30', '50', '123456789012345', '-123456789012345', '1234567890123456', '12345678901234567',
  '9007199254740991', '9007199254740992', '9007199254740993', '-9007199254740991', '-9007199254740993', '18446744073709551616',
  '0.1', '123.456', '-0.0', '0.30000000000000004', '1.0', '100.000', '0.000001', '123456789012345.6', '1.7976931348623157e308',
  '1e5', '1E-7', '1.5e300', '1e400', '-1e400', '5e-324', '2.5e-324', '1e-400', '4.9E+1', '0e0', '-0E-0', '12e+2',
];
const SEVERITY_KEYS = ['level', 'severity', 'lvl'];
const SEVERITY_VALUES = ['"ERROR"', '" warn "', '50', '30', '"nonsense"', '"info"', '"Warning"', '60.0', '5e1', '"\\u0045RROR"', '"fatal"', '10', '42', 'null', 'true', '{"x":"error"}', '["error"]', '"INFORMATIONAL"', '"err"', '""'];
const KEY_NAMES = ['msg', 'time', 'user', 'id', 'é', '日本', 'a b', '', '__proto__', 'constructor', 'toString', 'length', '-1', '1.5', '1a', 'level', 'severity', 'lvl'];
const ODD_KEYS = ['"0"', '"42"', '"007"', '"4294967295"', '"lev\\u0065l"', '"a\\"b"', '"\\u00e9"'];

class Gen {
  private keys = 0;
  constructor(
    private readonly rnd: () => number,
    /** Whitespace may be a newline (not inside a CRI line). */
    private readonly newlines = true,
  ) {}

  int(n: number): number {
    return Math.floor(this.rnd() * n);
  }

  chance(p: number): boolean {
    return this.rnd() < p;
  }

  pick<T>(xs: readonly T[]): T {
    return xs[this.int(xs.length)]!;
  }

  ws(): string {
    if (this.chance(0.65)) return '';
    const chars = this.newlines ? [' ', '\t', '\n', '\r'] : [' ', '\t', '\r'];
    let s = '';
    for (let n = 1 + this.int(3); n > 0; n--) s += this.pick(chars);
    return s;
  }

  digits(n: number): string {
    let s = String(1 + this.int(9));
    for (let i = 1; i < n; i++) s += String(this.int(10));
    return s;
  }

  number(): string {
    const sign = this.chance(0.3) ? '-' : '';
    switch (this.int(5)) {
      case 0:
      case 1:
        return this.pick(NUMBER_LITERALS);
      case 2:
        return sign + (this.chance(0.1) ? '0' : this.digits(1 + this.int(20)));
      case 3:
        return sign + (this.chance(0.2) ? '0' : this.digits(1 + this.int(10))) + '.' + String(this.int(10)) + (this.chance(0.7) ? this.digits(this.int(12) + 1) : '');
      default:
        return sign + this.digits(1 + this.int(4)) + (this.chance(0.5) ? '.' + this.digits(1 + this.int(4)) : '') + this.pick(['e', 'E']) + this.pick(['', '+', '-']) + String(this.int(400));
    }
  }

  string(): string {
    let s = '';
    const n = this.int(5);
    for (let i = 0; i < n; i++) s += this.pick(STRING_PIECES);
    // Long values: two-byte lengths, and the copy that is not byte by byte.
    if (this.chance(0.03)) s += this.pick(STRING_PIECES).repeat(50 + this.int(300));
    return `"${s}"`;
  }

  scalar(): string {
    switch (this.int(7)) {
      case 0:
      case 1:
      case 2:
        return this.string();
      case 3:
      case 4:
        return this.number();
      case 5:
        return this.pick(['true', 'false']);
      default:
        return 'null';
    }
  }

  /** A value inside a container at `depth` (the root object is 1). */
  value(depth: number): string {
    if (depth < 7 && this.chance(depth === 1 ? 0.35 : 0.25)) return this.chance(0.5) ? this.object(depth + 1) : this.array(depth + 1);
    return this.scalar();
  }

  width(): number {
    if (this.chance(0.04)) return 6 + this.int(75);
    return this.int(this.chance(0.15) ? 1 : 6);
  }

  array(depth: number): string {
    const n = this.width();
    if (n === 0) return '[' + this.ws() + ']';
    const parts: string[] = [];
    for (let i = 0; i < n; i++) parts.push(this.ws() + this.value(depth) + this.ws());
    return '[' + parts.join(',') + ']';
  }

  key(used: string[]): string {
    const r = this.rnd();
    if (r < 0.04 && used.length > 0) return this.pick(used); // a duplicate
    if (r < 0.08) return this.pick(ODD_KEYS);
    if (r < 0.3) {
      const k = JSON.stringify(this.pick(KEY_NAMES));
      if (!used.includes(k)) return k;
    }
    return `"k${this.keys++}"`;
  }

  object(depth: number, root = false): string {
    const n = this.width();
    const used: string[] = [];
    const parts: string[] = [];
    for (let i = 0; i < n; i++) {
      const k = this.key(used);
      used.push(k);
      parts.push(this.ws() + k + this.ws() + ':' + this.ws() + this.value(depth) + this.ws());
    }
    if (root && this.chance(0.3)) {
      // Level-like fields, sometimes two of them, anywhere among the others.
      for (let m = this.chance(0.2) ? 2 : 1; m > 0; m--) {
        const k = `"${this.pick(SEVERITY_KEYS)}"`;
        if (used.includes(k) && this.chance(0.7)) continue;
        used.push(k);
        parts.splice(this.int(parts.length + 1), 0, this.ws() + k + this.ws() + ':' + this.ws() + this.pick(SEVERITY_VALUES) + this.ws());
      }
    }
    if (parts.length === 0) return '{' + this.ws() + '}';
    return '{' + parts.join(',') + '}';
  }

  line(): string {
    const lead = this.chance(0.25) ? this.pick([' ', '\t', '  ', ' \t ']) : '';
    const trail = this.chance(0.2) ? this.ws() : '';
    return lead + this.object(1, true) + trail;
  }
}

const INTERESTING = [...'"\\{}[],:0-.eE+ \tx\'u/'].map((c) => c.charCodeAt(0)).concat([0x00, 0x01, 0x0a, 0x0d, 0x1f, 0x7f, 0x80, 0xc3, 0xe2, 0xff]);
const BAD_VALUES = ['NaN', 'Infinity', '-Infinity', '01', '-01', '00', '1.', '.5', '-', '+1', '1e', '1e+', '-.5', '0x10', '1_000', '--1', '"a\x01b"', '"a\tb"', '"a\nb"', '"\\x"', '"\\u12"', '"\\u12G4"', '"\\U0041"', '"\\', 'tru', 'nul', 'fals', 'undefined', "'s'", '[1,]', '[,1]', '{,}', '{"a"}', '{"a":}', '{"a" 1}', '{a:1}', '"unterminated'];
const TRAILING = ['x', '}', ',', '{}', ' 1', 'null', '\u0000', '"', ']', '/'];

/** A variant of `line` that is (most likely) no JSON any more; `kind` 0 is a truncation. */
function mutate(g: Gen, line: Buffer, kind = 1 + g.int(9)): Buffer {
  const at = g.int(line.length + 1);
  const byte = (): number => (g.chance(0.6) ? g.pick(INTERESTING) : g.int(256));
  switch (kind) {
    case 0:
      return line.subarray(0, g.int(line.length));
    case 1: {
      if (line.length === 0) return line;
      const b = Buffer.from(line);
      b[Math.min(at, b.length - 1)] = byte();
      return b;
    }
    case 2:
      return Buffer.concat([line.subarray(0, at), Buffer.from([byte()]), line.subarray(at)]);
    case 3:
      return Buffer.concat([line.subarray(0, at), line.subarray(at + 1)]);
    case 4:
      return Buffer.concat([line, Buffer.from(g.pick(TRAILING))]);
    case 5: {
      const close = line.lastIndexOf(125);
      return close < 0 ? line : Buffer.concat([line.subarray(0, close), Buffer.from(','), line.subarray(close)]);
    }
    case 6:
      return Buffer.from(line.toString('utf8').replace(g.chance(0.5) ? /"/ : /"/g, "'"));
    case 7: {
      // A bad value after a random colon, or as the first field.
      const colons: number[] = [];
      for (let i = 0; i < line.length; i++) if (line[i] === 58) colons.push(i);
      if (colons.length > 0 && g.chance(0.5)) {
        const c = g.pick(colons) + 1;
        let v = c;
        while (v < line.length && line[v] !== 44 && line[v] !== 125 && line[v] !== 93) v++;
        if (line[c] !== 123 && line[c] !== 91) return Buffer.concat([line.subarray(0, c), Buffer.from(g.pick(BAD_VALUES)), line.subarray(v)]);
      }
      const open = line.indexOf(123);
      return Buffer.concat([line.subarray(0, open + 1), Buffer.from(`"bad":${g.pick(BAD_VALUES)},`), line.subarray(open + 1)]);
    }
    default: {
      // A bad value as the last field (the error at the very end).
      const close = line.lastIndexOf(125);
      if (close < 0) return line;
      const empty = /^\s*\{\s*$/.test(line.subarray(0, close).toString('latin1'));
      return Buffer.concat([line.subarray(0, close), Buffer.from(`${empty ? '' : ','}"bad":${g.pick(BAD_VALUES)}`), line.subarray(close)]);
    }
  }
}

// --------------------------------------------------------------- the checks

/** Bytes after a message in its chunk: whatever a scanner reading past the end would find there. */
const AFTERS = ['\n', '"}\n', '0}\n', '}', 'u0000"}', ']}', 'e5}', ''].map((s) => Buffer.from(s, 'latin1'));

function criRecord(line: Buffer, after: Buffer = AFTERS[0]!): CriRecord {
  const head = Buffer.from(`${TS} stdout F `, 'latin1');
  const src = Buffer.concat([Buffer.from('xx\n'), head, line, after]);
  const tsAt = 3;
  const msgAt = tsAt + head.length;
  const msgEnd = msgAt + line.length;
  return CriRecord.of(FILE, 1000, 'stdout', src, tsAt, tsAt + TS.length, msgAt, msgEnd, msgEnd - tsAt + 1, 5000, 0);
}

/** How often a ShapedRecord's fields were parsed: the encoder asks only when it cannot read the bytes itself. */
let fieldsParsed = 0;

function jsonFields(bounds: JsonSettings, scanned: boolean): JsonFields {
  return {
    fieldsOf: (message) => {
      fieldsParsed++;
      const parsed = parseJsonFields(message, bounds);
      return typeof parsed === 'object' ? parsed.fields : undefined;
    },
    maxFields: bounds.maxFields,
    maxDepth: bounds.maxDepth,
    verbatim: true,
    scanned,
    // As the object path's plain record: the map is compared, with the line beside it on both sides.
    keepOriginal: true,
  };
}

function request(r: LogRecord): Buffer {
  return Buffer.from(encoder.request([r], OBSERVED));
}

/** The object path: a plain record carrying the parsed fields. */
function objectPath(message: string, fields: Fields, size: number): Buffer {
  return request({ file: FILE, offset: 1000, ts: TS, stream: 'stdout', message, size, safe: 5000, flags: 0, fields, lines: undefined });
}

function decoded(bytes: Buffer): string {
  try {
    return JSON.stringify(Req.toObject(Req.decode(bytes), { longs: String, defaults: true }));
  } catch (err) {
    return `undecodable (${(err as Error).message}): ${bytes.toString('hex')}`;
  }
}

function show(line: Buffer): string {
  return isUtf8(line) ? JSON.stringify(line.toString('utf8')) : `bytes ${line.toString('hex')} (${JSON.stringify(line.toString('utf8'))})`;
}

interface Tally {
  ok: number;
  plain: number;
  slow: number;
  /** JSON_SLOW for a line the object path calls 'plain' (allowed: past a bound before the error). */
  slowPlain: number;
  encoded: number;
}

const newTally = (): Tally => ({ ok: 0, plain: 0, slow: 0, slowPlain: 0, encoded: 0 });

/**
 * Holds one line to the contract; returns scanJson's verdict. `where` says
 * how to make the line again (seed and index) in a failure.
 */
function check(line: Buffer, bounds: JsonSettings, where: string, tally: Tally = newTally(), after: Buffer = AFTERS[0]!): number {
  const origin = criRecord(line, after);
  const text = line.toString('utf8');
  const what = () => `${where}, bounds ${bounds.maxFields}/${bounds.maxDepth}, line ${show(line)}`;
  const verdict = scanJson(SCAN, origin.src, origin.msgAt, origin.msgEnd, bounds.maxFields, bounds.maxDepth);
  const parsed = parseJsonFields(text, bounds);
  // The same bytes at the start of a buffer of their own, with nothing after them.
  const alone = scanJson(SCAN, Buffer.from(line), 0, line.length, bounds.maxFields, bounds.maxDepth);
  if (alone !== verdict) throw new Error(`scanJson says ${VERDICT[verdict]} with bytes after the line and ${VERDICT[alone]} without; ${what()}`);
  if (verdict === JSON_PLAIN) {
    tally.plain++;
    if (parsed !== 'plain') throw new Error(`scanJson says JSON_PLAIN, parseJsonFields ${JSON.stringify(parsed)}; ${what()}`);
    return verdict;
  }
  if (verdict === JSON_SLOW) {
    tally.slow++;
    if (parsed === 'plain') tally.slowPlain++;
    // The fast path that checks keys must find the same and leave the record to the object path.
    if (typeof parsed === 'object' && isUtf8(line)) compare(text, origin, parsed.fields, bounds, what, [false]);
    return verdict;
  }
  if (verdict !== JSON_OK) throw new Error(`scanJson says ${verdict}; ${what()}`);
  tally.ok++;
  if (typeof parsed !== 'object') throw new Error(`scanJson says JSON_OK, parseJsonFields '${parsed}'; ${what()}`);
  // The fields are the object as parsed: nothing kept as text, nothing merged or reordered.
  const raw = JSON.parse(text) as Fields;
  if (!isDeepStrictEqual(parsed.fields, raw) || JSON.stringify(parsed.fields) !== JSON.stringify(raw)) throw new Error(`scanJson says JSON_OK, but parseJsonFields bounded the object: ${JSON.stringify(parsed.fields)}; ${what()}`);
  if (isUtf8(line)) {
    compare(text, origin, parsed.fields, bounds, what, [true, false]);
    tally.encoded++;
  }
  return verdict;
}

/** The request from the bytes (each `scanned`, and once from the message without an origin) equals the object path's, byte for byte. */
function compare(text: string, origin: CriRecord, fields: Fields, bounds: JsonSettings, what: () => string, scans: boolean[]): void {
  const expected = objectPath(text, fields, origin.size);
  const fast = scans.includes(true);
  const variants: Array<[string, ShapedRecord]> = scans.map((scanned) => [`origin, scanned: ${scanned}`, new ShapedRecord({ file: FILE, offset: 1000, ts: TS, stream: 'stdout', size: origin.size, safe: 5000, flags: 0, json: jsonFields(bounds, scanned), origin })]);
  variants.push(['no origin, scanned: false', new ShapedRecord({ file: FILE, offset: 1000, ts: TS, stream: 'stdout', message: text, size: origin.size, safe: 5000, flags: 0, json: jsonFields(bounds, false) })]);
  for (const [how, r] of variants) {
    let got: Buffer;
    const before = fieldsParsed;
    try {
      got = request(r);
    } catch (err) {
      throw new Error(`the fast path (${how}) threw ${(err as Error).message}; ${what()}`, { cause: err });
    }
    if (!got.equals(expected)) throw new Error(`the fast path (${how}) differs from the object path; ${what()}\n fast:   ${decoded(got)}\n object: ${decoded(expected)}`);
    // A line scanJson took is written from its bytes (not parsed after all); one it left to the object path is parsed.
    if (fast !== (fieldsParsed === before)) throw new Error(`the encoder ${fast ? 'parsed' : 'did not parse'} the fields (${how}); ${what()}`);
  }
}

function severityIn(bytes: Buffer): { number: number; text: string } {
  const req = Req.toObject(Req.decode(bytes), { defaults: true }) as { resourceLogs: Array<{ scopeLogs: Array<{ logRecords: Array<{ severityNumber: number; severityText: string }> }> }> };
  const rec = req.resourceLogs[0]!.scopeLogs[0]!.logRecords[0]!;
  return { number: rec.severityNumber, text: rec.severityText };
}

// ------------------------------------------------------------------- tests

describe('json-anyvalue: scanJson and the bytes written agree with the object path', () => {
  for (const [name, bounds, salt] of [
    ['defaults (64 fields, depth 4)', DEFAULTS, 1],
    ['small bounds (5 fields, depth 2)', SMALL, 2],
    ['roomy bounds (1000 fields, depth 16)', ROOMY, 3],
  ] as const) {
    it(`random lines and broken variants, ${name}`, () => {
      const seed = (SEED ^ Math.imul(salt, 0x9e3779b9)) >>> 0;
      const g = new Gen(seeded(seed));
      const tally = newTally();
      const broken = newTally();
      for (let i = 0; i < LINES_PER_BOUND; i++) {
        const line = Buffer.from(g.line(), 'utf8');
        const after = g.pick(AFTERS);
        const where = `seed ${seed} (JSON_ANYVALUE_SEED=${SEED}), line #${i}`;
        const v = check(line, bounds, where, tally, after);
        // A valid line is never plain: the generator makes JSON objects.
        if (v === JSON_PLAIN) throw new Error(`a valid JSON object line scanned as JSON_PLAIN; ${where}, line ${show(line)}`);
        check(mutate(g, line, 0), bounds, `${where}, truncated`, broken, after);
        check(mutate(g, line), bounds, `${where}, broken`, broken, after);
      }
      // The lines reach every verdict, and most valid ones are encoded from their bytes.
      expect(tally.ok).toBeGreaterThan(bounds === SMALL ? LINES_PER_BOUND * 0.15 : LINES_PER_BOUND * 0.4);
      expect(tally.slow).toBeGreaterThan(LINES_PER_BOUND * 0.05);
      expect(broken.plain).toBeGreaterThan(LINES_PER_BOUND);
      expect(broken.ok).toBeGreaterThan(0);
    });
  }

  it('exact verdicts for hand-written lines', () => {
    const cases: Array<[string | Buffer, number, JsonSettings?]> = [
      ['{}', JSON_OK],
      [' \t {"a":1} \t\n\r', JSON_OK],
      ['{ "a" : [ 1 , { } , [ ] ] , "b" : { } }', JSON_OK],
      ['\n{"a":1}', JSON_PLAIN],
      ['\r{"a":1}', JSON_PLAIN],
      ['\ufeff{"a":1}', JSON_PLAIN],
      ['', JSON_PLAIN],
      ['   ', JSON_PLAIN],
      ['plain text', JSON_PLAIN],
      ['[1,2]', JSON_PLAIN],
      ['"text"', JSON_PLAIN],
      ['null', JSON_PLAIN],
      ['{', JSON_PLAIN],
      ['{"a":1}{', JSON_PLAIN],
      ['{"a":1} x', JSON_PLAIN],
      ['{"a":1}\u0000', JSON_PLAIN],
      ['{"a":1,}', JSON_PLAIN],
      ['{"a":[1,]}', JSON_PLAIN],
      ['{,"a":1}', JSON_PLAIN],
      ["{'a':1}", JSON_PLAIN],
      ['{"a":\'x\'}', JSON_PLAIN],
      ['{a:1}', JSON_PLAIN],
      ['{"a" 1}', JSON_PLAIN],
      ['{"a":}', JSON_PLAIN],
      ['{"a":NaN}', JSON_PLAIN],
      ['{"a":Infinity}', JSON_PLAIN],
      ['{"a":-Infinity}', JSON_PLAIN],
      ['{"a":01}', JSON_PLAIN],
      ['{"a":-01}', JSON_PLAIN],
      ['{"a":00}', JSON_PLAIN],
      ['{"a":1.}', JSON_PLAIN],
      ['{"a":.5}', JSON_PLAIN],
      ['{"a":-}', JSON_PLAIN],
      ['{"a":-', JSON_PLAIN],
      ['{"a":+1}', JSON_PLAIN],
      ['{"a":1e}', JSON_PLAIN],
      ['{"a":1e+}', JSON_PLAIN],
      ['{"a":0x10}', JSON_PLAIN],
      ['{"a":tru}', JSON_PLAIN],
      ['{"a":True}', JSON_PLAIN],
      ['{"a":nul}', JSON_PLAIN],
      ['{"a":"x\ty"}', JSON_PLAIN],
      ['{"a":"x\ny"}', JSON_PLAIN],
      ['{"a":"x\u0000y"}', JSON_PLAIN],
      ['{"a":"x\u001fy"}', JSON_PLAIN],
      ['{"a\tb":1}', JSON_PLAIN],
      ['{"a":"\\x"}', JSON_PLAIN],
      ['{"a":"\\u12"}', JSON_PLAIN],
      ['{"a":"\\u12G4"}', JSON_PLAIN],
      ['{"a":"\\u12', JSON_PLAIN],
      ['{"a":"\\', JSON_PLAIN],
      ['{"a":"\\"}', JSON_PLAIN],
      ['{"a":"x', JSON_PLAIN],
      ['{"a":"x\u007fy"}', JSON_OK],
      // Duplicate keys: JSON.parse keeps the last; left to the object path.
      ['{"a":1,"a":2}', JSON_SLOW],
      ['{"b":{"a":1,"a":2}}', JSON_SLOW],
      ['{"b":[{"a":1,"c":0,"a":2}]}', JSON_SLOW],
      ['{"a":{"x":1},"b":{"x":1}}', JSON_OK],
      ['{"x":1,"b":{"x":1},"c":[{"x":1},{"x":2}]}', JSON_OK],
      // Integer-like keys go first in an object's key order.
      ['{"0":1}', JSON_SLOW],
      ['{"a":1,"42":"x"}', JSON_SLOW],
      ['{"a":{"7":1}}', JSON_SLOW],
      ['{"007":1}', JSON_SLOW],
      ['{"-1":1,"1.5":2,"1a":3,"":4}', JSON_OK],
      ['{"__proto__":{"x":1},"constructor":"c","toString":2}', JSON_OK],
      // Escaped keys.
      ['{"lev\\u0065l":"error"}', JSON_SLOW],
      ['{"a\\"b":1}', JSON_SLOW],
      // Depth: the root is 1, its containers 2, ...
      ['{"a":{"b":{"c":{"d":1}}}}', JSON_OK],
      ['{"a":{"b":{"c":{"d":{}}}}}', JSON_SLOW],
      ['{"a":[[["x"]]]}', JSON_OK],
      ['{"a":[[[[]]]]}', JSON_SLOW],
      ['{"a":{"b":1}}', JSON_OK, SMALL],
      ['{"a":{"b":{}}}', JSON_SLOW, SMALL],
      ['{"a":[[1]]}', JSON_SLOW, SMALL],
      ['{"a":{"b":1}}', JSON_SLOW, { maxFields: 64, maxDepth: 1 }],
      // Width: every key and array element at every level counts.
      ['{"a":1,"b":2,"c":3,"d":4,"e":5}', JSON_OK, SMALL],
      ['{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6}', JSON_SLOW, SMALL],
      ['{"a":[1,2,3,4]}', JSON_OK, SMALL],
      ['{"a":[1,2,3,4,5]}', JSON_SLOW, SMALL],
      ['{"a":{"b":1,"c":2},"d":[3,4]}', JSON_SLOW, SMALL],
      [JSON.stringify(Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`k${i}`, i]))), JSON_OK],
      [JSON.stringify(Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, i]))), JSON_SLOW],
      [JSON.stringify({ a: Array.from({ length: 63 }, (_, i) => i) }), JSON_OK],
      [JSON.stringify({ a: Array.from({ length: 64 }, (_, i) => i) }), JSON_SLOW],
      // Past a bound before the error: the object path decides (it says 'plain').
      [JSON.stringify(Object.fromEntries(Array.from({ length: 70 }, (_, i) => [`k${i}`, i]))).slice(0, -1), JSON_SLOW],
      ['{"a":{"b":{"c":{"d":{}}}},', JSON_SLOW],
      ['{"a":1,"a":2,', JSON_SLOW],
      // Numbers of every kind.
      ['{"n":[0,-0,-12,123456789012345,1234567890123456,12345678901234567,9007199254740991,9007199254740992,9007199254740993,-9007199254740991,-9007199254740993]}', JSON_OK],
      ['{"n":[0.1,123.456,-0.0,1e5,1E-7,1.5e300,1e400,-1e400,5e-324,2.5e-324,1e-400,0.30000000000000004,1.0,-1.50,123456789012345.6,0.000000000000001,1.7976931348623157e308]}', JSON_OK],
      ['{"a":0,"b":-0,"c":0.0,"d":-0.0,"e":0e0,"f":-0E+0}', JSON_OK],
      // Strings: escapes, lone surrogates, raw UTF-8.
      ['{"s":"\\" \\\\ \\/ \\b\\f\\n\\r\\t \\u00e9 \\u0000 \\ud800 x\\udc00 \\ud83d\\ude00 \\uDBFF\\uDFFF"}', JSON_OK],
      ['{"é":"é","日本":"日本","🚀":"🚀 emoji","\u2028":"\u2028"}', JSON_OK],
      [`{"long":"${'é日本🚀x'.repeat(2000)}","esc":"${'\\u00e9\\n'.repeat(3000)}"}`, JSON_OK],
      // Invalid UTF-8 is no JSON grammar matter: the decoded string is JSON too.
      [Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0xc3, 0x22, 0x7d]), JSON_OK],
      [Buffer.from([0x7b, 0x22, 0xe2, 0x22, 0x3a, 0x31, 0x7d]), JSON_OK],
      [Buffer.from([0x7b, 0xff, 0x7d]), JSON_PLAIN],
      // Bodies past the request buffer's first size, and lengths of three and four varint bytes.
      [`{"big":"${'x'.repeat(100_000)}","list":[${Array.from({ length: 900 }, (_, i) => `"${'é'.repeat(i)}"`).join(',')}]}`, JSON_OK, ROOMY],
      [`{"huge":"${'日本🚀'.repeat(220_000)}","level":"warn"}`, JSON_OK],
      // Nested past 64 containers (JSON.parse does not mind; the bound does).
      ['{"a":' + '['.repeat(100) + ']'.repeat(100) + '}', JSON_SLOW, { maxFields: 10_000, maxDepth: 64 }],
      ['{"a":' + '['.repeat(62) + ']'.repeat(62) + '}', JSON_OK, { maxFields: 10_000, maxDepth: 64 }],
    ];
    for (const [i, [line, expected, bounds = DEFAULTS]] of cases.entries()) {
      const bytes = Buffer.isBuffer(line) ? line : Buffer.from(line, 'utf8');
      for (const after of AFTERS) {
        const v = check(bytes, bounds, `hand-written case #${i}`, undefined, after);
        expect(VERDICT[v], `case #${i} ${show(bytes)} (followed by ${JSON.stringify(after.toString('latin1'))})`).toBe(VERDICT[expected]);
      }
    }
  });

  it('severity_number and severity_text are the object path\'s', () => {
    const cases: Array<[string, { number: number; text: string } | undefined]> = [
      ['{"level":"ERROR","msg":"x"}', { number: 17, text: 'ERROR' }],
      ['{"msg":"x","severity":" warn "}', { number: 13, text: ' warn ' }],
      ['{"lvl":50}', { number: 17, text: 'error' }],
      ['{"level":30}', { number: 9, text: 'info' }],
      ['{"level":"nonsense"}', undefined],
      ['{"level":"nonsense","severity":"warn"}', { number: 13, text: 'warn' }],
      ['{"lvl":"info","level":"debug"}', { number: 5, text: 'debug' }],
      ['{"severity":60,"level":42}', { number: 21, text: 'fatal' }],
      ['{"level":"\\u0045RROR"}', { number: 17, text: 'ERROR' }],
      ['{"level":"Warning\\t"}', { number: 13, text: 'Warning\t' }],
      ['{"level" : 50.0 }', { number: 17, text: 'error' }],
      ['{"level":5e1}', { number: 17, text: 'error' }],
      ['{"level":50.5}', undefined],
      ['{"level":"50"}', undefined],
      ['{"level":null,"lvl":"crit"}', { number: 21, text: 'crit' }],
      ['{"level":true}', undefined],
      ['{"level":{"x":"error"}}', undefined],
      ['{"level":["error"]}', undefined],
      ['{"x":{"level":"error"}}', undefined],
      ['{"LEVEL":"error"}', undefined],
      ['{"level":"INFORMATIONAL"}', { number: 9, text: 'INFORMATIONAL' }],
      ['{"level":"érror"}', undefined],
      // Duplicates: the last one counts, decided by the object path.
      ['{"level":"error","level":"info"}', { number: 9, text: 'info' }],
      // A tenant's level value is no key into anything's prototype.
      ['{"level":"constructor"}', undefined],
      ['{"level":"__proto__"}', undefined],
      ['{"level":"toString","lvl":"warn"}', { number: 13, text: 'warn' }],
      // The encoder remembers levels by their bytes: a number is the whole token, not the digits it starts with.
      ['{"level":1e1}', { number: 1, text: 'trace' }],
      ['{"level":1}', undefined],
      ['{"level":1e1,"lvl":"info"}', { number: 1, text: 'trace' }],
      ['{"level":1 ,"lvl":"info"}', { number: 9, text: 'info' }],
      ['{"level":"error"}', { number: 17, text: 'error' }],
      ['{"level":"error\\u0020"}', { number: 17, text: 'error ' }],
      ['{"level":"errorerrorerrorerrorerrorerror"}', undefined],
    ];
    for (const [line, expected] of cases) {
      const bytes = Buffer.from(line, 'utf8');
      const parsed = parseJsonFields(line, DEFAULTS);
      if (typeof parsed !== 'object') throw new Error(`not JSON: ${line}`);
      expect(severityOf(parsed.fields), line).toEqual(expected);
      const want = severityIn(objectPath(line, parsed.fields, 100));
      expect(want, line).toEqual(expected ?? { number: 0, text: '' });
      const origin = criRecord(bytes);
      const verdict = check(bytes, DEFAULTS, `severity case ${line}`);
      for (const scanned of verdict === JSON_OK ? [true, false] : [false]) {
        const r = new ShapedRecord({ file: FILE, offset: 1000, ts: TS, stream: 'stdout', size: origin.size, safe: 5000, flags: 0, json: jsonFields(DEFAULTS, scanned), origin });
        expect(severityIn(request(r)), `${line}, scanned: ${scanned}`).toEqual(want);
      }
    }
  });
});

// ------------------------------------------------------------ the shaper

/** A CRI file's bytes for these messages, some split into P fragments, as the runtime writes them. */
function criFile(messages: readonly Buffer[], g: Gen): Buffer {
  const parts: Buffer[] = [];
  for (const [i, m] of messages.entries()) {
    const ts = `2024-05-06T07:08:${String(9 + (i % 50)).padStart(2, '0')}.${String(i).padStart(9, '0')}Z`;
    const stream = i % 5 === 4 ? 'stderr' : 'stdout';
    if (m.length > 4 && g.chance(0.1)) {
      const cut = 1 + g.int(m.length - 1);
      parts.push(Buffer.from(`${ts} ${stream} P `), m.subarray(0, cut), Buffer.from('\n'));
      parts.push(Buffer.from(`${ts} ${stream} F `), m.subarray(cut), Buffer.from('\n'));
    } else parts.push(Buffer.from(`${ts} ${stream} F `), m, Buffer.from('\n'));
  }
  return Buffer.concat(parts);
}

/** The record carries a value the encoder wrote while the shaping stage read its line. */
function prepared(r: LogRecord): boolean {
  return r instanceof ShapedRecord && r.prepared !== undefined;
}

/** The record's line is valid UTF-8 (so the shaper may read it as bytes). */
function utf8Ok(r: LogRecord): boolean {
  return r instanceof CriRecord && isUtf8(r.src.subarray(r.msgAt, r.msgEnd));
}

describe('the shaping stage decides on the bytes as it would on the message', () => {
  for (const [name, env, bounds, salt, otlpValues] of [
    ['defaults', { PARSE: 'json' }, DEFAULTS, 11, false],
    ['small bounds', { PARSE: 'json', JSON_MAX_FIELDS: '5', JSON_MAX_DEPTH: '2' }, SMALL, 12, false],
    // As for the OTLP protobuf sink: the shaping stage writes the values the encoder copies.
    ['defaults, values written by the shaper', { PARSE: 'json' }, DEFAULTS, 13, true],
    ['small bounds, values written by the shaper', { PARSE: 'json', JSON_MAX_FIELDS: '5', JSON_MAX_DEPTH: '2' }, SMALL, 14, true],
  ] as const) {
    it(`CriRecords through Shaper with PARSE=json, ${name}`, async () => {
      const settings = shaping(env);
      expect(settings.json).toEqual({ ...bounds, original: 'lossy' });
      const seed = (SEED ^ Math.imul(salt, 0x9e3779b9)) >>> 0;
      const g = new Gen(seeded(seed), false);
      const messages: Buffer[] = [
        // Invalid UTF-8 in a JSON line, in a plain line and in a broken one.
        Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0xc3, 0x22, 0x7d]),
        Buffer.concat([Buffer.from('{"level":"error","b":"'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('"}')]),
        Buffer.from([0x6e, 0x6f, 0x20, 0xff, 0x20, 0x6a, 0x73, 0x6f, 0x6e]),
        Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0xff, 0x7d]),
        Buffer.from('plain text'),
        Buffer.from(''),
        Buffer.from('{"a":1,"a":2}'),
        Buffer.from('{"0":1,"a":2}'),
      ];
      for (let i = 0; i < 1500; i++) {
        const line = Buffer.from(g.line(), 'utf8');
        messages.push(line, mutate(g, line, g.chance(0.3) ? 0 : 1 + g.int(9)));
      }
      const lines = messages.filter((m) => !m.includes(0x0a));
      const file = makeMeta('main', 0, 'feedfeedfeedfeed');
      const dec = new CriDecoder(file, 0, 1 << 20);
      const records: LogRecord[] = [];
      dec.push(criFile(lines, g), records);
      dec.end(records);
      expect(records).toHaveLength(lines.length);
      expect(records.every((r) => r instanceof CriRecord)).toBe(true);
      // The same lines as the object path sees them: plain records with the decoded message.
      const plain: LogRecord[] = records.map((r) => ({ file: r.file, offset: r.offset, ts: r.ts, stream: r.stream, message: r.message, size: r.size, safe: r.safe, flags: r.flags }));

      const bytes = harness(settings, undefined, otlpValues ? writtenByEncoder() : {});
      const objects = harness(settings);
      for (let i = 0; i < records.length; i += 100) {
        await bytes.shaper.push(records.slice(i, i + 100));
        await objects.shaper.push(plain.slice(i, i + 100));
      }
      expect(bytes.out).toHaveLength(records.length);
      expect(objects.out).toHaveLength(records.length);
      expect({ jsonRecords: bytes.stats.jsonRecords, jsonTooWide: bytes.stats.jsonTooWide }).toEqual({ jsonRecords: objects.stats.jsonRecords, jsonTooWide: objects.stats.jsonTooWide });
      expect(bytes.stats.jsonRecords).toBeGreaterThan(300);
      expect(bytes.stats.jsonTooWide).toBeGreaterThan(10);

      let json = 0;
      for (const [i, r] of records.entries()) {
        const out = bytes.out[i]!;
        const parsed = parseJsonFields(r.message, bounds);
        const where = `seed ${seed} (JSON_ANYVALUE_SEED=${SEED}), record #${i}, ${show(lines[i]!)}`;
        if (typeof parsed === 'object') {
          json++;
          expect(out, where).toBeInstanceOf(ShapedRecord);
          expect(out.message, where).toBe(r.message);
          expect(isDeepStrictEqual(out.fields, parsed.fields), where).toBe(true);
          expect(isDeepStrictEqual(out.fields, objects.out[i]!.fields), where).toBe(true);
          expect([out.offset, out.ts, out.stream, out.size, out.safe, out.flags], where).toEqual([r.offset, r.ts, r.stream, r.size, r.safe, r.flags]);
          // Written by the shaper exactly when the byte path takes the line (the object path's lines stay as they were).
          const c = r as CriRecord;
          expect(prepared(out), where).toBe(otlpValues && utf8Ok(r) && scanJson(SCAN, c.src, c.msgAt, c.msgEnd, bounds.maxFields, bounds.maxDepth) === JSON_OK);
          const origin = (out as ShapedRecord).origin;
          // The bytes stand for the message only when they are valid UTF-8.
          expect(origin, where).toBe(isUtf8((r as CriRecord).src.subarray((r as CriRecord).msgAt, (r as CriRecord).msgEnd)) ? r : undefined);
        } else {
          expect(out, where).toBe(r);
          expect(objects.out[i]!.fields, where).toBeUndefined();
        }
      }
      expect(json).toBe(bytes.stats.jsonRecords);

      // The invalid UTF-8 lines behave as their decoded strings.
      expect(bytes.out[0]!.fields).toEqual({ a: '\ufffd\ufffd' });
      expect(bytes.out[0]!.message).toBe('{"a":"\ufffd\ufffd"}');
      expect(bytes.out[1]!.fields).toEqual({ level: 'error', b: '\ufffd\ufffd\ufffd' });
      expect(bytes.out[2]).toBe(records[2]);
      expect(bytes.out[3]).toBe(records[3]);

      // Both ways decide alike which records also carry the line as written, and both kinds are many.
      const kept = (out: LogRecord[]) => out.map((r) => r instanceof ShapedRecord && r.json !== undefined && r.json.keepOriginal);
      expect(kept(bytes.out), `seed ${seed}`).toEqual(kept(objects.out));
      const exact = bytes.out.filter((r) => r instanceof ShapedRecord && r.json !== undefined && !r.json.keepOriginal).length;
      expect(exact, `seed ${seed}`).toBeGreaterThan(100);
      expect(bytes.stats.jsonRecords - exact, `seed ${seed}`).toBeGreaterThan(10);

      // And the whole batch goes out as the object path's records would.
      const written = bytes.out.filter(prepared).length;
      const a = Buffer.from(encoder.request(bytes.out, OBSERVED));
      const b = Buffer.from(encoder.request(objects.out, OBSERVED));
      expect(a.equals(b), `seed ${seed}: the shaped batch differs from the object path's`).toBe(true);
      // Encoded once, the values the shaper wrote are let go; encoding again (a retry) reads the lines' bytes, to the same request.
      expect(written > 300).toBe(otlpValues);
      expect(bytes.out.filter(prepared)).toHaveLength(0);
      const again = Buffer.from(encoder.request(bytes.out, OBSERVED));
      expect(again.equals(b), `seed ${seed}: the batch encoded again differs`).toBe(true);
    });
  }
});
