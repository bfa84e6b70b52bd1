import { ENV, NAMES, SUBPATH_EXPR, type EnvVarSpec, type SourceMode } from '../contract/env.ts';
import { codecFor, configuredCodec } from '../contract/codec.ts';
import { serviceLinkCanSet } from '../contract/service-links.ts';
import type { InjectionStatus } from '../contract/harvest.ts';
import { VERSION } from '../contract/version.ts';
import { ANNOTATIONS, DEFAULT_CONTAINER_ANNOTATION, JOB_NAME_LABEL, JOB_UID_LABEL } from './annotations.ts';
import { SERVICE_NAME_ANNOTATION, SERVICE_NAME_LABEL } from '../contract/record.ts';
import { cronJobOf } from './owner.ts';
import type { Config } from './config.ts';
import { chooseFailureExitCode } from './exit-code.ts';
import { renderLogsUrl } from '../contract/logs-url.ts';
import { type Container, type Job, type JobSpec, type LimitRangeItem, type Obj, type ObjectMeta, type PodSpec, type Volume } from './kube.ts';
import type { Settings } from './settings.ts';
import { sharedValue } from './patch.ts';
import { carriedMetadata } from './carry.ts';
import { vlTenantHeaders } from './tenants.ts';
import { ephemeralStorage, limitRangeWarnings, resourcesField, sizeSidecar, type Resources } from './resources.ts';

export interface InjectParams {
  job: Job;
  settings: Settings;
  mode: SourceMode;
  /** Set when the Job has none; null leaves it unset (see decide). */
  ttlSecondsAfterFinished: number | null;
  /** The controller the TTL is left to (see decide). */
  ttlLeftTo?: string | undefined;
  /** The namespace's ResourceQuota keys and LimitRanges, when known. */
  quotaKeys?: readonly string[] | undefined;
  limitRanges?: readonly LimitRangeItem[] | undefined;
  config: Config;
  /** Admission time in epoch ms, for the logs-url template's {from}. */
  now?: number;
}

export type { InjectionStatus } from '../contract/harvest.ts';

// The kubelet sends SIGTERM to sidecars only after the main containers exit, but
// they share one grace period: leave a little room past the drain budget for
// process exit and the final checkpoint write.
const GRACE_MARGIN_SECONDS = 5;
const KUBERNETES_DEFAULT_GRACE_SECONDS = 30;
/** Within a grace period the Job chose below the drain budget: time for the final checkpoint and process exit. */
const KEPT_GRACE_MARGIN_SECONDS = 2;
const TOKEN_EXPIRATION_SECONDS = 3607;
/** Lowest ttlSecondsAfterFinished an injected Job keeps (docs/harvester.md). */
export const TTL_FLOOR_SECONDS = 3;

/**
 * Returns a new Job with the log sidecar added. Pure and deterministic: the
 * same input gives the same output byte for byte, which the golden files rely on.
 * The caller has already decided to inject (see decide()).
 */
