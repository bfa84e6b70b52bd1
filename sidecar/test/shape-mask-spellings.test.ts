// Every spelling of a secret the built-in masks are meant to catch, as a JSON
// reader would read it: escaped, serialized inside a string, nested, quoted
// with an escaped quote, in a URL. Each case checks the secret is gone, that
// every byte outside it is as it was, and that a JSON line stays JSON.
import { describe, expect, it } from 'vitest';
import { VERSION } from '../../src/contract/version.ts';
import { OtlpEncoder } from '../encode/otlp.ts';
import type { LogRecord } from '../records/record.ts';
import { Masker } from '../shape/mask.ts';
import { CriDecoder } from '../sources/node/cri.ts';
import { makeMeta, testConfig } from '../../test/support/sidecar-helpers.ts';
import { harness, Lines, otlpValues, shaping } from './shape-helpers.ts';

const ALL = shaping({ MASK: 'all' }).mask!.rules;
const masker = (replacement = '[MASKED]') => new Masker({ rules: ALL, patterns: [], replacement });

/**
 * Masks `line` with every rule on and checks it became `expected`: the line
 * with each raw spelling of the secret (`secrets`, in order) replaced and
 * nothing else changed; and, where the line was JSON, that it still is.
 */
function masks(line: string, secrets: string[], replacement = '[MASKED]'): string {
  const m = masker(replacement);
  const out = m.text(line);
  let expected = '';
  let from = 0;
  for (const s of secrets) {
    const at = line.indexOf(s, from);
    if (at < 0) throw new Error(`test error: ${s} is not in ${line}`);
    expected += line.slice(from, at) + '[MASKED]';
    from = at + s.length;
  }
  expected += line.slice(from);
  if (replacement === '[MASKED]') expect(out).toBe(expected);
  expect(m.matches).toBe(secrets.length);
  if (isJson(line)) expect(isJson(out)).toBe(true);
  return out;
}

function isJson(s: string): boolean {
  try {
    JSON.parse(s);
    return true;
  } catch {
    return false;
  }
}

describe('masks read what a JSON reader reads', () => {
  it('a serialized body inside a JSON string (the issue`s spelling)', () => {
    const out = masks('{"msg":"body={\\"password\\":\\"hunter2\\"}"}', ['hunter2']);
    expect(JSON.parse(out)).toEqual({ msg: 'body={"password":"[MASKED]"}' });
  });

  it('password=\\"…\\" inside a JSON string: the whole value, no tail left', () => {
    const out = masks('{"msg":"login password=\\"hunter2\\" ok"}', ['hunter2']);
    expect(JSON.parse(out)).toEqual({ msg: 'login password="[MASKED]" ok' });
    const tail = masks('{"msg":"password=\\"ab\\\\\\"cd\\""}', ['ab\\\\\\"cd']);
    expect(JSON.parse(tail)).toEqual({ msg: 'password="[MASKED]"' });
    expect(tail).not.toContain('cd');
  });

  it('an escaped key: \\u0070assword, pass\\u0077ord, and escapes in the value', () => {
    masks('{"\\u0070assword":"hunter2","n":1}', ['hunter2']);
    masks('{"user":"bob","pass\\u0077ord":"hun\\u0074er2"}', ['hun\\u0074er2']);
    // An escaped quote key in a serialized body, one level down.
    masks('{"msg":"{\\"\\u0070assword\\":\\"hunter2\\"}"}', ['hunter2']);
  });

  it('nested escapes: a body serialized twice and three times', () => {
    const twice = '{"msg":"outer={\\"inner\\":\\"{\\\\\\"password\\\\\\":\\\\\\"hunter2\\\\\\"}\\"}"}';
    const out = masks(twice, ['hunter2']);
    const inner = JSON.parse((JSON.parse(out.slice(0)) as { msg: string }).msg.slice('outer='.length)) as { inner: string };
    expect(JSON.parse(inner.inner)).toEqual({ password: '[MASKED]' });
    const body = JSON.stringify({ password: 'hunter2', user: 'bob' });
    const thrice = JSON.stringify({ log: JSON.stringify({ req: JSON.stringify({ body }) }) });
    masks(thrice, ['hunter2']);
    // An escaped quote in the secret three levels down still ends nothing early.
    const quoted = JSON.stringify({ log: JSON.stringify({ req: 'password="ab\\"cd" next' }) });
    const q = masks(quoted, [JSON.stringify(JSON.stringify('ab\\"cd').slice(1, -1)).slice(1, -1)]);
    expect(JSON.parse(JSON.parse(q).log as string)).toEqual({ req: 'password="[MASKED]" next' });
  });

  it('other rules read the decoded text too: an escaped slash, an escaped letter, a PEM key with \\n', () => {
    masks('{"auth":"Authorization: Bearer abc\\/def.ghi"}', ['abc\\/def.ghi']);
    masks('{"msg":"creds={\\"key\\":\\"\\\\u0041KIAIOSFODNN7EXAMPLE\\"}"}', ['\\\\u0041KIAIOSFODNN7EXAMPLE']);
    masks('{"key":"-----BEGIN RSA PRIVATE KEY-----\\nMIIEow\\nZm9v\\n-----END RSA PRIVATE KEY-----","n":1}', ['\\nMIIEow\\nZm9v\\n']);
  });

  it('a line no rule matches is returned as it was, escapes and all', () => {
    const m = masker();
    for (const line of ['{"path":"a\\/b","q":"say \\"hi\\"","e":"\\u00e9\\ud83d\\ude00"}', 'C:\\dir\\"x" "\\q"', '{"msg":"password reset for \\"bob\\""}']) {
      expect(m.text(line)).toBe(line);
    }
    expect(m.matches).toBe(0);
  });

  it('a replacement JSON cannot hold as it is is written escaped for where it lands', () => {
    const line = '{"msg":"body={\\"password\\":\\"hunter2\\"}","pwd":"x"}';
    const out = masker('<"\\>').text(line);
    expect(JSON.parse(out)).toEqual({ msg: 'body={"password":"<\\"\\\\>"}', pwd: '<"\\>' });
    expect(JSON.parse((JSON.parse(out) as { msg: string }).msg.slice('body='.length))).toEqual({ password: '<"\\>' });
  });
});

