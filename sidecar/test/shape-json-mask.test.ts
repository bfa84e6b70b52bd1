import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../config.ts';
import { parseJsonFields } from '../shape/json.ts';
import { Masker } from '../shape/mask.ts';
import { parseShaping } from '../shaping-settings.ts';
import { testConfig } from '../../test/support/sidecar-helpers.ts';
import { harness, Lines, shaping } from './shape-helpers.ts';

const BOUNDS = { maxFields: 64, maxDepth: 4 };

describe('json fields', () => {
  it('an object becomes fields; the message stays the line as written', async () => {
    const h = harness(shaping({ PARSE: 'json' }));
    const line = '  {"level":"info","msg":"started","n":3,"ok":true,"x":null,"tags":["a","b"]}';
    await h.shaper.push(new Lines().make([line, 'plain text', '[1,2]', '{not json']));
    expect(h.out[0]!.message).toBe(line);
    expect(h.out[0]!.fields).toEqual({ level: 'info', msg: 'started', n: 3, ok: true, x: null, tags: ['a', 'b'] });
    expect(h.out.slice(1).map((r) => r.fields)).toEqual([undefined, undefined, undefined]);
    expect(h.stats.jsonRecords).toBe(1);
    expect(h.stats.jsonTooWide).toBe(0);
  });

  it('deeper than JSON_MAX_DEPTH: the nested value is kept as its JSON text', () => {
    const r = parseJsonFields('{"a":{"b":{"c":1}},"d":[1,[2,{"e":3}]],"f":"x"}', { maxFields: 64, maxDepth: 2 });
    expect(r).toEqual({ fields: { a: { b: '{"c":1}' }, d: [1, '[2,{"e":3}]'], f: 'x' } });
    const deep = parseJsonFields('{"l1":{"l2":{"l3":{"l4":{"l5":{"l6":1}}}}}}', BOUNDS);
    expect(deep).toEqual({ fields: { l1: { l2: { l3: { l4: '{"l5":{"l6":1}}' } } } } });
  });

  it('wider than JSON_MAX_FIELDS (all levels counted): stays plain, counted', async () => {
    expect(parseJsonFields('{"a":1,"b":{"c":2,"d":3}}', { maxFields: 3, maxDepth: 4 })).toBe('too-wide');
    expect(parseJsonFields('{"a":1,"b":{"c":2}}', { maxFields: 3, maxDepth: 4 })).toEqual({ fields: { a: 1, b: { c: 2 } } });
    const h = harness(shaping({ PARSE: 'json', JSON_MAX_FIELDS: '10' }));
    const wide = JSON.stringify(Object.fromEntries(Array.from({ length: 11 }, (_, i) => [`k${i}`, i])));
    await h.shaper.push(new Lines().make([wide]));
    expect(h.out[0]!.fields).toBeUndefined();
    expect(h.out[0]!.message).toBe(wide);
    expect(h.stats.jsonTooWide).toBe(1);
  });

  it('a "__proto__" key stays a field', () => {
    const r = parseJsonFields('{"__proto__":{"polluted":1}}', BOUNDS);
    expect(typeof r === 'object' && Object.keys(r.fields)).toEqual(['__proto__']);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('masking a "__proto__" field replaces the field and leaves the prototype alone; unchanged values are not copied', () => {
    const m = new Masker({ rules: shaping({ MASK: 'password' }).mask!.rules, patterns: [], replacement: '[MASKED]' });
    const r = parseJsonFields('{"__proto__":{"cmd":"login password=hunter2"},"ok":{"n":1}}', BOUNDS);
    if (typeof r !== 'object') throw new Error('not parsed');
    const masked = m.fields(r.fields);
    expect(Object.getPrototypeOf(masked)).toBe(Object.prototype);
    expect(Object.keys(masked)).toEqual(['__proto__', 'ok']);
    expect(Object.getOwnPropertyDescriptor(masked, '__proto__')?.value).toEqual({ cmd: 'login password=[MASKED]' });
    expect(masked.ok).toBe(r.fields.ok);
    expect(m.fields(masked)).toBe(masked);
  });

  it('a multiline JSON document joined by a custom pattern is parsed whole', async () => {
    const h = harness(shaping({ PARSE: 'json', MULTILINE_START: '^\\{' }));
    await h.shaper.push(new Lines().make(['{', '  "a": 1,', '  "b": [2]', '}', '{"c":3}']));
    await h.shaper.flush();
    expect(h.out.map((r) => r.fields)).toEqual([{ a: 1, b: [2] }, { c: 3 }]);
  });
});

const mask = (rules: string, text: string, patterns: string[] = []) => {
  const m = new Masker({ rules: rules ? shaping({ MASK: rules }).mask!.rules : [], patterns, replacement: '[MASKED]' });
  return { text: m.text(text), matches: m.matches };
};

describe('masks', () => {
  it('bearer: the token goes, the scheme stays', () => {
    expect(mask('bearer', 'GET /x Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln== ok')).toEqual({ text: 'GET /x Authorization: Bearer [MASKED] ok', matches: 1 });
    expect(mask('bearer', 'headers={"authorization": "bearer abc123"}').text).toBe('headers={"authorization": "bearer [MASKED]"}');
  });

  it('aws-access-key: AKIA and ASIA keys', () => {
    expect(mask('aws-access-key', 'using AKIAIOSFODNN7EXAMPLE and ASIAY34FZKBOKMUTVV7A, not AKIA123')).toEqual({ text: 'using [MASKED] and [MASKED], not AKIA123', matches: 2 });
  });

  it('password: only the value', () => {
    expect(mask('password', 'connect user=bob password=hunter2 host=db').text).toBe('connect user=bob password=[MASKED] host=db');
    expect(mask('password', 'passwd: s3cr3t!').text).toBe('passwd: [MASKED]');
    expect(mask('password', "DB_PWD='a b c' next").text).toBe("DB_PWD='[MASKED]' next");
    expect(mask('password', '{"user":"bob","password":"my pass","pwd":"x"}')).toEqual({ text: '{"user":"bob","password":"[MASKED]","pwd":"[MASKED]"}', matches: 2 });
  });

  it('private-key: a joined PEM block keeps its markers; a single header line loses what follows it', async () => {
    const pem = ['-----BEGIN RSA PRIVATE KEY-----', 'MIIEowIBAAKCAQEAx1', 'Zm9vYmFy', '-----END RSA PRIVATE KEY-----'];
    const h = harness(shaping({ MULTILINE_START: '^(?:-----BEGIN|\\S)', MASK: 'private-key' }));
    await h.shaper.push(new Lines().make(['key:', ...pem.map((l, i) => (i === 0 ? l : `  ${l}`)), 'done']));
    await h.shaper.flush();
    expect(h.messages()).toEqual(['key:', '-----BEGIN RSA PRIVATE KEY-----[MASKED]-----END RSA PRIVATE KEY-----', 'done']);
    expect(h.stats.masked).toBe(1);
    expect(mask('private-key', 'k=-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBg\\n-----END PRIVATE KEY----- x').text).toBe('k=-----BEGIN PRIVATE KEY-----[MASKED]-----END PRIVATE KEY----- x');
    expect(mask('private-key', '-----BEGIN EC PRIVATE KEY----- MHcCAQEEI').text).toBe('-----BEGIN EC PRIVATE KEY-----[MASKED]');
    expect(mask('private-key', '-----BEGIN CERTIFICATE----- MIIB')).toEqual({ text: '-----BEGIN CERTIFICATE----- MIIB', matches: 0 });
  });

  it('private-key without joining: the body lines after a BEGIN line are masked whole, up to the END line', async () => {
    const h = harness(shaping({ MASK: 'private-key' }));
    const l = new Lines();
    await h.shaper.push(l.make(['key:', '-----BEGIN RSA PRIVATE KEY-----', 'Proc-Type: 4,ENCRYPTED', 'MIIEowIBAAKCAQEAx1', 'Zm9vYmFy==', '-----END RSA PRIVATE KEY-----', 'done'], 'stderr'));
    await h.shaper.push(l.make(['-----BEGIN PRIVATE KEY-----', 'MIIEvQIBADANBg', 'not a key line: the block ended without its END', 'more'], 'stderr'));
    expect(h.messages()).toEqual([
      'key:',
      '-----BEGIN RSA PRIVATE KEY-----',
      '[MASKED]',
      '[MASKED]',
      '[MASKED]',
      '-----END RSA PRIVATE KEY-----',
      'done',
      '-----BEGIN PRIVATE KEY-----',
      '[MASKED]',
      'not a key line: the block ended without its END',
      'more',
    ]);
    expect(h.stats.masked).toBe(4);
  });

  it('all, operator patterns (RE2) and counts; the replacement is literal', () => {
    const m = new Masker({ rules: shaping({ MASK: 'all' }).mask!.rules, patterns: ['tok_[a-z0-9]{8}', '(?i)secret-\\d+'], replacement: '$1<x>' });
    expect(m.text('a tok_abcd1234 b SECRET-42 c password=p AKIAIOSFODNN7EXAMPLE')).toBe('a $1<x> b $1<x> c password=$1<x> $1<x>');
    expect(m.matches).toBe(4);
  });

  it('a pathological operator pattern against a 100 KB line completes (RE2 is linear)', () => {
    expect(mask('', 'x'.repeat(100_000), ['(x+x+)+y'])).toEqual({ text: 'x'.repeat(100_000), matches: 0 });
    expect(mask('', 'x'.repeat(100_000) + 'y', ['(x+x+)+y'])).toEqual({ text: '[MASKED]', matches: 1 });
  });

  it('masks the message and the JSON field values; a secret JSON escapes hid from the text leaves the message with it', async () => {
    const h = harness(shaping({ PARSE: 'json', MASK: 'all' }));
    const plain = '{"msg":"login","auth":"Bearer abc.def","nested":{"password":"pw"}}';
    // An escaped letter hides an AWS key from the text; an escaped slash cuts a bearer token short there.
    const escaped = ['{"msg":"login","key":"\\u0041KIAIOSFODNN7EXAMPLE"}', '{"auth":"Bearer abc\\/def.ghi","n":1}'];
    await h.shaper.push(new Lines().make([plain, ...escaped]));
    const [p, k, b] = h.out;
    // Masked in the text: the message stays the line as written, but for the masks.
    expect(p!.message).toBe('{"msg":"login","auth":"Bearer [MASKED]","nested":{"password":"[MASKED]"}}');
    expect(p!.fields).toEqual({ msg: 'login', auth: 'Bearer [MASKED]', nested: { password: '[MASKED]' } });
    // Hidden by escapes: masked with the escapes spelled out, so nothing of the secret is left in the message.
    expect(k!.message).toBe('{"msg":"login","key":"[MASKED]"}');
    expect(k!.fields).toEqual({ msg: 'login', key: '[MASKED]' });
    expect(b!.message).toBe('{"auth":"Bearer [MASKED]","n":1}');
    expect(b!.message).not.toContain('def');
    expect(b!.fields).toEqual({ auth: 'Bearer [MASKED]', n: 1 });
    // Each secret once: the masks found them all in the text, spelled out.
    expect(h.stats.masked).toBe(4);
  });

  it('a line no mask matched keeps its escapes; a secret only a field mask finds (an escaped quote) still leaves the message', async () => {
    const h = harness(shaping({ PARSE: 'json', MASK_PATTERNS: '["se\\"cret"]' }));
    const kept = '{"path":"a\\/b","name":"\\u00e9t\\u00E9","q":"say \\"hi\\""}';
    await h.shaper.push(new Lines().make([kept, '{"a":"se\\"cret","b":1}', '{"x":"se"}']));
    expect(h.messages()).toEqual([kept, '{"a":"[MASKED]","b":1}', '{"x":"se"}']);
    expect(h.out[1]!.fields).toEqual({ a: '[MASKED]', b: 1 });
    expect(h.stats.masked).toBe(1);
  });

  it('masks read escapes as a JSON reader does; escapes outside a secret stay as written, inside JSON strings only', () => {
    const m = new Masker({ rules: shaping({ MASK: 'all' }).mask!.rules, patterns: ['secret-[0-9]+'], replacement: '[MASKED]' });
    const line = '{"a":"x\\/y\\u0041\\u00e9\\ud83d\\ude00\\u0022\\u005c\\u001f\\n\\"\\\\u0041 secr\\u0065t-1\\/2"}';
    expect(m.text(line)).toBe('{"a":"x\\/y\\u0041\\u00e9\\ud83d\\ude00\\u0022\\u005c\\u001f\\n\\"\\\\u0041 [MASKED]\\/2"}');
    // Not in a JSON string: a backslash is a backslash.
    expect(m.text('C:\\users\\u0041KIAIOSFODNN7EXAMPLE {')).toBe('C:\\users\\u0041KIAIOSFODNN7EXAMPLE {');
    expect(m.text('{"a": broken \\u0041KIAIOSFODNN7EXAMPLE')).toBe('{"a": broken \\u0041KIAIOSFODNN7EXAMPLE');
    expect(m.matches).toBe(1);
  });
});

describe('shaping configuration', () => {
  it('all off by default: no shaping section at all', () => {
    expect(testConfig().shaping).toBeUndefined();
  });

  it('reads the settings into a typed section', () => {
    const cfg = testConfig({
      JOBHARVEST_MULTILINE: 'python, Java',
      JOBHARVEST_MULTILINE_MAX_LINES: '50',
      JOBHARVEST_MULTILINE_MAX_BYTES: '1000000',
      JOBHARVEST_MAX_RECORD_BYTES: '65536',
      JOBHARVEST_PARSE: 'json',
      JOBHARVEST_MASK: 'all',
      JOBHARVEST_MASK_PATTERNS: '["tok_[a-z]+"]',
    });
    expect(cfg.shaping).toEqual({
      multiline: { rules: ['python', 'java'], maxLines: 50, maxBytes: 65536, flushMs: 1000 },
      json: { maxFields: 64, maxDepth: 4, original: 'lossy' },
      mask: { rules: ['bearer', 'aws-access-key', 'private-key', 'password', 'url-userinfo'], patterns: ['tok_[a-z]+'], replacement: '[MASKED]' },
    });
  });

  it('refuses unknown rules, bad bounds and MASK_PATTERNS that is not an array of strings', () => {
    const problems = (env: Record<string, string>) => parseShaping(env, 262_144).problems;
    expect(problems({ JOBHARVEST_MULTILINE: 'ruby' })).toEqual([expect.stringContaining("JOBHARVEST_MULTILINE has an unknown rule 'ruby'")]);
    expect(problems({ JOBHARVEST_MASK: 'ssn' })).toEqual([expect.stringContaining("JOBHARVEST_MASK has an unknown rule 'ssn'")]);
    expect(problems({ JOBHARVEST_MASK_PATTERNS: '"x"' })).toEqual([expect.stringContaining('must be a JSON array')]);
    expect(problems({ JOBHARVEST_MASK_PATTERNS: '[1]' })).toEqual([expect.stringContaining('must be a JSON array')]);
    expect(problems({ JOBHARVEST_PARSE: 'yaml' })).toEqual([expect.stringContaining('JOBHARVEST_PARSE must be one of none, json')]);
    expect(problems({ JOBHARVEST_MULTILINE: 'go', JOBHARVEST_MULTILINE_MAX_LINES: '1' })).toEqual([expect.stringContaining('JOBHARVEST_MULTILINE_MAX_LINES must be an integer')]);
    expect(problems({ JOBHARVEST_PARSE: 'json', JOBHARVEST_JSON_MAX_DEPTH: '0' })).toEqual([expect.stringContaining('JOBHARVEST_JSON_MAX_DEPTH')]);
    expect(problems({ JOBHARVEST_PARSE: 'json', JOBHARVEST_JSON_ORIGINAL: 'sometimes' })).toEqual([expect.stringContaining("JOBHARVEST_JSON_ORIGINAL must be one of lossy, always, got 'sometimes'")]);
    expect(() => loadConfig({ POD_NAME: 'p', POD_NAMESPACE: 'n', POD_UID: 'u', JOBHARVEST_MULTILINE: 'ruby' })).toThrow(ConfigError);
  });

  it('a bad RE2 pattern is refused when the stage is built', () => {
    expect(() => harness(shaping({ MASK_PATTERNS: '["(unclosed"]' }))).toThrow(/JOBHARVEST_MASK_PATTERNS\[0\] is not a valid RE2 pattern/);
    expect(() => harness(shaping({ MASK_PATTERNS: '["ok", "(?P<n>x"]' }))).toThrow(ConfigError);
  });
});
