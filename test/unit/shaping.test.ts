import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { webhookOptions } from '../../src/cli/webhook-flags.ts';
import { ENV } from '../../src/contract/env.ts';
import { MAX_PATTERN_BYTES, MAX_PATTERN_PROGRAM, MAX_START_PROGRAM, patternProblem, startPatternProblem } from '../../src/contract/shaping-settings.ts';
import { sidecarDigest } from '../../src/contract/signature.ts';
import { carriedKeyProblem, carriedMetadata, MAX_CARRIED_TOTAL_BYTES, MAX_CARRIED_VALUE_BYTES } from '../../src/core/carry.ts';
import { decide } from '../../src/core/decide.ts';
import { ERROR_CODES } from '../../src/core/errors.ts';
import { mutateJob } from '../../src/core/mutate.ts';
import { parseConfig } from '../../src/core/config.ts';
import { durableConfig, job, optedIn } from '../support/fixtures.ts';

type Env = Array<{ name: string; value?: string }>;

function sidecarEnv(j: Record<string, any>, config = durableConfig(), ns = optedIn('team-a')): { env: Record<string, string>; warnings: string[]; sidecar: Record<string, unknown> } {
  const r = mutateJob(j, { config, namespace: ns });
  const sidecar = r.job.spec!.template!.spec!.initContainers!.find((c) => c.name === 'jobharvest')!;
  const env: Record<string, string> = {};
  for (const e of sidecar.env as Env) if (e.value !== undefined) env[e.name] = e.value;
  return { env, warnings: r.warnings, sidecar };
}

const SHAPING = [
  ENV.MULTILINE, ENV.MULTILINE_START, ENV.MULTILINE_MAX_LINES, ENV.MULTILINE_MAX_BYTES, ENV.MULTILINE_FLUSH_MS,
  ENV.PARSE, ENV.JSON_MAX_FIELDS, ENV.JSON_MAX_DEPTH, ENV.JSON_ORIGINAL, ENV.MASK, ENV.MASK_PATTERNS, ENV.MASK_REPLACEMENT,
  ENV.JOB_LABELS, ENV.JOB_ANNOTATIONS, ENV.LOKI_STREAM_LABELS, ENV.LOKI_MAX_METADATA,
].map((v): string => v.name);