export function inject({ job: input, settings, mode, ttlSecondsAfterFinished, ttlLeftTo, quotaKeys, limitRanges, config, now }: InjectParams): { job: Job; warnings: string[] } {
  // Copy-on-write along the paths this function changes; every other subtree
  // is shared with the input. A deep clone of the whole Job was the single
  // largest cost per admission, and the input is never mutated either way.
  const warnings: string[] = [];
  const template = { ...(input.spec?.template ?? {}) };
  template.metadata = { ...(template.metadata ?? {}) };
  const pod: PodSpec = (template.spec = { ...(template.spec ?? {}) });
  const job: Job & { metadata: ObjectMeta; spec: JobSpec } = {
    ...input,
    metadata: { ...(input.metadata ?? {}) },
    spec: { ...(input.spec ?? {}), template },
  };

  const volumes: Volume[] = [stateVolume(config)];
  const mounts: Obj[] = [{ name: NAMES.stateVolume, mountPath: NAMES.stateMountPath }];
  if (mode === 'node') {
    volumes.push({ name: NAMES.logVolume, hostPath: { path: config.sidecar.podLogsHostPath, type: 'Directory' } });
    // subPathExpr confines the sidecar to its own pod's directory: it cannot list
    // or read any other pod's logs on the node.
    mounts.push({ name: NAMES.logVolume, mountPath: NAMES.logMountPath, subPathExpr: SUBPATH_EXPR, readOnly: true });
  }
  if (mode === 'api' && pod.automountServiceAccountToken === false) {
    // (tokenMount below) The pod opted out of a token for its own containers; only the sidecar gets
    // one, short-lived and projected, to read pods/log.
    volumes.push(tokenVolume());
    mounts.push({ name: NAMES.tokenVolume, mountPath: NAMES.tokenMountPath, readOnly: true });
  }
  if (settings.tlsSecret) {
    volumes.push({ name: NAMES.tlsVolume, secret: { secretName: settings.tlsSecret } });
    mounts.push({ name: NAMES.tlsVolume, mountPath: NAMES.tlsMountPath, readOnly: true });
  }

  let grace: number | null = null;
  const needed = settings.drainSeconds + GRACE_MARGIN_SECONDS;
  const current = pod.terminationGracePeriodSeconds ?? KUBERNETES_DEFAULT_GRACE_SECONDS;
  // The API server defaults an unset grace period to 30 before admission, so
  // any other value was chosen: it is kept unless the operator set
  // raiseGracePeriod. The sidecar cannot read its pod's grace period, so it is
  // told to drain for less than that: a sidecar still draining at the end of
  // the grace period is SIGKILLed and exits 137, which a podFailurePolicy rule
  // such as In [137, 143] would take for the pod's own failure.
  const chosen = current !== KUBERNETES_DEFAULT_GRACE_SECONDS;
  let drain = settings;
  if (current < needed && chosen && !config.raiseGracePeriod) {
    // Below 3 s the kubelet's own floor (2 s for a container's stop) is the
    // sidecar's whole window, and a shorter drain would stop following the
    // files before the main containers are gone: the budget stays.
    const drainSeconds = current > KEPT_GRACE_MARGIN_SECONDS ? Math.min(settings.drainSeconds, current - KEPT_GRACE_MARGIN_SECONDS) : settings.drainSeconds;
    drain = { ...settings, drainSeconds };
    const how =
      drainSeconds < settings.drainSeconds
        ? `the sidecar drains for ${drainSeconds} s only, and what it leaves unsent is left to the harvester`
        : "a deleted or evicted pod's sidecar drains only that long, and what it leaves unsent is lost";
    warnings.push(`terminationGracePeriodSeconds ${current} is kept, below the drain budget (${settings.drainSeconds} s + ${GRACE_MARGIN_SECONDS}): ${how} (raiseGracePeriod: true raises it)`);
  } else if (current < needed) {
    grace = needed;
  }

  const exitCode = chooseFailureExitCode(input, NAMES.container);
  warnings.push(...exitCode.warnings);
  const tokenMount = mode === 'api' && pod.automountServiceAccountToken === false;
  const sized = sizeSidecar({ pod, standard: config.sidecar.resources, bounded: config.sidecar.boundedResources, quotaKeys });
  warnings.push(...sized.warnings, ...limitRangeWarnings(sized.resources, limitRanges));
  const storage = ephemeralStorage(pod, config.sidecar.stateSizeLimit, settings.sink === 'stdout');
  const resources = resourcesField({
    requests: { ...sized.resources.requests, ...(storage.requests ? { 'ephemeral-storage': storage.requests } : {}) },
    limits: { ...sized.resources.limits, ...(storage.limits ? { 'ephemeral-storage': storage.limits } : {}) },
  });
  const shared = sharedSidecar(config, { settings: drain, mode, tokenMount, exitCode: exitCode.code, resources }, () =>
    buildSidecar(config, drain, mode, exitCode.code, mounts, resources),
  );
  const carried = carriedMetadata(input, config.sidecar.carry);
  warnings.push(...carried.warnings);
  const carriedEnv: Obj[] = [];
  if (carried.labels !== undefined) carriedEnv.push({ name: ENV.JOB_LABELS.name, value: carried.labels });
  if (carried.annotations !== undefined) carriedEnv.push({ name: ENV.JOB_ANNOTATIONS.name, value: carried.annotations });
  carriedEnv.push(...resourceEnv(input, template.metadata));
  // Carried values differ from Job to Job (a run id, say): they go onto a
  // copy of the shared sidecar instead of into its cache key.
  const sidecar: Container = carriedEnv.length ? { ...shared, env: [...(shared.env as Obj[]), ...carriedEnv] } : shared;
  // First, so it starts before other init containers and captures their logs too.
  pod.initContainers = [sidecar, ...(pod.initContainers ?? [])];
  pod.volumes = [...(pod.volumes ?? []), ...volumes];

  let ttl: number | null = null;
  if (ttlSecondsAfterFinished !== null && (job.spec.ttlSecondsAfterFinished === undefined || job.spec.ttlSecondsAfterFinished === null)) {
    ttl = ttlSecondsAfterFinished;
    job.spec.ttlSecondsAfterFinished = ttl;
  }
  // The harvester holds a Job whose logs are not all shipped by raising its TTL
  // once it has finished; a shorter TTL could delete the Job, and its pods'
  // logs with it, before that patch lands.
  const own = job.spec.ttlSecondsAfterFinished;
  if (typeof own === 'number' && own < TTL_FLOOR_SECONDS) {
    warnings.push(`ttlSecondsAfterFinished ${own} is raised to ${TTL_FLOOR_SECONDS}, the least that leaves jobharvest time to hold the Job if its logs are not all shipped`);
    ttl = TTL_FLOOR_SECONDS;
    job.spec.ttlSecondsAfterFinished = ttl;
  }

  if (grace !== null) pod.terminationGracePeriodSeconds = grace;

  let defaultContainer: string | null = null;
  const tAnn = (template.metadata.annotations = { ...(template.metadata.annotations ?? {}) });
  const main = pod.containers?.[0]?.name;
  if (tAnn[DEFAULT_CONTAINER_ANNOTATION] === undefined && main !== undefined) {
    defaultContainer = main;
    tAnn[DEFAULT_CONTAINER_ANNOTATION] = main;
  }

  const status: InjectionStatus = {
    version: VERSION,
    mode,
    sink: settings.sink,
    container: NAMES.container,
    volumes: volumes.map((v) => v.name),
    ttlSecondsAfterFinished: ttl,
    ...(ttlLeftTo !== undefined ? { ttlLeftTo } : {}),
    resources: sized.sizing,
    terminationGracePeriodSeconds: grace,
    defaultContainer,
  };
  job.metadata.annotations = { ...(job.metadata.annotations ?? {}), [ANNOTATIONS.status]: JSON.stringify(status) };
  // The link is jobharvest's to write: one set in advance (by a tenant, say)
  // would be shown as where jobharvest put the logs. A reinvocation never
  // gets here (the status annotation makes it a skip), so nothing of ours is lost.
  const preset = job.metadata.annotations[ANNOTATIONS.logsUrl];
  if (preset !== undefined) delete job.metadata.annotations[ANNOTATIONS.logsUrl];
  if (config.logsUrlTemplate) {
    const created = job.metadata.creationTimestamp ? Date.parse(String(job.metadata.creationTimestamp)) : undefined;
    const url = renderLogsUrl(config.logsUrlTemplate, {
      namespace: job.metadata.namespace ?? '',
      job: job.metadata.name,
      uid: typeof job.metadata.uid === 'string' ? job.metadata.uid : undefined,
      from: created !== undefined && !Number.isNaN(created) ? created : now,
      to: undefined,
    });
    if (url !== undefined) job.metadata.annotations[ANNOTATIONS.logsUrl] = url;
  }
  if (preset !== undefined && job.metadata.annotations[ANNOTATIONS.logsUrl] !== preset) {
    warnings.push(`the annotation ${ANNOTATIONS.logsUrl} set on the Job is ${job.metadata.annotations[ANNOTATIONS.logsUrl] === undefined ? 'removed' : 'replaced'}: jobharvest writes that link itself`);
  }
  return { job, warnings };
}

