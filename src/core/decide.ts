import { NAMES, type SinkType, type SourceMode } from '../contract/env.ts';
import { foreignMount } from '../contract/signature.ts';
import { ANNOTATIONS, INJECT_LABEL, PSA_ENFORCE_LABEL, parse } from './annotations.ts';
import { excludedNamespaces, type Config } from './config.ts';
import { isJob, isObject, type Job, type NamespaceMeta } from './kube.ts';
import { resolveSettings, type Settings } from './settings.ts';
import { supportsNativeSidecars, type ServerVersion } from './server-version.ts';
import { ownerKindName, ownerOptedIn, ttlOwnership } from './owner.ts';
import { tenantOf } from './tenants.ts';

export interface DecideContext {
  config: Config;
  /** The Job's namespace as the cache knows it; undefined when it could not be read. */
  namespace: NamespaceMeta | undefined;
  /** The API server's version; undefined when unknown (then native sidecars are assumed). */
  serverVersion?: ServerVersion | undefined;
  /** The offline CLI injects as if the namespace had opted in. */
  assumeOptedIn?: boolean;
  /** Admission time, epoch ms; the core reads no clock of its own. */
  now?: number;
  /** Signs what was injected, so the harvester can tell it from a tenant's forgery (src/contract/signature.ts). */
  signingKey?: Buffer | undefined;
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
  WINDOWS_POD: 'windows-pod',
  MANAGED_ELSEWHERE: 'managed-elsewhere',
  ANNOTATIONS_TOO_LARGE: 'annotations-too-large',
  NEEDS_API_MODE: 'needs-api-mode',
} as const;
export type SkipReason = (typeof SKIP_REASONS)[keyof typeof SKIP_REASONS];

export type Decision =
  | {
      action: 'inject';
      reason: 'opted-in';
      settings: Settings;
      mode: SourceMode;
      /** The TTL to give a Job that has none; null when the sink keeps no copy of the logs, or another controller owns the Job. */
      ttlSecondsAfterFinished: number | null;
      /** The controlling owner the TTL is left to, when that is why there is none. */
      ttlLeftTo?: string;
      warnings: string[];
    }
  | { action: 'skip'; reason: SkipReason; detail: string; warnings: string[] };

/** Sinks that keep the logs somewhere the Job's deletion does not reach. */
export function isDurableSink(sink: SinkType): boolean {
  return sink !== 'stdout';
}