describe('case', () => {
  it('names in any case; AWS key ids and PEM headers in upper case only, as the rules say', async () => {
    masks('x PassWord=hunter2 y', ['hunter2']);
    masks('Authorization: BeArEr abc.def', ['abc.def']);
    masks('DB_PWD: hunter2', ['hunter2']);
    const m = masker();
    expect(m.text('akiaiosfodnn7example -----begin rsa private key----- x')).toBe('akiaiosfodnn7example -----begin rsa private key----- x');
    // The same through the one scan of a read for the rules' words.
    const h = harness(shaping({ MASK: 'all' }));
    await h.shaper.push(criRecords(['x PassWord=hunter2 y', 'Authorization: BeArEr abc.def', 'plain']));
    expect(h.messages()).toEqual(['x PassWord=[MASKED] y', 'Authorization: BeArEr [MASKED]', 'plain']);
  });
});

describe('what docs/security.md says no rule catches stays as it is', () => {
  it('prose, a value on the next line, encodings other than JSON`s, a token with no name', () => {
    const m = masker();
    const lines = [
      'the password is hunter2',
      'Password:\nhunter2',
      'login password%3Dhunter2',
      'pass\\x77ord=hunter2',
      'using token ghp_abcdefghijklmnopqrstuvwxyz0123456789',
      'https://ghp_abcdef0123456789@github.com/org/repo',
    ];
    for (const line of lines) expect(m.text(line)).toBe(line);
    expect(m.matches).toBe(0);
  });
});

describe('quoted values end at their unescaped closing quote', () => {
  it('double and single quotes, escaped quotes inside', () => {
    masks('login password="ab\\"cd" user=bob', ['ab\\"cd']);
    masks("login password='ab\\'cd' user=bob", ["ab\\'cd"]);
    masks('DB_PASSWORD="p a\\\\ss" next', ['p a\\\\ss']);
    masks("{'user': 'bob', 'password': 'hunter2'}", ['hunter2']);
  });

  it('a quote never closed: the value runs to the end of the line, the next line untouched', () => {
    masks('password="hunter2 and more', ['hunter2 and more']);
    masks('password="hunter2\nnext line', ['hunter2']);
  });

  it('a JSON member whose value is no string: a number goes as a string, null and booleans stay; the line stays JSON', () => {
    const m = masker();
    expect(m.text('{"password":12345678,"pwd":null,"passwd":true}')).toBe('{"password":"[MASKED]","pwd":null,"passwd":true}');
    expect(m.text('{"msg":"{\\"pin_password\\": 1234}"}')).toBe('{"msg":"{\\"pin_password\\": \\"[MASKED]\\"}"}');
    expect(m.matches).toBe(2);
  });

  it('unquoted values keep their old ends: whitespace, a quote, & , ;', () => {
    masks('a=1&password=hunter2&b=2', ['hunter2']);
    masks('{"cmd":"run --password=hunter2","n":1}', ['hunter2']);
    masks('password=ab\\cd next', ['ab\\cd']);
  });
});

describe('url-userinfo', () => {
  it('the password of scheme://user:password@host goes; user, host and path stay', () => {
    masks('connecting to postgres://app:SECRET@db/x', ['SECRET']);
    masks('DATABASE_URL=mysql://root:p@ss:w0rd@10.0.0.7:3306/app?ssl=1', ['p@ss:w0rd']);
    masks('{"dsn":"postgres:\\/\\/app:S3CR\\u0045T@db:5432\\/x"}', ['S3CR\\u0045T']);
    // Escaped slashes alone: `:\/\/` is the URL rule's word once decoded.
    masks('{"dsn":"postgres:\\/\\/app:SECRET@db\\/x","n":1}', ['SECRET']);
    masks('{"msg":"cfg={\\"url\\":\\"redis://:hunter2@cache:6379/0\\"}"}', ['hunter2']);
    masks('two: amqp://u:pw1@mq/ and https://v:pw2@h/', ['pw1', 'pw2']);
  });

  it('no password, no mask: a user alone, an @ in the path, no scheme', () => {
    const m = masker();
    for (const line of ['ssh://git@github.com/org/repo', 'https://host/a:b@c', 'see user:pw@host', 'http://[::1]:8080/x', 'x://', '://a:b@c']) expect(m.text(line)).toBe(line);
    expect(m.matches).toBe(0);
  });
});

