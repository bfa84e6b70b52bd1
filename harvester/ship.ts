// Ships one finished pod's missing lines with the sidecar's engine, used as a
// library: its api-mode reader, records, encoders, delivery and sinks, built
// from a typed configuration. Everything that decides where and how much to
// send comes from the harvester's own settings and the operator's approved
// destination; from the pod it takes only identity and the positions in its
// sidecar's (validated) termination message, and its shaping settings from
// the signed sidecar container, so that what the sidecar would have masked is
// masked here too.
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { readFile } from 'node:fs/promises';
import { codecFor } from '../src/contract/codec.ts';
import { ENV } from '../src/contract/env.ts';
import type { TerminationMessage } from '../src/contract/termination.ts';
import {
  CountingDeadLetter,
  countMissing,
  loadSink,
  log,
  MemoryCheckpoint,
  parseShaping,
  Pipeline,
  SHAPING_ENV_NAMES,
  shapingOn,
  shapingProblems,
  withLogFields,
  type CheckpointEntry,
  type EngineOptions,
  type Identity,
  type KubeCredentials,
  type ShapingSettings,
  type Sink,
} from '../sidecar/engine.ts';
import { dialGuard, type Destination, type Resolver } from './destinations.ts';

/** Request and batch sizes: the harvester's, never the pod's. */
export interface ShipLimits {
  readonly batchMaxBytes: number;
  readonly batchMaxRecords: number;
  readonly batchMaxWaitMs: number;
  readonly maxInFlight: number;
  readonly requestTimeoutMs: number;
  readonly maxRecordBytes: number;
  readonly maxResponseBytes: number;
}

const num = (k: keyof typeof ENV): number => Number((ENV[k] as { default?: string }).default);

/** The sidecar's defaults, with one request in flight and a small answer cap: many harvests share one process. */
export const DEFAULT_LIMITS: ShipLimits = {
  batchMaxBytes: num('BATCH_MAX_BYTES'),
  batchMaxRecords: num('BATCH_MAX_RECORDS'),
  batchMaxWaitMs: num('BATCH_MAX_WAIT_MS'),
  maxInFlight: 1,
  requestTimeoutMs: num('REQUEST_TIMEOUT_MS'),
  maxRecordBytes: num('MAX_RECORD_BYTES'),
  maxResponseBytes: 4 * 1024 * 1024,
};

export interface KubeAccess {
  readonly apiUrl: URL;
  readonly credentials: () => Promise<KubeCredentials>;
}

export interface ShipRequest {
  readonly pod: V1Pod;
  /** The sidecar's container name, from the signed injection. */
  readonly sidecar: string;
  readonly message: TerminationMessage | undefined;
  readonly destination: Destination;
  readonly kube: KubeAccess;
  readonly limits: ShipLimits;
  /** How long the shipping may retry: the rest of the maximum hold. */
  readonly deadlineMs: number;
  readonly signal: AbortSignal;
  /**
   * Checked before every request: false once this replica may no longer act
   * (its Lease's renew deadline passed). A replica frozen mid-harvest (SIGSTOP,
   * a long GC pause) wakes with retries due before the timer that aborts
   * `signal`; this keeps any of them from going out.
   */
  readonly mayWrite?: () => boolean;
  /** Names this replica to the server (User-Agent). */
  readonly identity?: string;
  /** Resolves the destination's name when a connection is dialled; the system's by default (a test passes a stub). */
  readonly resolver?: Resolver;
}

export interface ShipResult {
  /** Lines after the sidecar's positions: not at the server by its account. */
  readonly missing: number;
  readonly shipped: number;
  readonly lost: number;
}

/** Where the api reader resumes: the message's positions, its finished runs skipped. */
export function checkpointOf(message: TerminationMessage | undefined): Map<string, CheckpointEntry> {
  const files = new Map<string, CheckpointEntry>();
  for (const run of message?.done ?? []) files.set(`${run}/api`, { offset: 0, done: true });
  for (const [container, restart, ts, n, o] of message?.runs ?? []) {
    if (ts === null) continue;
    // Node mode does not know line numbers; any count > 0 makes the reader skip by timestamp.
    files.set(`${container}/${restart}/api`, { offset: o ?? Math.max(1, n), done: false, ts, n: Math.max(1, n) });
  }
  return files;
}

async function secret(file: string | undefined): Promise<string | undefined> {
  if (!file) return undefined;
  return (await readFile(file, 'utf8')).trim();
}

const MASK_ENV = new Set<string>([ENV.MASK.name, ENV.MASK_PATTERNS.name, ENV.MASK_REPLACEMENT.name]);

/**
 * The shaping the pod's sidecar had, from its container's env (covered by
 * the webhook's signature, which the harvester checked). Values the sidecar
 * itself would have refused: no shaping, but the masks still if they are
 * valid on their own, for shipping a secret the operator masked would be
 * worse than shipping a trace unjoined.
 */
export function podShaping(pod: V1Pod, sidecar: string, maxRecordBytes: number): ShapingSettings | undefined {
  const containers: V1Container[] = [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])];
  const env: Record<string, string> = {};
  for (const e of containers.find((c) => c.name === sidecar)?.env ?? []) if (SHAPING_ENV_NAMES.includes(e.name) && e.value !== undefined) env[e.name] = e.value;
  const all = parseShaping(env, maxRecordBytes);
  const problems = [...all.problems, ...shapingProblems(all.settings)];
  if (problems.length === 0) return shapingOn(all.settings) ? all.settings : undefined;
  const masks = parseShaping(Object.fromEntries(Object.entries(env).filter(([k]) => MASK_ENV.has(k))), maxRecordBytes);
  const keep = masks.problems.length === 0 && shapingProblems(masks.settings).length === 0 && shapingOn(masks.settings);
  log.warn(keep ? "the pod's shaping settings are invalid; shipping unshaped, with its masks" : "the pod's shaping settings are invalid; shipping unshaped", { problems });
  return keep ? masks.settings : undefined;
}