/** The only controller that runs a Job's pods on this cluster; another one (e.g. MultiKueue) runs them elsewhere. */
export const JOB_CONTROLLER = 'kubernetes.io/job-controller';
const OS_LABEL = 'kubernetes.io/os';

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
  /** Set when the Job is in only because the operator opted in its owner's kind. */
  let byOwner: string | undefined;
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
    if (!optIn.optedIn) {
      // The operator's rule for Jobs users never write; a namespace that said
      // no (annotation off, or the label escape hatch) still means no.
      const owner = optIn.optOut ? undefined : ownerOptedIn(job, ctx.config.ownedJobs.injectOwners);
      if (!owner) return skip(SKIP_REASONS.NAMESPACE_NOT_OPTED_IN, optIn.why, warnings);
      byOwner = ownerKindName(owner);
    }
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
  const managedBy = job.spec?.managedBy;
  if (managedBy !== undefined && managedBy !== null && managedBy !== JOB_CONTROLLER) {
    const who = JSON.stringify(String(managedBy).slice(0, 64));
    return skip(SKIP_REASONS.MANAGED_ELSEWHERE, `spec.managedBy is ${who}: its pods do not run on this cluster`, [
      ...warnings,
      `spec.managedBy is ${who}, so this cluster's Job controller does not run it; Job admitted without the log sidecar and without a TTL`,
    ]);
  }
  const windows = windowsPod(template?.spec);
  if (windows) {
    return skip(SKIP_REASONS.WINDOWS_POD, `a Windows pod (${windows})`, [
      ...warnings,
      `the pod runs on Windows (${windows}) and the sidecar is Linux-only; Job admitted without the log sidecar`,
    ]);
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

  // The operator's mapping of this namespace to its own Secrets and tenant.
  // Offline there is no namespace to read, so only a mapping by name applies.
  const tenant = tenantOf(ctx.config.tenants, ctx.namespace ? { name: ctx.namespace.name, labels: ctx.namespace.labels ?? {} } : { name: nsName, labels: undefined });
  if (tenant.kind === 'unknown') warnings.push(`${tenant.why}: no tenant mapping applied`);
  const resolved = resolveSettings(
    ctx.config,
    [
      { level: 'namespace', annotations: ctx.namespace?.annotations },
      { level: 'Job', annotations: meta.annotations },
      { level: 'pod template', annotations: template?.metadata?.annotations },
    ],
    tenant.kind === 'tenant' ? tenant.tenant : undefined,
  );
  warnings.push(...resolved.warnings);
  const { settings } = resolved;
  if (settings.sink !== 'stdout' && settings.endpoint === undefined) {
    return skip(SKIP_REASONS.SINK_UNCONFIGURED, `sink ${settings.sink} has no endpoint`, [
      ...warnings,
      `sink ${settings.sink} has no endpoint configured; Job admitted without the log sidecar`,
    ]);
  }
  let ttl: number | null = settings.ttlSecondsAfterFinished;
  if (!isDurableSink(settings.sink)) {
    ttl = null;
    if (job.spec?.ttlSecondsAfterFinished === undefined || job.spec?.ttlSecondsAfterFinished === null) {
      warnings.push(
        `sink ${settings.sink} keeps the logs only in the pod, so ttlSecondsAfterFinished is not set and the Job is kept as before; configure a sink and endpoint to have it deleted once its logs are shipped`,
      );
    }
  }
  let ttlLeftTo: string | undefined;
  const ownership = ttlOwnership(job, ctx.config.ownedJobs.ttlOwners);
  const ownTtl = job.spec?.ttlSecondsAfterFinished;
  if (ownership.ttl === 'owner' && ownership.known && ownTtl !== undefined && ownTtl !== null) {
    // Kept, as every Job's own TTL is; but it is the very hazard the rule avoids.
    warnings.push(`the Job sets ttlSecondsAfterFinished ${String(ownTtl)} and is controlled by ${ownership.owner}: ${ownership.why}; jobharvest keeps it, but consider leaving the TTL to the owner`);
  }
  if (ttl !== null && ownership.ttl === 'owner') {
    ttl = null;
    ttlLeftTo = ownership.owner;
    if (job.spec?.ttlSecondsAfterFinished === undefined || job.spec?.ttlSecondsAfterFinished === null) {
      warnings.push(`the Job is controlled by ${ownership.owner}: ${ownership.why}; jobharvest ships its logs but leaves ttlSecondsAfterFinished to its owner`);
    }
  }
  let mode = resolveMode(settings, ctx.namespace);
  // api mode reads pods/log through the log-reader binding, which only the
  // namespace reconciler makes, from the namespace's own annotations and Pod
  // Security label. A Job cannot ask for it where the namespace reads in node
  // mode: admission has no side effect a review's content could trigger, so
  // nothing would bind it (and a forged review must bind nothing).
  const nsMode = ctx.assumeOptedIn ? undefined : namespaceMode(ctx.namespace, ctx.config);
  if (mode === 'api' && nsMode === 'node') {
    mode = 'node';
    warnings.push(
      `${ANNOTATIONS.mode}: api ignored: namespace ${nsName ?? '(none)'} reads logs in node mode, and api mode is chosen for a whole namespace (its ${ANNOTATIONS.mode} annotation or its Pod Security level), never by a Job; the sidecar reads in node mode`,
    );
  }
  if (mode === 'node' && isObject(template?.spec) && template.spec.hostUsers === false) {
    // A user-namespaced pod maps its IDs away from the host's, so the host's
    // root-owned log files are unreadable to it whatever its securityContext.
    if (nsMode === 'node') {
      return skip(SKIP_REASONS.NEEDS_API_MODE, 'the pod runs in a user namespace (hostUsers: false) and its namespace reads logs in node mode', [
        ...warnings,
        `the pod runs in a user namespace (hostUsers: false), where the node's log files are unreadable, and namespace ${nsName ?? '(none)'} reads logs in node mode; annotate the namespace ${ANNOTATIONS.mode}: api to ship such Jobs. Job admitted without the log sidecar`,
      ]);
    }
    mode = 'api';
    warnings.push('the pod runs in a user namespace (hostUsers: false), where the node\'s log files are unreadable; the sidecar reads the logs through the API server (api mode) instead');
  }
  if (byOwner !== undefined && mode === 'api') {
    // api mode reads pods/log through a binding the reconciler makes only in
    // opted-in namespaces: without it the sidecar could read nothing.
    return skip(SKIP_REASONS.NAMESPACE_NOT_OPTED_IN, `namespace ${nsName ?? '(none)'} is not opted in, and its ${byOwner} Jobs would need api mode`, [
      ...warnings,
      `the ${byOwner} owner kind is opted in, but namespace ${nsName ?? '(none)'} needs api mode, which works only in namespaces opted in themselves; Job admitted without the log sidecar`,
    ]);
  }
  return { action: 'inject', reason: 'opted-in', settings, mode, ttlSecondsAfterFinished: ttl, ...(ttlLeftTo !== undefined ? { ttlLeftTo } : {}), warnings };
}