describe('in the shaping stage, at every parse setting and width', () => {
  const line = '{"level":"info","msg":"body={\\"password\\":\\"hunter2\\"}","n":1}';
  const masked = '{"level":"info","msg":"body={\\"password\\":\\"[MASKED]\\"}","n":1}';

  it('parse: none (the default)', async () => {
    const h = harness(shaping({ MASK: 'all' }));
    await h.shaper.push(new Lines().make([line, 'postgres://app:SECRET@db/x']));
    expect(h.messages()).toEqual([masked, 'postgres://app:[MASKED]@db/x']);
    expect(h.stats.masked).toBe(2);
  });

  it('parse: json: the message keeps its escapes, the field reads decoded', async () => {
    const h = harness(shaping({ MASK: 'all', PARSE: 'json' }));
    await h.shaper.push(new Lines().make([line]));
    expect(h.messages()).toEqual([masked]);
    expect(h.out[0]!.fields).toEqual({ level: 'info', msg: 'body={"password":"[MASKED]"}', n: 1 });
    expect(h.stats.masked).toBe(1);
  });

  it('parse: json on a line wider than JSON_MAX_FIELDS', async () => {
    const h = harness(shaping({ MASK: 'all', PARSE: 'json', JSON_MAX_FIELDS: '2' }));
    await h.shaper.push(new Lines().make([line]));
    expect(h.messages()).toEqual([masked]);
    expect(h.out[0]!.fields).toBeUndefined();
    expect(h.stats.jsonTooWide).toBe(1);
    expect(h.stats.masked).toBe(1);
  });
});

/** The lines as the tailer hands them on: CRI records over one read buffer. */
function criRecords(lines: readonly string[]): LogRecord[] {
  const text = lines.map((l, i) => `2024-05-06T07:08:09.${String(i).padStart(9, '0')}Z stdout F ${l}\n`).join('');
  const dec = new CriDecoder(makeMeta('main', 0, '0123456789abcdef'), 0, 1 << 20);
  const out: LogRecord[] = [];
  dec.push(Buffer.from(text), out);
  dec.end(out);
  return out;
}

describe('records as the tailer makes them (one scan of the read for the rules` words)', () => {
  const lines = [
    'INFO plain line, nothing to hide',
    '{"level":"info","msg":"started","n":1}',
    '{"level":"info","msg":"body={\\"password\\":\\"hunter2\\"}"}',
    'INFO db=postgres://app:SECRET@db/x ok',
    '{"path":"a\\/b","user":"\\u0070assword=hunter3"}',
    '-----BEGIN RSA PRIVATE KEY-----',
    'MIIEowIBAAKCAQEAx1',
    'Zm9vYmFy==',
    '-----END RSA PRIVATE KEY-----',
    '{"level":"warn","msg":"done"}',
  ];

  it('a line with no secret goes on exactly as with masks off; the others lose only their secrets; nothing leaves in OTLP', async () => {
    const off = harness(shaping({ PARSE: 'json' }), undefined, otlpValues());
    const on = harness(shaping({ PARSE: 'json', MASK: 'all' }), undefined, otlpValues());
    await off.shaper.push(criRecords(lines));
    await on.shaper.push(criRecords(lines));
    expect(on.messages()).toEqual([
      lines[0],
      lines[1],
      '{"level":"info","msg":"body={\\"password\\":\\"[MASKED]\\"}"}',
      'INFO db=postgres://app:[MASKED]@db/x ok',
      '{"path":"a\\/b","user":"\\u0070assword=[MASKED]"}',
      '-----BEGIN RSA PRIVATE KEY-----',
      '[MASKED]',
      '[MASKED]',
      '-----END RSA PRIVATE KEY-----',
      lines[9],
    ]);
    expect(on.stats.masked).toBe(5);
    for (const i of [0, 1, 5, 8, 9]) {
      expect(on.out[i]!.constructor).toBe(off.out[i]!.constructor);
      expect(on.out[i]!.fields).toEqual(off.out[i]!.fields);
    }
    expect(on.out[2]!.fields).toEqual({ level: 'info', msg: 'body={"password":"[MASKED]"}' });
    const wire = Buffer.from(new OtlpEncoder(testConfig().identity, 'jobharvest', VERSION).request(on.out)).toString('latin1');
    for (const secret of ['hunter2', 'hunter3', 'SECRET', 'MIIEow', 'Zm9vYmFy']) expect(wire).not.toContain(secret);
    expect(wire).toContain('started');
  });
});
