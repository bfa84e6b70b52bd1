// The typed shaping section of the configuration. Kept apart from the stage
// (shape/: multiline, json, mask) so that config.ts can name the types without a
// default sidecar loading any of the shaping code.
import { ENV, JSON_ORIGINAL, type JsonOriginal } from '../src/contract/env.ts';

export const MULTILINE_RULES = ['python', 'java', 'go', 'nodejs'] as const;
export type MultilineRule = (typeof MULTILINE_RULES)[number];

export const MASK_RULES = ['bearer', 'aws-access-key', 'private-key', 'password', 'url-userinfo'] as const;
export type MaskRule = (typeof MASK_RULES)[number];

export interface MultilineSettings {
  readonly rules: readonly MultilineRule[];
  /** RE2 syntax; compiled (and refused if invalid) when the shaping stage is built. */
  readonly start?: string;
  readonly maxLines: number;
  readonly maxBytes: number;
  readonly flushMs: number;
}

export interface JsonSettings {
  readonly maxFields: number;
  readonly maxDepth: number;
  /**
   * OTLP: when a JSON record also carries its line as written
   * (log.record.original, an Opt-In attribute of the semantic conventions).
   * Absent: 'lossy'.
   */
  readonly original?: JsonOriginal;
}

export interface MaskSettings {
  readonly rules: readonly MaskRule[];
  /** RE2 syntax; compiled (and refused if invalid) when the shaping stage is built. */
  readonly patterns: readonly string[];
  readonly replacement: string;
}

export interface ShapingSettings {
  /** Absent: no joining. */
  readonly multiline?: MultilineSettings;
  /** Absent: no JSON parsing. */
  readonly json?: JsonSettings;
  /** Absent: no masking. */
  readonly mask?: MaskSettings;
}

export function shapingOn(s: ShapingSettings | undefined): s is ShapingSettings {
  return s !== undefined && (s.multiline !== undefined || s.json !== undefined || s.mask !== undefined);
}

type Env = Readonly<Record<string, string | undefined>>;

const DEFAULT = (k: ShapingKey): string => (ENV[k] as { default?: string }).default ?? '';
type ShapingKey = 'MULTILINE' | 'MULTILINE_START' | 'MULTILINE_MAX_LINES' | 'MULTILINE_MAX_BYTES' | 'MULTILINE_FLUSH_MS' | 'PARSE' | 'JSON_MAX_FIELDS' | 'JSON_MAX_DEPTH' | 'JSON_ORIGINAL' | 'MASK' | 'MASK_PATTERNS' | 'MASK_REPLACEMENT';

/** The shaping env vars as the sidecar reads them; also what the harvester reads from a verified pod spec. */
export const SHAPING_ENV_NAMES: readonly string[] = (['MULTILINE', 'MULTILINE_START', 'MULTILINE_MAX_LINES', 'MULTILINE_MAX_BYTES', 'MULTILINE_FLUSH_MS', 'PARSE', 'JSON_MAX_FIELDS', 'JSON_MAX_DEPTH', 'JSON_ORIGINAL', 'MASK', 'MASK_PATTERNS', 'MASK_REPLACEMENT'] as const).map((k) => ENV[k].name);

export interface ParsedShaping {
  readonly settings: ShapingSettings;
  readonly problems: string[];
}

/**
 * Reads the shaping section. Problems are collected, not thrown, so that the
 * sidecar reports them with the rest of its configuration and the harvester
 * can keep what parsed (the masks above all).
 */
export function parseShaping(env: Env, maxRecordBytes: number): ParsedShaping {
  const problems: string[] = [];
  const raw = (k: ShapingKey): string => {
    const v = env[ENV[k].name];
    return v !== undefined && v.trim() !== '' ? v.trim() : DEFAULT(k);
  };
  const int = (k: ShapingKey, min: number, max: number): number => {
    const v = raw(k);
    const n = /^\d+$/.test(v) ? Number(v) : NaN;
    if (!Number.isSafeInteger(n) || n < min || n > max) {
      problems.push(`${ENV[k].name} must be an integer from ${min} to ${max}, got '${v}'`);
      return min;
    }
    return n;
  };
  const list = <T extends string>(k: ShapingKey, allowed: readonly T[], extra?: string): T[] => {
    const out: T[] = [];
    for (const part of raw(k).split(',')) {
      const name = part.trim().toLowerCase();
      if (name === '') continue;
      if (name === extra) out.push(...allowed);
      else if ((allowed as readonly string[]).includes(name)) out.push(name as T);
      else problems.push(`${ENV[k].name} has an unknown rule '${name.slice(0, 40)}' (known: ${[...allowed, ...(extra ? [extra] : [])].join(', ')})`);
    }
    return [...new Set(out)];
  };

  const settings: { multiline?: MultilineSettings; json?: JsonSettings; mask?: MaskSettings } = {};
  const rules = list<MultilineRule>('MULTILINE', MULTILINE_RULES);
  const start = env[ENV.MULTILINE_START.name];
  const hasStart = start !== undefined && start.trim() !== '';
  if (rules.length > 0 || hasStart) {
    settings.multiline = {
      rules,
      ...(hasStart ? { start } : {}),
      maxLines: int('MULTILINE_MAX_LINES', 2, 100_000),
      // Never above the record cap: a joined record is still one record.
      maxBytes: Math.min(int('MULTILINE_MAX_BYTES', 1024, 64 * 1024 * 1024), maxRecordBytes),
      flushMs: int('MULTILINE_FLUSH_MS', 10, 600_000),
    };
  }
  const parse = raw('PARSE').toLowerCase();
  if (parse === 'json') {
    const original = raw('JSON_ORIGINAL').toLowerCase();
    if (!(JSON_ORIGINAL as readonly string[]).includes(original)) problems.push(`${ENV.JSON_ORIGINAL.name} must be one of ${JSON_ORIGINAL.join(', ')}, got '${original.slice(0, 40)}'`);
    settings.json = { maxFields: int('JSON_MAX_FIELDS', 1, 10_000), maxDepth: int('JSON_MAX_DEPTH', 1, 64), original: original === 'always' ? 'always' : 'lossy' };
  }
  else if (parse !== 'none') problems.push(`${ENV.PARSE.name} must be one of none, json, got '${parse.slice(0, 40)}'`);

  const maskRules = list<MaskRule>('MASK', MASK_RULES, 'all');
  const patterns: string[] = [];
  const patternText = env[ENV.MASK_PATTERNS.name]?.trim();
  if (patternText) {
    let value: unknown;
    try {
      value = JSON.parse(patternText);
    } catch {
      value = undefined;
    }
    if (!Array.isArray(value) || !value.every((p) => typeof p === 'string' && p !== '')) problems.push(`${ENV.MASK_PATTERNS.name} must be a JSON array of non-empty RE2 pattern strings`);
    else patterns.push(...(value as string[]));
  }
  if (maskRules.length > 0 || patterns.length > 0) settings.mask = { rules: maskRules, patterns, replacement: env[ENV.MASK_REPLACEMENT.name] ?? DEFAULT('MASK_REPLACEMENT') };
  return { settings, problems };
}
