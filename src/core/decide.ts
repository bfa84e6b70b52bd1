import { NAMES, type SourceMode } from '../contract/env.ts';
import { ANNOTATIONS, INJECT_LABEL, PSA_ENFORCE_LABEL, parse } from './annotations.ts';
import { excludedNamespaces, type Config } from './config.ts';
import { isJob, type Job, type NamespaceMeta } from './kube.ts';
import { resolveSettings, type Settings } from './settings.ts';
import { supportsNativeSidecars, type ServerVersion } from './server-version.ts';

export interface DecideContext {
  config: Config;
  /** The Job's namespace as the cache knows it; undefined when it could not be read. */
  namespace: NamespaceMeta | undefined;
  /** The API server's version; undefined when unknown (then native sidecars are assumed). */
  serverVersion?: ServerVersion | undefined;
  /** The offline CLI injects as if the namespace had opted in. */
  assumeOptedIn?: boolean;
}

/**
 * Why a Job was admitted without the sidecar. Logs, the skipped-jobs metric and
 * `explain` use these strings, so dashboards keep working across releases:
 * never rename one, only add.
 */
export const SKIP_REASONS = {
  NOT_A_JOB: 'not-a-job',
  NOT_CREATE: 'not-create',
  NAMESPACE_EXCLUDED: 'namespace-excluded',
  NAMESPACE_NOT_OPTED_IN: 'namespace-not-opted-in',
  OPTED_OUT_JOB: 'opted-out-job',
  OPTED_OUT_TEMPLATE: 'opted-out-template',
  ALREADY_INJECTED: 'already-injected',
  NAME_CONFLICT: 'name-conflict',
  UNSUPPORTED_SERVER_VERSION: 'unsupported-server-version',
  SINK_UNCONFIGURED: 'sink-unconfigured',
  NAMESPACE_UNKNOWN: 'namespace-unknown',
} as const;
export type SkipReason = (typeof SKIP_REASONS)[keyof typeof SKIP_REASONS];

export type Decision =
  | { action: 'inject'; reason: 'opted-in'; settings: Settings; mode: SourceMode; warnings: string[] }
  | { action: 'skip'; reason: SkipReason; detail: string; warnings: string[] };

function skip(reason: SkipReason, detail: string, warnings: string[] = []): Decision {
  return { action: 'skip', reason, detail, warnings };
}

/**
 * Whether to inject, and with which settings. Pure: everything it needs comes in
 * as arguments, so the webhook, the CLI and the tests all get the same answer.
 */
export function decide(job: unknown, ctx: DecideContext): Decision {
  if (!isJob(job)) return skip(SKIP_REASONS.NOT_A_JOB, 'not a batch/v1 Job');
  const warnings: string[] = [];
  const meta = job.metadata ?? {};
  const nsName = meta.namespace ?? ctx.namespace?.name;

  if (nsName !== undefined && excludedNamespaces(ctx.config).has(nsName)) {
    return skip(SKIP_REASONS.NAMESPACE_EXCLUDED, `namespace ${nsName} is excluded`);
  }

  if (!ctx.assumeOptedIn) {
    const ns = ctx.namespace;
    if (!ns) {
      return skip(SKIP_REASONS.NAMESPACE_UNKNOWN, `namespace ${nsName ?? '(none)'} could not be read`, [
        `namespace ${nsName ?? '(none)'} could not be read in time; Job admitted without the log sidecar`,
      ]);
    }
    const optIn = namespaceOptIn(ns, ctx.config, warnings);
    if (!optIn.optedIn) return skip(SKIP_REASONS.NAMESPACE_NOT_OPTED_IN, optIn.why, warnings);
  }

  const template = job.spec?.template;
  if (toggle(meta.annotations?.[ANNOTATIONS.inject], 'Job', warnings) === false) {
    return skip(SKIP_REASONS.OPTED_OUT_JOB, `Job annotation ${ANNOTATIONS.inject} is off`, warnings);
  }
  if (toggle(template?.metadata?.annotations?.[ANNOTATIONS.inject], 'pod template', warnings) === false) {
    return skip(SKIP_REASONS.OPTED_OUT_TEMPLATE, `pod template annotation ${ANNOTATIONS.inject} is off`, warnings);
  }
  if (meta.annotations?.[ANNOTATIONS.status] !== undefined) {
    return skip(SKIP_REASONS.ALREADY_INJECTED, `already injected (${ANNOTATIONS.status} present)`, warnings);
  }
  const conflict = nameConflict(job);
  if (conflict) {
    return skip(SKIP_REASONS.NAME_CONFLICT, conflict, [...warnings, `${conflict}; Job admitted without the log sidecar`]);
  }
  if (ctx.serverVersion && !supportsNativeSidecars(ctx.serverVersion)) {
    const v = `${ctx.serverVersion.major}.${ctx.serverVersion.minor}`;
    return skip(SKIP_REASONS.UNSUPPORTED_SERVER_VERSION, `Kubernetes ${v} has no native sidecars (needs 1.29+)`, [
      ...warnings,
      `Kubernetes ${v} has no native sidecars (needs 1.29 or newer); Job admitted without the log sidecar`,
    ]);
  }

  const resolved = resolveSettings(ctx.config, [
    { level: 'namespace', annotations: ctx.namespace?.annotations },
    { level: 'Job', annotations: meta.annotations },
    { level: 'pod template', annotations: template?.metadata?.annotations },
  ]);
  warnings.push(...resolved.warnings);
  const { settings } = resolved;
  if (settings.sink !== 'stdout' && settings.endpoint === undefined) {
    return skip(SKIP_REASONS.SINK_UNCONFIGURED, `sink ${settings.sink} has no endpoint`, [
      ...warnings,
      `sink ${settings.sink} has no endpoint configured; Job admitted without the log sidecar`,
    ]);
  }
  return { action: 'inject', reason: 'opted-in', settings, mode: resolveMode(settings, ctx.namespace), warnings };
}