describe('record-shaping settings', () => {
  it('leave the sidecar without any shaping variable when nothing is configured', () => {
    const { env } = sidecarEnv(job());
    expect(Object.keys(env).filter((n) => SHAPING.includes(n))).toEqual([]);
  });

  it('take multiline and parse defaults from the config, overridden by namespace, then Job annotations', () => {
    const config = durableConfig({ sidecar: { multiline: { rules: ['java'], maxLines: 200, flushMs: 500 }, parse: { format: 'json', maxFields: 32 } } });
    expect(sidecarEnv(job(), config).env).toMatchObject({
      JOBHARVEST_MULTILINE: 'java',
      JOBHARVEST_MULTILINE_MAX_LINES: '200',
      JOBHARVEST_MULTILINE_FLUSH_MS: '500',
      JOBHARVEST_PARSE: 'json',
      JOBHARVEST_JSON_MAX_FIELDS: '32',
    });
    const ns = optedIn('team-a', { annotations: { 'jobharvest.io/multiline': 'python, go,python' } });
    const j = job();
    j.metadata.annotations = { 'jobharvest.io/parse': 'none', 'jobharvest.io/multiline-start': '^\\d{4}-\\d{2}-\\d{2} ' };
    const { env } = sidecarEnv(j, config, ns);
    expect(env.JOBHARVEST_MULTILINE).toBe('python,go');
    // Trimmed, as the sidecar trims its environment: a space that matters is written [ ].
    expect(env.JOBHARVEST_MULTILINE_START).toBe('^\\d{4}-\\d{2}-\\d{2}');
    // parse none: the JSON bounds go with it.
    expect(env.JOBHARVEST_PARSE).toBeUndefined();
    expect(env.JOBHARVEST_JSON_MAX_FIELDS).toBeUndefined();
  });

  it('multiline: none turns joining off, a start pattern of a lower level included', () => {
    const ns = optedIn('team-a', { annotations: { 'jobharvest.io/multiline': 'java', 'jobharvest.io/multiline-start': '^\\S' } });
    const j = job();
    j.metadata.annotations = { 'jobharvest.io/multiline': 'none' };
    const { env } = sidecarEnv(j, durableConfig({ sidecar: { multiline: { maxLines: 10 } } }), ns);
    expect(env.JOBHARVEST_MULTILINE).toBeUndefined();
    expect(env.JOBHARVEST_MULTILINE_START).toBeUndefined();
    expect(env.JOBHARVEST_MULTILINE_MAX_LINES).toBeUndefined();
  });

  it('ignores an unknown rule, a bad or oversized pattern and an unknown format with a warning, keeping the level below', () => {
    const ns = optedIn('team-a', { annotations: { 'jobharvest.io/multiline': 'go', 'jobharvest.io/multiline-start': '^\\[' } });
    const j = job();
    j.metadata.annotations = {
      'jobharvest.io/multiline': 'python,cobol',
      'jobharvest.io/multiline-start': '^(unclosed',
      'jobharvest.io/parse': 'xml',
    };
    j.spec.template.metadata = { annotations: { 'jobharvest.io/multiline-start': `^${'a'.repeat(MAX_PATTERN_BYTES)}` } };
    const d = decide(j, { config: durableConfig(), namespace: ns });
    expect(d.action).toBe('inject');
    if (d.action !== 'inject') return;
    expect(d.settings.multiline).toEqual(['go']);
    expect(d.settings.multilineStart).toBe('^\\[');
    expect(d.settings.parse).toBeUndefined();
    expect(d.warnings).toEqual([
      'Job annotation jobharvest.io/multiline="python,cobol" ignored: unknown rule "cobol"; expected a list of python, java, go, nodejs, or none; using go',
      'Job annotation jobharvest.io/multiline-start="^(unclosed" ignored: not an RE2 pattern: missing closing ): `^(unclosed`; using ^\\[',
      'Job annotation jobharvest.io/parse="xml" ignored: expected json or none; using unset',
      expect.stringMatching(/^pod template annotation jobharvest\.io\/multiline-start=".*" ignored: longer than 1024 bytes \(1025\); using \^\\\[$/),
    ]);
  });

  it('refuses patterns RE2 cannot run in linear time or that compile too large', () => {
    expect(patternProblem('(a+)+$')).toBeUndefined();
    expect(patternProblem('(?<=x)y')).toMatch(/^not an RE2 pattern/);
    expect(patternProblem('(a)\\1')).toMatch(/^not an RE2 pattern/);
    expect(patternProblem('.{1000}.{1000}.{1000}.{1000}.{1000}')).toMatch(/instructions, more than/);
    expect(patternProblem('a\nb')).toMatch(/control characters/);
    expect(patternProblem('')).toBe('empty');
  });

  it('a start pattern, a tenant\'s, compiles to at most 320 instructions; an operator\'s mask to 4096', () => {
    expect([MAX_START_PROGRAM, MAX_PATTERN_PROGRAM]).toEqual([320, 4096]);
    const hostile = '[a-z]{1,1000}[a-z]{1,1000}b';
    expect(patternProblem(hostile)).toBeUndefined();
    expect(startPatternProblem(hostile)).toBe('compiles to 4001 instructions, more than 320 (lower the repeat counts)');
    // The verdicts are remembered per cap: the mask's answer does not stand for the start pattern's.
    expect(patternProblem(hostile)).toBeUndefined();
    // The four built-in rules written as one RE2 alternation, after a timestamp and level: 307 instructions.
    const realistic = String.raw`(?:^\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]?\s+(?:TRACE|DEBUG|INFO|WARN(?:ING)?|ERROR|FATAL)\b)|(?:^(?:Traceback \(most recent call last\):|  \+ Exception Group Traceback \(most recent call last\):))|(?:^(?:Exception in thread "|[^\s:]*\.[^\s:]*(?:Exception|Error|Throwable)(?::|$)))|(?:^(?:panic: |fatal error: |goroutine \d+ \[))|(?:^(?:(?:Uncaught )?[A-Z]?[A-Za-z]*Error(?: \[[A-Z0-9_]+\])?(?::|$)|\S+\.(?:m|c)?[jt]s:\d+$))`;
    expect(startPatternProblem(realistic)).toBeUndefined();
    const j = job();
    j.metadata.annotations = { 'jobharvest.io/multiline-start': hostile };
    const { env, warnings } = sidecarEnv(j);
    expect(env[ENV.MULTILINE_START.name]).toBeUndefined();
    expect(warnings).toContainEqual(expect.stringMatching(/^Job annotation jobharvest\.io\/multiline-start="\[a-z\]\{1,1000\}\[a-z\]\{1,1000\}b" ignored: compiles to 4001 instructions, more than 320/));
  });

  it('bounds, masks and carried keys come from the config only, never from annotations', () => {
    const config = durableConfig({
      sidecar: {
        multiline: { maxLines: 100, maxBytes: 65536 },
        parse: { maxFields: 16, maxDepth: 2 },
        mask: { builtin: ['bearer', 'password'], patterns: ['sk_live_[0-9a-zA-Z]{24}'], replacement: '***' },
      },
    });
    const j = job();
    j.metadata.annotations = {
      'jobharvest.io/multiline': 'java',
      'jobharvest.io/parse': 'json',
      'jobharvest.io/multiline-max-lines': '100000',
      'jobharvest.io/mask': 'none',
      'jobharvest.io/mask-patterns': '["x"]',
    };
    const { env } = sidecarEnv(j, config);
    expect(env).toMatchObject({
      JOBHARVEST_MULTILINE_MAX_LINES: '100',
      JOBHARVEST_MULTILINE_MAX_BYTES: '65536',
      JOBHARVEST_JSON_MAX_FIELDS: '16',
      JOBHARVEST_JSON_MAX_DEPTH: '2',
      JOBHARVEST_MASK: 'bearer,password',
      JOBHARVEST_MASK_PATTERNS: '["sk_live_[0-9a-zA-Z]{24}"]',
      JOBHARVEST_MASK_REPLACEMENT: '***',
    });
  });

  it('sets JOBHARVEST_JSON_ORIGINAL for an otlp sink that parses JSON only, from the config only', () => {
    const config = durableConfig({ sidecar: { parse: { format: 'json', original: 'always' } } });
    expect(sidecarEnv(job(), config).env.JOBHARVEST_JSON_ORIGINAL).toBeUndefined();
    const j = job();
    j.metadata.annotations = { 'jobharvest.io/sink': 'otlp', 'jobharvest.io/endpoint': 'http://collector.observability:4318' };
    expect(sidecarEnv(j, config).env).toMatchObject({ JOBHARVEST_PARSE: 'json', JOBHARVEST_JSON_ORIGINAL: 'always' });
    // Unset: the sidecar's default (lossy), and no variable.
    expect(sidecarEnv(j, durableConfig({ sidecar: { parse: { format: 'json' } } })).env.JOBHARVEST_JSON_ORIGINAL).toBeUndefined();
    // No parsing, no setting of it.
    j.metadata.annotations['jobharvest.io/parse'] = 'none';
    expect(sidecarEnv(j, config).env.JOBHARVEST_JSON_ORIGINAL).toBeUndefined();
  });

  it('sets the Loki variables for a loki sink only', () => {
    const config = durableConfig({ sidecar: { carry: { labels: ['team'] }, loki: { streamLabels: ['team'], maxMetadata: 8 } } });
    expect(sidecarEnv(job(), config).env.JOBHARVEST_LOKI_STREAM_LABELS).toBeUndefined();
    const j = job();
    j.metadata.annotations = { 'jobharvest.io/sink': 'loki' };
    expect(sidecarEnv(j, config).env).toMatchObject({ JOBHARVEST_LOKI_STREAM_LABELS: 'team', JOBHARVEST_LOKI_MAX_METADATA: '8' });
  });
});

describe('the configuration of record shaping', () => {
  const bad = (sidecar: Record<string, unknown>) => {
    try {
      parseConfig({ sidecar });
    } catch (e) {
      expect((e as { code?: string }).code).toBe(ERROR_CODES.BAD_CONFIG);
      return (e as Error).message;
    }
    return 'accepted';
  };

  it('fails start-up on a mask or start pattern RE2 refuses, naming the value', () => {
    expect(bad({ mask: { patterns: ['ok', '(?=lookahead)'] } })).toMatch(/sidecar\.mask\.patterns\[1\]: not an RE2 pattern/);
    expect(bad({ multiline: { start: '[' } })).toMatch(/sidecar\.multiline\.start: not an RE2 pattern/);
  });

  it('stops the webhook before it listens when the config file holds a bad mask pattern', () => {
    const file = join(mkdtempSync(join(tmpdir(), 'jh-shaping-')), 'config.yaml');
    writeFileSync(file, "sidecar:\n  mask:\n    patterns: ['password=(?!x)']\n");
    const start = () => webhookOptions({ config: file, host: '127.0.0.1', port: '0', serviceName: 'jh', logReaderClusterrole: 'r', apiRbac: true });
    expect(start).toThrow(/^invalid configuration: sidecar\.mask\.patterns\[0\]: not an RE2 pattern: lookahead and lookbehind are not supported/);
  });

  it('refuses unknown rules, masks and formats, bounds out of range, and stream labels that are not carried', () => {
    expect(bad({ multiline: { rules: ['ruby'] } })).toMatch(/sidecar\.multiline\.rules\.0/);
    expect(bad({ mask: { builtin: ['ssn'] } })).toMatch(/sidecar\.mask\.builtin\.0/);
    expect(bad({ parse: { format: 'logfmt' } })).toMatch(/sidecar\.parse\.format/);
    expect(bad({ parse: { original: 'never' } })).toMatch(/sidecar\.parse\.original/);
    expect(bad({ multiline: { maxBytes: 1_000_000 } })).toMatch(/sidecar\.multiline\.maxBytes/);
    expect(bad({ loki: { streamLabels: ['team'] } })).toMatch(/sidecar\.loki\.streamLabels\[0\]: "team" is not in sidecar\.carry\.labels/);
  });

  it('never carries jobharvest.io keys, nor anything that is not a label or annotation key', () => {
    expect(bad({ carry: { annotations: ['jobharvest.io/endpoint'] } })).toMatch(/jobharvest's own key/);
    expect(bad({ carry: { labels: ['x.jobharvest.io/a'] } })).toMatch(/jobharvest's own key/);
    expect(carriedKeyProblem('app.kubernetes.io/name')).toBeUndefined();
    expect(carriedKeyProblem('team')).toBeUndefined();
    expect(carriedKeyProblem('bad key')).toMatch(/not a label or annotation key/);
    expect(carriedKeyProblem('Upper.Case/x')).toMatch(/bad prefix/);
  });
});

describe('carried labels and annotations', () => {
  const keys = { labels: ['team', 'app.kubernetes.io/name', 'absent'], annotations: ['owner', 'jobharvest.io/endpoint'] };

  it('takes the Job\'s labels, falling back to the pod template, and only the named annotations that are present', () => {
    const j = job();
    j.metadata.labels = { team: 'data', other: 'x' };
    j.metadata.annotations = { owner: 'alice@example.com', secret: 'no', 'jobharvest.io/endpoint': 'http://x' };
    j.spec.template.metadata = { labels: { team: 'ignored', 'app.kubernetes.io/name': 'etl' } };
    const c = carriedMetadata(j, keys);
    expect(c.labels).toBe('{"team":"data","app.kubernetes.io/name":"etl"}');
    expect(c.annotations).toBe('{"owner":"alice@example.com"}');
    expect(c.warnings).toEqual([]);
  });

  it('sets nothing when no named key is present', () => {
    expect(carriedMetadata(job(), keys)).toEqual({ labels: undefined, annotations: undefined, warnings: [] });
  });

  it('cuts a long value at a character boundary and warns', () => {
    const j = job();
    j.metadata.annotations = { owner: 'é'.repeat(1000) };
    const c = carriedMetadata(j, keys);
    const value = JSON.parse(c.annotations!).owner as string;
    expect(Buffer.byteLength(value)).toBeLessThanOrEqual(MAX_CARRIED_VALUE_BYTES);
    expect(value.endsWith('…')).toBe(true);
    expect(value.startsWith('éé')).toBe(true);
    expect(c.warnings).toEqual(['carried values are cut to 1024 bytes: annotation owner (2000 bytes)']);
  });

  it('keeps both variables together under the total, leaving out the keys that do not fit', () => {
    const names = Array.from({ length: 12 }, (_, i) => `a${i}`);
    const j = job();
    j.metadata.labels = { team: 'data' };
    j.metadata.annotations = Object.fromEntries(names.map((n) => [n, 'x'.repeat(1000)]));
    const c = carriedMetadata(j, { labels: ['team'], annotations: names });
    expect(Buffer.byteLength(c.labels!) + Buffer.byteLength(c.annotations!)).toBeLessThanOrEqual(MAX_CARRIED_TOTAL_BYTES);
    expect(Object.keys(JSON.parse(c.annotations!))).toEqual(names.slice(0, 8));
    expect(c.warnings).toEqual([`carried labels and annotations are limited to 8192 bytes in all; left out: ${names.slice(8).map((n) => `annotation ${n}`).join(', ')}`]);
  });

  it('reach the sidecar as JSON that the injection signature covers, without touching the shared sidecar', () => {
    const config = durableConfig({ sidecar: { carry: { labels: ['team'], annotations: ['owner'] } } });
    const a = job('a');
    a.metadata.labels = { team: 'data' };
    a.metadata.annotations = { owner: 'alice' };
    const b = job('b');
    b.metadata.labels = { team: 'web' };
    const ea = sidecarEnv(a, config);
    const eb = sidecarEnv(b, config);
    expect(ea.env).toMatchObject({ JOBHARVEST_JOB_LABELS: '{"team":"data"}', JOBHARVEST_JOB_ANNOTATIONS: '{"owner":"alice"}' });
    expect(eb.env.JOBHARVEST_JOB_LABELS).toBe('{"team":"web"}');
    expect(eb.env.JOBHARVEST_JOB_ANNOTATIONS).toBeUndefined();
    // The digest reads a pod spec: the sidecar is its init container named jobharvest.
    const digest = (sidecar: Record<string, unknown>) => sidecarDigest({ initContainers: [sidecar] });
    expect(digest(ea.sidecar)).not.toBe('');
    expect(digest(ea.sidecar)).not.toBe(digest(eb.sidecar));
    // A Job with nothing to carry gets the sidecar every such Job shares.
    const plain = sidecarEnv(job('c'), config);
    expect(Object.keys(plain.env)).not.toContain('JOBHARVEST_JOB_LABELS');
  });
});