/**
 * The OTLP resource's owner and service name as the webhook rendered them
 * into the pod's sidecar (signed, and checked before the pod is harvested),
 * and the Job's uid from the Job controller's label: harvested records carry
 * the same resource as the sidecar's own.
 */
export function podResource(pod: V1Pod, sidecar: string): Pick<Identity, 'jobUid' | 'cronJob' | 'serviceName'> {
  const env = new Map<string, string>();
  for (const e of (pod.spec?.initContainers ?? []).find((c) => c.name === sidecar)?.env ?? []) if (e.value !== undefined) env.set(e.name, e.value);
  const jobUid = pod.metadata?.labels?.['batch.kubernetes.io/controller-uid'];
  const cronJob = env.get(ENV.CRONJOB_NAME.name);
  const serviceName = env.get(ENV.SERVICE_NAME.name);
  return {
    ...(jobUid ? { jobUid } : {}),
    ...(cronJob ? { cronJob: { name: cronJob, uid: env.get(ENV.CRONJOB_UID.name) ?? '' } } : {}),
    ...(serviceName ? { serviceName } : {}),
  };
}

/** The engine's options for one pod: typed, built here, no environment involved. */
export async function shipConfig(req: Omit<ShipRequest, 'signal' | 'mayWrite'>): Promise<EngineOptions> {
  const { pod, destination: d, limits } = req;
  const token = await secret(d.auth?.tokenFile);
  const username = await secret(d.auth?.usernameFile);
  const password = await secret(d.auth?.passwordFile);
  const shaping = podShaping(pod, req.sidecar, limits.maxRecordBytes);
  return {
    identity: {
      namespace: pod.metadata?.namespace ?? '',
      pod: pod.metadata?.name ?? '',
      podUid: pod.metadata?.uid ?? '',
      node: pod.spec?.nodeName ?? '',
      job: pod.metadata?.labels?.['batch.kubernetes.io/job-name'] ?? '',
      ...podResource(pod, req.sidecar),
    },
    selfContainer: req.sidecar,
    mode: 'api',
    sink: d.sink,
    endpoint: d.endpoint,
    headers: { 'user-agent': `jobharvest-harvester${req.identity ? ` (${req.identity})` : ''}` },
    // The chart's codec for this destination, as the sidecars use it (a sink that does not take it gets gzip).
    compression: codecFor(d.sink, d.compression ?? 'gzip').codec,
    gzipLevel: num('GZIP_LEVEL'),
    tls: { ...(d.tls ?? {}), insecureSkipVerify: false },
    auth: { scheme: 'Bearer', ...(token ? { token } : {}), ...(username ? { username, password } : {}) },
    esIndex: d.esIndex ?? String((ENV.ES_INDEX as { default?: string }).default),
    otlpEncoding: d.otlpEncoding ?? 'protobuf',
    ...(d.lokiTenant ? { lokiTenant: d.lokiTenant } : {}),
    // The engine keeps up to 2 s of its drain for its final writes; add them,
    // so that shipping retries until the hold's deadline itself.
    drainMs: Math.max(1000, req.deadlineMs) + 2000,
    maxRecordBytes: limits.maxRecordBytes,
    batchMaxBytes: limits.batchMaxBytes,
    batchMaxRecords: limits.batchMaxRecords,
    batchMaxWaitMs: limits.batchMaxWaitMs,
    maxInFlight: limits.maxInFlight,
    requestTimeoutMs: limits.requestTimeoutMs,
    kube: { apiUrl: req.kube.apiUrl, credentials: req.kube.credentials },
    maxResponseBytes: limits.maxResponseBytes,
    ...(shaping ? { shaping } : {}),
    // Every sink connection dials only addresses of a class the destination allows.
    lookup: dialGuard(d, req.resolver),
  };
}

export function shipPod(req: ShipRequest): Promise<ShipResult> {
  const pod = req.pod;
  return withLogFields({ namespace: pod.metadata?.namespace, pod: pod.metadata?.name, job: pod.metadata?.labels?.['batch.kubernetes.io/job-name'] }, async () => {
    const config = await shipConfig(req);
    const checkpoint = checkpointOf(req.message);
    const missing = await countMissing({ config, checkpoint, signal: req.signal });
    if (missing === 0) return { missing, shipped: 0, lost: 0 };
    const { sink, http } = await loadSink(config);
    const mayWrite = req.mayWrite ?? (() => true);
    const guarded: Sink = {
      send: async (records, signal) => (mayWrite() && !req.signal.aborted ? sink.send(records, signal) : { kind: 'retry', reason: 'this replica no longer leads' }),
      close: () => sink.close?.() ?? Promise.resolve(),
    };
    const p = new Pipeline(config, { sink: guarded, checkpoint: new MemoryCheckpoint(checkpoint), deadLetter: new CountingDeadLetter(), signal: req.signal });
    try {
      await p.start();
      const summary = await p.drain();
      return { missing, shipped: summary.lines_shipped, lost: Math.max(0, missing - summary.lines_shipped) };
    } finally {
      http?.close();
    }
  });
}