/** What the sidecar container depends on besides the configuration. */
interface SidecarKey {
  settings: Settings;
  mode: SourceMode;
  tokenMount: boolean;
  exitCode: number | null;
  resources: Obj;
}

// The same sidecar goes into every Job with the same settings: it is built,
// frozen and serialized once per combination (see sharedValue), not per
// review. Settings come from tenants' annotations, so the cache is bounded.
const SIDECAR_CACHE_MAX = 256;
const sidecarCache = new WeakMap<Config, Map<string, Container>>();

function sharedSidecar(config: Config, key: SidecarKey, build: () => Container): Container {
  let byKey = sidecarCache.get(config);
  if (!byKey) sidecarCache.set(config, (byKey = new Map()));
  const k = JSON.stringify([key.mode, key.tokenMount, key.exitCode, key.resources, key.settings]);
  let c = byKey.get(k);
  if (!c) {
    if (byKey.size >= SIDECAR_CACHE_MAX) byKey.clear();
    c = sharedValue(build());
    byKey.set(k, c);
  }
  return c;
}

function buildSidecar(config: Config, settings: Settings, mode: SourceMode, exitCode: number | null, mounts: Obj[], resources: Obj): Container {
  const env = sidecarEnv(settings, mode, config);
  if (exitCode !== null) env.push({ name: ENV.FAILURE_EXIT_CODE.name, value: String(exitCode) });
  pinServiceLinkable(env);

  return {
    name: NAMES.container,
    image: config.sidecar.image,
    imagePullPolicy: config.sidecar.imagePullPolicy,
    args: [...config.sidecar.args],
    restartPolicy: 'Always',
    ...(config.sidecar.startedCommand.length > 0 ? { lifecycle: stopHook(config.sidecar.startedCommand) } : {}),
    env,
    resources: copyResources(resources as Resources),
    securityContext: {
      runAsNonRoot: true,
      runAsUser: config.sidecar.runAsUser,
      // Node mode: containerd writes every container log root:root 0640 in 0755
      // directories, whatever the container's user. A non-root process gets no
      // capabilities to read past that, but group 0 may read the files, and Pod
      // Security (even restricted) does not forbid it. The user stays non-root.
      runAsGroup: mode === 'node' ? 0 : config.sidecar.runAsUser,
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      privileged: false,
      capabilities: { drop: ['ALL'] },
      seccompProfile: { type: 'RuntimeDefault' },
    },
    volumeMounts: mounts,
  };
}