/**
 * Whether a namespace opted in, by the annotation or (namespaceSelection:
 * label) the label; the label `disabled` is the escape hatch either way. The
 * webhook decides with it and the api-mode RBAC reconciler follows it.
 */
export function namespaceOptIn(ns: NamespaceMeta, config: Config, warnings: string[] = []): { optedIn: true } | { optedIn: false; why: string } {
  if (ns.labels?.[INJECT_LABEL] === 'disabled') return { optedIn: false, why: `namespace ${ns.name} is labelled ${INJECT_LABEL}=disabled` };
  const byLabel = config.namespaceSelection === 'label';
  const optedIn = byLabel ? ns.labels?.[INJECT_LABEL] === 'enabled' : toggle(ns.annotations?.[ANNOTATIONS.inject], 'namespace', warnings) === true;
  if (optedIn) return { optedIn: true };
  const how = byLabel ? `label ${INJECT_LABEL}=enabled` : `annotation ${ANNOTATIONS.inject}: enabled`;
  return { optedIn: false, why: `namespace ${ns.name} has no ${how}` };
}

/**
 * `auto` follows Pod Security Admission: node mode needs a hostPath, which only
 * the privileged level admits, so anything stricter gets api mode.
 */
export function resolveMode(settings: Settings, ns: NamespaceMeta | undefined): SourceMode {
  if (settings.mode !== 'auto') return settings.mode;
  const level = ns?.labels?.[PSA_ENFORCE_LABEL];
  return level === undefined || level === 'privileged' ? 'node' : 'api';
}

function toggle(raw: string | undefined, level: string, warnings: string[]): boolean | undefined {
  if (raw === undefined) return undefined;
  const r = parse.toggle(raw);
  if (r.ok) return r.value;
  warnings.push(`${level} annotation ${ANNOTATIONS.inject}=${JSON.stringify(raw.slice(0, 64))} ignored: ${r.why}`);
  return undefined;
}

function nameConflict(job: Job): string | undefined {
  const spec = job.spec?.template?.spec;
  if (!spec) return undefined;
  const containers = [...(spec.initContainers ?? []), ...(spec.containers ?? [])];
  if (containers.some((c) => c?.name === NAMES.container)) return `a container named ${NAMES.container} already exists`;
  const ours = new Set<string>([NAMES.stateVolume, NAMES.logVolume, NAMES.tokenVolume, NAMES.tlsVolume]);
  const v = (spec.volumes ?? []).find((vol) => ours.has(vol?.name));
  if (v) return `a volume named ${v.name} already exists`;
  return undefined;
}
