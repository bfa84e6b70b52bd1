// A start pattern made only of literals, groups and alternation is matched by
// comparing the line's first bytes (shape/multiline.ts literalPrefixes); it
// must say exactly what RE2 says, on a parsed line's bytes and on a string.
import { RE2JS } from 're2js';
import { describe, expect, it } from 'vitest';
import { customRule, literalPrefixes } from '../shape/multiline-rules.ts';
import { CriRecord, type LogRecord } from '../records/record.ts';
import { makeMeta } from '../../test/support/sidecar-helpers.ts';

const FILE = makeMeta();
const TS = '2025-06-01T00:00:00.000000001Z';

/** The line as the node-mode parser would make it, with bytes after it in the chunk that must not count. */
function parsed(line: Buffer): CriRecord {
  const src = Buffer.concat([Buffer.from(`${TS} stdout F `), line, Buffer.from('INFO {\n')]);
  const msgAt = TS.length + 10;
  return CriRecord.of(FILE, 0, 'stdout', src, 0, TS.length, msgAt, msgAt + line.length, msgAt + line.length + 1, 100, 0);
}

function asText(message: string): LogRecord {
  return { file: FILE, offset: 0, ts: TS, stream: 'stdout', message, size: 1, safe: 1, flags: 0 };
}

describe('literal start patterns', () => {
  it('expands to the prefixes a pattern stands for, and leaves everything else to RE2', () => {
    expect(literalPrefixes('^(?:\\{|(?:DEBUG|INFO|WARN|ERROR) |Traceback \\(most recent call last\\):|Exception in thread )')).toEqual([
      '{',
      'DEBUG ',
      'INFO ',
      'WARN ',
      'ERROR ',
      'Traceback (most recent call last):',
      'Exception in thread ',
    ]);
    expect(literalPrefixes('^(a|b)(c|d)')).toEqual(['ac', 'ad', 'bc', 'bd']);
    expect(literalPrefixes('^')).toEqual(['']);
    expect(literalPrefixes('^(?:x|)y')).toEqual(['xy', 'y']);
    expect(literalPrefixes('^日本 ')).toEqual(['日本 ']);
    for (const other of ['INFO', '^a|b', '^\\d', '^[A-Z]', '^a*', '^a+', '^a?', '^a{2}', '^.', '^(?i)info', '^(?P<x>a)', '^a$', '^\\Qa\\E', '^(a', '^a)', '^(?:a|b)+', '^\uFFFD', '^\\pL', '^\\x41']) {
      expect(literalPrefixes(other), other).toBeUndefined();
    }
    const many = '^' + '(?:a|b|c|d)'.repeat(4);
    expect(literalPrefixes(many)).toBeUndefined();
  });

  it('matches exactly what RE2 matches, on bytes and on text', () => {
    const patterns = [
      '^(?:\\{|(?:DEBUG|INFO|WARN|ERROR) |Traceback \\(most recent call last\\):|Exception in thread )',
      '^(INFO|WARN)',
      '^\\[',
      '^\\{"level":',
      '^(?:x|)y',
      '^',
      '^日本',
      '^é',
      '^a\\.b\\(c\\)',
      '^-- ',
    ];
    const lines = [
      '', '{', '{"level":"info"}', 'INFO x', 'INFO', 'INF', 'WARN', 'WARNING', 'ERROR  boom', 'DEBUG', 'Traceback (most recent call last):', 'Traceback (most recent',
      'Exception in thread "main"', '  at x', '\tat y', '[2025] x', 'y', 'xy', 'xxy', '日本語', '日', 'é', 'e\u0301', 'a.b(c)', 'a.b(c', 'aXb(c)', '-- a', '--', ' INFO',
    ];
    let checked = 0;
    for (const p of patterns) {
      const literals = literalPrefixes(p);
      expect(literals, p).toBeDefined();
      const re = RE2JS.compile(p);
      const rule = customRule(p);
      expect(rule.startsEvent, p).toBeDefined();
      for (const l of lines) {
        const want = re.test(l);
        expect(rule.startsEvent!(parsed(Buffer.from(l, 'utf8'))), `${p} on bytes of ${JSON.stringify(l)}`).toBe(want);
        expect(rule.startsEvent!(asText(l)), `${p} on text ${JSON.stringify(l)}`).toBe(want);
        checked++;
      }
    }
    expect(checked).toBe(patterns.length * lines.length);
  });

  it('a line with invalid UTF-8 matches as its decoded text does', () => {
    const rule = customRule('^(?:INFO|WARN) ');
    const re = RE2JS.compile('^(?:INFO|WARN) ');
    for (const bytes of [Buffer.from([0x49, 0x4e, 0x46, 0x4f, 0x20, 0xff]), Buffer.from([0xff, 0x49, 0x4e, 0x46, 0x4f, 0x20]), Buffer.from([0x57, 0x41, 0x52, 0x4e, 0xc3])]) {
      const r = parsed(bytes);
      expect(rule.startsEvent!(r)).toBe(re.test(r.message));
    }
  });

  it('a pattern RE2 must match is left to RE2', () => {
    expect(customRule('^\\d{4}-').startsEvent).toBeUndefined();
    expect(customRule('^(?i)info').startsEvent).toBeUndefined();
  });
});