/**
 * The sidecar's preStop hook, given to every pod: the kubelet runs it before
 * it sends the sidecar SIGTERM, and it returns once the sidecar's SIGTERM
 * handler is in place (sidecar/started.ts), so that no SIGTERM reaches the
 * sidecar before it can be caught. The sidecar is PID 1 of its container
 * unless the pod shares a PID namespace, and the kernel discards a signal to
 * a namespace's init that has no handler for it: a pod deleted within ~0.2 s
 * of its start (an active deadline, a Job deleted or suspended, an eviction,
 * a JobSet restarting its children) had its sidecar's SIGTERM sent while Node
 * was still booting, and the sidecar ran on, undrained, until the grace
 * period's SIGKILL. In a shared or the host's PID namespace the same SIGTERM
 * killed the sidecar before it drained. The hook covers both, and a Job done
 * within milliseconds too. A postStart handshake would not: when the pod
 * starts terminating the kubelet cancels the pod's sync, a running postStart
 * hook with it, and signals at once; and it would hold back every Job's start
 * by the sidecar's boot (~0.2 s, docs/operations.md). The preStop hook costs each pod's end an exec of a
 * second, small Node process in the sidecar's container, which returns at
 * once when the sidecar is up.
 */
export function stopHook(command: readonly string[]): Obj {
  return { preStop: { exec: { command: [...command] } } };
}

function copyResources(r: Resources): Obj {
  const out: Obj = {};
  if (r.requests) out.requests = { ...r.requests };
  if (r.limits) out.limits = { ...r.limits };
  return out;
}

function stateVolume(config: Config): Volume {
  return { name: NAMES.stateVolume, emptyDir: { sizeLimit: config.sidecar.stateSizeLimit } };
}

function tokenVolume(): Volume {
  return {
    name: NAMES.tokenVolume,
    projected: {
      defaultMode: 0o444,
      sources: [
        { serviceAccountToken: { path: 'token', expirationSeconds: TOKEN_EXPIRATION_SECONDS } },
        { configMap: { name: 'kube-root-ca.crt', items: [{ key: 'ca.crt', path: 'ca.crt' }] } },
        { downwardAPI: { items: [{ path: 'namespace', fieldRef: { apiVersion: 'v1', fieldPath: 'metadata.namespace' } }] } },
      ],
    },
  };
}