/**
 * Why the pod will run on Windows, if it will: the sidecar is a Linux image, and
 * its Linux-only security fields make the API server refuse a pod template with
 * spec.os.name windows outright.
 */
function windowsPod(spec: unknown): string | undefined {
  if (!isObject(spec)) return undefined;
  if (isObject(spec.os) && spec.os.name === 'windows') return 'spec.os.name: windows';
  if (isObject(spec.nodeSelector) && spec.nodeSelector[OS_LABEL] === 'windows') return `nodeSelector ${OS_LABEL}: windows`;
  const affinity = isObject(spec.affinity) && isObject(spec.affinity.nodeAffinity) ? spec.affinity.nodeAffinity : undefined;
  const required = affinity && isObject(affinity.requiredDuringSchedulingIgnoredDuringExecution) ? affinity.requiredDuringSchedulingIgnoredDuringExecution : undefined;
  const terms = Array.isArray(required?.nodeSelectorTerms) ? required.nodeSelectorTerms : [];
  // Terms are ORed: one that admits Windows nodes is enough for the pod to land on one.
  const windowsTerm = terms.some(
    (t) =>
      isObject(t) &&
      Array.isArray(t.matchExpressions) &&
      t.matchExpressions.some((e) => isObject(e) && e.key === OS_LABEL && e.operator === 'In' && Array.isArray(e.values) && e.values.includes('windows')),
  );
  return windowsTerm ? `required node affinity ${OS_LABEL} In windows` : undefined;
}

/**
 * Whether a namespace opted in, by the annotation or (namespaceSelection:
 * label) the label; the label `disabled` is the escape hatch either way. The
 * webhook decides with it and the api-mode RBAC reconciler follows it.
 */
export function namespaceOptIn(ns: NamespaceMeta, config: Config, warnings: string[] = []): { optedIn: true } | { optedIn: false; optOut: boolean; why: string } {
  if (ns.labels?.[INJECT_LABEL] === 'disabled') return { optedIn: false, optOut: true, why: `namespace ${ns.name} is labelled ${INJECT_LABEL}=disabled` };
  const byLabel = config.namespaceSelection === 'label';
  const said = toggle(ns.annotations?.[ANNOTATIONS.inject], 'namespace', warnings);
  const optedIn = byLabel ? ns.labels?.[INJECT_LABEL] === 'enabled' : said === true;
  if (optedIn) return { optedIn: true };
  const how = byLabel ? `label ${INJECT_LABEL}=enabled` : `annotation ${ANNOTATIONS.inject}: enabled`;
  return { optedIn: false, optOut: !byLabel && said === false, why: `namespace ${ns.name} has no ${how}` };
}

/**
 * The mode a namespace's Jobs read in, from what only the operator writes: the
 * configuration, the namespace's annotations and its Pod Security label. The
 * log-reader reconciler binds by it, and a Job cannot choose api mode where it
 * says node.
 */
export function namespaceMode(ns: NamespaceMeta | undefined, config: Config): SourceMode {
  const { settings } = resolveSettings(config, [{ level: 'namespace', annotations: ns?.annotations }]);
  return resolveMode(settings, ns);
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
  // A mount of a volume the webhook is about to add would resolve once it is
  // added: the node's pod logs without the sidecar's subPathExpr, the
  // sidecar's token, or its checkpoints.
  return foreignMount(spec);
}
