import type { SinkType } from '../contract/env.ts';
import type { MultilineRule, ParseFormat } from '../contract/shaping-settings.ts';
import { redactUrls } from '../contract/redact.ts';
import { ANNOTATIONS, parse, type ModeSetting, type ParseResult } from './annotations.ts';
import type { Config } from './config.ts';

/** The per-Job settings, after precedence: global < namespace < Job < pod template. */
export interface Settings {
  mode: ModeSetting;
  sink: SinkType;
  endpoint: string | undefined;
  ttlSecondsAfterFinished: number;
  drainSeconds: number;
  authSecret: string | undefined;
  tlsSecret: string | undefined;
  esIndex: string | undefined;
  otlpEncoding: 'protobuf' | 'json' | undefined;
  lokiTenant: string | undefined;
  forwardTag: string | undefined;
  /** Built-in multiline rules; empty: none. */
  multiline: MultilineRule[];
  multilineStart: string | undefined;
  parse: ParseFormat | undefined;
}

export type Level = 'namespace' | 'Job' | 'pod template';

export interface AnnotationLevel {
  level: Level;
  annotations: Record<string, string> | undefined;
}

type Field = {
  [K in keyof Settings]: { key: K; annotation: string; parse: (v: string) => ParseResult<NonNullable<Settings[K]>> };
}[keyof Settings];

// The order here is the order warnings come out in, so keep it stable.
const FIELDS: Field[] = [
  { key: 'mode', annotation: ANNOTATIONS.mode, parse: parse.mode },
  { key: 'sink', annotation: ANNOTATIONS.sink, parse: parse.sink },
  { key: 'endpoint', annotation: ANNOTATIONS.endpoint, parse: parse.endpoint },
  { key: 'ttlSecondsAfterFinished', annotation: ANNOTATIONS.ttlSecondsAfterFinished, parse: parse.seconds(0, 2_147_483_647) },
  { key: 'drainSeconds', annotation: ANNOTATIONS.drainSeconds, parse: parse.seconds(1, 3600) },
  { key: 'authSecret', annotation: ANNOTATIONS.authSecret, parse: parse.secretName },
  { key: 'tlsSecret', annotation: ANNOTATIONS.tlsSecret, parse: parse.secretName },
  { key: 'esIndex', annotation: ANNOTATIONS.esIndex, parse: parse.esIndex },
  { key: 'otlpEncoding', annotation: ANNOTATIONS.otlpEncoding, parse: parse.otlpEncoding },
  { key: 'lokiTenant', annotation: ANNOTATIONS.lokiTenant, parse: parse.lokiTenant },
  { key: 'forwardTag', annotation: ANNOTATIONS.forwardTag, parse: parse.forwardTag },
  { key: 'multiline', annotation: ANNOTATIONS.multiline, parse: parse.multiline },
  { key: 'multilineStart', annotation: ANNOTATIONS.multilineStart, parse: parse.pattern },
  { key: 'parse', annotation: ANNOTATIONS.parse, parse: parse.parseFormat },
];

export function globalSettings(cfg: Config): Settings {
  return {
    mode: cfg.mode,
    sink: cfg.sink.type,
    endpoint: cfg.sink.endpoint,
    ttlSecondsAfterFinished: cfg.ttlSecondsAfterFinished,
    drainSeconds: cfg.drainSeconds,
    authSecret: cfg.sink.authSecret,
    tlsSecret: cfg.sink.tlsSecret,
    esIndex: cfg.sink.esIndex,
    otlpEncoding: cfg.sink.otlpEncoding,
    lokiTenant: cfg.sink.lokiTenant,
    forwardTag: cfg.sink.forwardTag,
    multiline: [...new Set(cfg.sidecar.multiline.rules)],
    multilineStart: cfg.sidecar.multiline.start?.trim(),
    parse: cfg.sidecar.parse.format,
  };
}

function show(v: unknown): string {
  if (Array.isArray(v)) return v.length ? v.join(',') : 'none';
  return v === undefined ? 'unset' : String(v);
}

/**
 * Applies the annotation levels over the global settings, lowest first. An
 * invalid value never wins and never blocks: it becomes a warning, and the value
 * from the level below stays.
 */
export function resolveSettings(cfg: Config, levels: AnnotationLevel[]): { settings: Settings; warnings: string[] } {
  const settings = globalSettings(cfg);
  const warnings: string[] = [];
  for (const { level, annotations } of levels) {
    if (!annotations) continue;
    for (const f of FIELDS) {
      const raw = annotations[f.annotation];
      if (raw === undefined) continue;
      const r = f.parse(raw);
      if (r.ok) {
        (settings as unknown as Record<string, unknown>)[f.key] = r.value;
        // `multiline: none` means no joining at all, so it also drops a start pattern from a level below.
        if (f.key === 'multiline' && settings.multiline.length === 0) settings.multilineStart = undefined;
      } else {
        warnings.push(
          `${level} annotation ${f.annotation}=${JSON.stringify(truncate(redactUrls(raw), 64))} ignored: ${r.why}; using ${show(settings[f.key])}`,
        );
      }
    }
  }
  const max = cfg.maxTtlSecondsAfterFinished;
  if (max !== null && settings.ttlSecondsAfterFinished > max) {
    warnings.push(`ttlSecondsAfterFinished ${settings.ttlSecondsAfterFinished} capped to the configured maximum ${max}`);
    settings.ttlSecondsAfterFinished = max;
  }
  return { settings, warnings };
}


function truncate(s: string, n: number): string {
  return s.length > n ? `${s.slice(0, n)}…` : s;
}
