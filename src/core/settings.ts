import type { SinkType } from '../contract/env.ts';
import type { MultilineRule, ParseFormat } from '../contract/shaping-settings.ts';
import { redactUrls } from '../contract/redact.ts';
import { ANNOTATIONS, parse, type ModeSetting, type ParseResult } from './annotations.ts';
import type { Config } from './config.ts';
import type { Tenant } from './tenants.ts';

/** The per-Job settings, after precedence: global < tenant mapping < namespace < Job < pod template. */
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
  /** VictoriaLogs tenant (AccountID, ProjectID headers); set only by a tenant mapping. */
  accountID: number | undefined;
  projectID: number | undefined;
  /** The name of the tenant mapping applied (src/core/tenants.ts), if any. */
  tenant: string | undefined;
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
    accountID: undefined,
    projectID: undefined,
    tenant: undefined,
    multiline: [...new Set(cfg.sidecar.multiline.rules)],
    multilineStart: cfg.sidecar.multiline.start?.trim(),
    parse: cfg.sidecar.parse.format,
  };
}

function show(v: unknown): string {
  if (Array.isArray(v)) return v.length ? v.join(',') : 'none';
  return v === undefined ? 'unset' : String(v);
}

/** What a tenant mapping sets, over the global configuration. */
export const TENANT_FIELDS = ['authSecret', 'tlsSecret', 'lokiTenant', 'esIndex', 'accountID', 'projectID'] as const;
/**
 * The tenant ids a Job or pod template may not change where a mapping sets
 * them: which tenant a record goes to is the operator's choice. The Secrets
 * stay a Job's to name, as they are always its own namespace's.
 */
export const TENANT_LOCKED: ReadonlySet<keyof Settings> = new Set(['lokiTenant', 'esIndex']);

/**
 * Applies the tenant mapping of the Job's namespace, if any, then the
 * annotation levels over the global settings, lowest first. An invalid value
 * never wins and never blocks: it becomes a warning, and the value from the
 * level below stays; so does a Job's or pod template's tenant id where the
 * mapping sets one.
 */
export function resolveSettings(cfg: Config, levels: AnnotationLevel[], tenant?: Tenant): { settings: Settings; warnings: string[] } {
  const settings = globalSettings(cfg);
  const warnings: string[] = [];
  const locked = new Set<keyof Settings>();
  if (tenant) {
    settings.tenant = tenant.name;
    for (const k of TENANT_FIELDS) {
      if (tenant[k] === undefined) continue;
      (settings as unknown as Record<string, unknown>)[k] = tenant[k];
      if (TENANT_LOCKED.has(k)) locked.add(k);
    }
  }
  for (const { level, annotations } of levels) {
    if (!annotations) continue;
    for (const f of FIELDS) {
      const raw = annotations[f.annotation];
      if (raw === undefined) continue;
      if (level !== 'namespace' && locked.has(f.key)) {
        warnings.push(
          `${level} annotation ${f.annotation}=${JSON.stringify(truncate(redactUrls(raw), 64))} ignored: the namespace's log-store tenant is the operator's (tenant mapping ${tenant!.name}); using ${show(settings[f.key])}`,
        );
        continue;
      }
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