// Contract variables a Service in the pod's namespace could set through the
// kubelet's service links (src/contract/service-links.ts), e.g.
// JOBHARVEST_METRICS_PORT from a Service `jobharvest-metrics`.
const SERVICE_LINKABLE: readonly EnvVarSpec[] = Object.values(ENV).filter((v) => serviceLinkCanSet(v.name));

/**
 * Sets each contract variable a service link could supply, at the value the
 * sidecar would take were it unset: the container's own env wins over
 * service links, so no Service of the namespace configures the sidecar.
 */
function pinServiceLinkable(env: Obj[]): void {
  const set = new Set(env.map((e) => e.name));
  for (const v of SERVICE_LINKABLE) if (!set.has(v.name)) env.push({ name: v.name, value: v.default ?? '' });
}

/**
 * The OTLP resource's owner and service name, which differ from Job to Job:
 * the CronJob that controls the Job (the CronJob controller sets the
 * reference when it creates the Job, so it is there at admission) and the
 * service name the pod template gives. Set only when there is a value.
 */
function resourceEnv(job: Job, template: ObjectMeta): Obj[] {
  const out: Obj[] = [];
  const cron = cronJobOf(job);
  if (cron) {
    out.push({ name: ENV.CRONJOB_NAME.name, value: cron.name });
    if (cron.uid) out.push({ name: ENV.CRONJOB_UID.name, value: cron.uid });
  }
  const named = template.annotations?.[SERVICE_NAME_ANNOTATION] || template.labels?.[SERVICE_NAME_LABEL];
  // An annotation may be long; a service name is a name.
  if (typeof named === 'string' && named !== '') out.push({ name: ENV.SERVICE_NAME.name, value: named.slice(0, MAX_SERVICE_NAME) });
  return out;
}

const MAX_SERVICE_NAME = 253;

const fieldRef = (fieldPath: string): Obj => ({ valueFrom: { fieldRef: { apiVersion: 'v1', fieldPath } } });
const secretRef = (name: string, key: string): Obj => ({ valueFrom: { secretKeyRef: { name, key, optional: true } } });

/** The sinks that send HTTP requests, and so JOBHARVEST_HEADERS. */
const HEADER_SINKS: ReadonlySet<string> = new Set(['http', 'loki', 'elasticsearch', 'otlp']);

function sidecarEnv(s: Settings, mode: SourceMode, config: Config): Obj[] {
  const env: Obj[] = [
    { name: ENV.POD_NAME.name, ...fieldRef('metadata.name') },
    { name: ENV.POD_NAMESPACE.name, ...fieldRef('metadata.namespace') },
    { name: ENV.POD_UID.name, ...fieldRef('metadata.uid') },
    { name: ENV.NODE_NAME.name, ...fieldRef('spec.nodeName') },
    { name: ENV.JOB_NAME.name, ...fieldRef(`metadata.labels['${JOB_NAME_LABEL}']`) },
    { name: ENV.JOB_UID.name, ...fieldRef(`metadata.labels['${JOB_UID_LABEL}']`) },
    { name: ENV.SELF_CONTAINER.name, value: NAMES.container },
    { name: ENV.MODE.name, value: mode },
    { name: ENV.STATE_DIR.name, value: NAMES.stateMountPath },
    { name: ENV.SINK.name, value: s.sink },
    { name: ENV.DRAIN_SECONDS.name, value: String(s.drainSeconds) },
  ];
  if (mode === 'node') env.push({ name: ENV.LOG_DIR.name, value: NAMES.logMountPath });
  const plain: Array<[string, string | undefined]> = [
    [ENV.ENDPOINT.name, s.endpoint],
    [ENV.ES_INDEX.name, s.sink === 'elasticsearch' ? s.esIndex : undefined],
    [ENV.OTLP_ENCODING.name, s.sink === 'otlp' ? s.otlpEncoding : undefined],
    [ENV.LOKI_TENANT.name, s.sink === 'loki' ? s.lokiTenant : undefined],
    [ENV.FORWARD_TAG.name, s.sink === 'forward' ? s.forwardTag : undefined],
  ];
  for (const [name, value] of plain) if (value !== undefined) env.push({ name, value });
  // A tenant mapping's VictoriaLogs tenant goes after the operator's headers,
  // so it wins over a header of the same name there (the sidecar keeps the last).
  const vl = HEADER_SINKS.has(s.sink) ? vlTenantHeaders(s) : undefined;
  const headers = [config.sink.headers, ...Object.entries(vl ?? {}).map(([k, v]) => `${k}=${v}`)].filter(Boolean).join(',');
  if (headers) env.push({ name: ENV.HEADERS.name, value: headers });
  // Only a codec the sidecar would not choose by itself is rendered, so the
  // default pod spec stays as it was.
  const codec = codecFor(s.sink, configuredCodec(config.sink.compression, config.sink.gzip) ?? 'gzip').codec;
  if (codec !== codecFor(s.sink, 'gzip').codec) env.push({ name: ENV.COMPRESSION.name, value: codec });
  if (s.tlsSecret) {
    env.push({ name: ENV.TLS_CA_FILE.name, value: `${NAMES.tlsMountPath}/ca.crt` });
    env.push({ name: ENV.TLS_CERT_FILE.name, value: `${NAMES.tlsMountPath}/tls.crt` });
    env.push({ name: ENV.TLS_KEY_FILE.name, value: `${NAMES.tlsMountPath}/tls.key` });
  }
  env.push(...shapingEnv(s, config));
  if (s.authSecret) {
    // optional: a Secret holding only a token (or only user/password) is fine.
    env.push({ name: ENV.AUTH_TOKEN.name, ...secretRef(s.authSecret, 'token') });
    env.push({ name: ENV.AUTH_USERNAME.name, ...secretRef(s.authSecret, 'username') });
    env.push({ name: ENV.AUTH_PASSWORD.name, ...secretRef(s.authSecret, 'password') });
    if (s.sink === 'forward') env.push({ name: ENV.SHARED_KEY.name, ...secretRef(s.authSecret, 'shared-key') });
  }
  return env;
}

/**
 * Record shaping: only what is switched on is set, so a pod without it gets
 * exactly the environment it had before shaping existed. Bounds go with the
 * feature they bound, and sink settings with their sink.
 */
function shapingEnv(s: Settings, config: Config): Obj[] {
  const { multiline, parse, mask, loki } = config.sidecar;
  const out: Array<[string, string | number | undefined]> = [];
  if (s.multiline.length > 0 || s.multilineStart !== undefined) {
    if (s.multiline.length > 0) out.push([ENV.MULTILINE.name, s.multiline.join(',')]);
    out.push([ENV.MULTILINE_START.name, s.multilineStart]);
    out.push([ENV.MULTILINE_MAX_LINES.name, multiline.maxLines]);
    out.push([ENV.MULTILINE_MAX_BYTES.name, multiline.maxBytes]);
    out.push([ENV.MULTILINE_FLUSH_MS.name, multiline.flushMs]);
  }
  if (s.parse === 'json') {
    out.push([ENV.PARSE.name, 'json']);
    out.push([ENV.JSON_MAX_FIELDS.name, parse.maxFields]);
    out.push([ENV.JSON_MAX_DEPTH.name, parse.maxDepth]);
    if (s.sink === 'otlp') out.push([ENV.JSON_ORIGINAL.name, parse.original]);
  }
  if (mask.builtin.length > 0) out.push([ENV.MASK.name, mask.builtin.join(',')]);
  if (mask.patterns.length > 0) out.push([ENV.MASK_PATTERNS.name, JSON.stringify(mask.patterns)]);
  if (mask.builtin.length > 0 || mask.patterns.length > 0) out.push([ENV.MASK_REPLACEMENT.name, mask.replacement]);
  if (s.sink === 'loki') {
    if (loki.streamLabels.length > 0) out.push([ENV.LOKI_STREAM_LABELS.name, loki.streamLabels.join(',')]);
    out.push([ENV.LOKI_MAX_METADATA.name, loki.maxMetadata]);
  }
  return out.filter(([, v]) => v !== undefined).map(([name, value]) => ({ name, value: String(value) }));
}
