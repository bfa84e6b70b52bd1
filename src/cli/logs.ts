import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { redactUrls } from '../contract/redact.ts';
import { ANNOTATIONS, DEFAULT_CONTAINER_ANNOTATION, QUERY_TYPES, type QueryType } from '../core/annotations.ts';
import { defaultConfig, parseConfig, type Config } from '../core/config.ts';
import { ERROR_CODES, JobharvestError } from '../core/errors.ts';
import { resolveSettings, type AnnotationLevel } from '../core/settings.ts';
import type { Credentials } from '../query/http.ts';
import { resolveTarget, type QueryTarget } from '../query/resolve.ts';
import { formatTimeNs, parseTimeNs, type LogLine, type LogQuery, type QueryClient } from '../query/types.ts';

/** The `logs` command's flags as commander hands them over. */
export interface LogsFlags {
  namespace?: string;
  container?: string;
  allContainers?: boolean;
  since?: string;
  sinceTime?: string;
  tail?: string;
  timestamps?: boolean;
  prefix?: boolean;
  previous?: boolean;
  pod?: string;
  output?: string;
  explain?: boolean;
  kubeconfig?: string;
  context?: string;
  chartNamespace: string;
  queryEndpoint?: string;
  queryType?: string;
  esIndex?: string;
  lokiTenant?: string;
  tokenFile?: string;
  username?: string;
  passwordFile?: string;
  caFile?: string;
  pageSize?: string;
}

function bad(msg: string): never {
  throw new JobharvestError(ERROR_CODES.BAD_INPUT, msg);
}

/** `job/NAME`, `jobs/NAME`, `job.batch/NAME` or a bare NAME, as kubectl takes them. */
export function parseJobRef(ref: string): string {
  const m = /^(?:(?:jobs?|jobs?\.batch)\/)?([a-z0-9]([-a-z0-9.]*[a-z0-9])?)$/.exec(ref);
  if (!m) bad(`${ref}: expected job/NAME`);
  return m[1]!;
}

/** kubectl's --since: a Go duration such as 90s, 15m, 2h or 1h30m. */
export function parseDuration(s: string): number {
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/g;
  let total = 0;
  let consumed = 0;
  for (const m of s.matchAll(re)) {
    if (m.index !== consumed) break;
    consumed += m[0].length;
    total += Number(m[1]) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] as 'ms' | 's' | 'm' | 'h'];
  }
  if (consumed !== s.length || s.length === 0) bad(`--since ${s}: expected a duration such as 30s, 5m or 2h`);
  return total;
}

/** Where each setting came from, for --explain; values that could carry secrets are redacted. */
export interface Resolution {
  namespace: string;
  job: string;
  jobFound: 'exists' | 'gone' | 'unreadable';
  jobUid?: string;
  /** While the Job exists: its creation, so an earlier Job of the same name stays out. */
  jobCreatedMs?: number;
  sources: string[];
  target: QueryTarget | string;
  containers: string[] | undefined;
  containerNote: string;
  credentials: { creds: Credentials | undefined; from: string };
  ca: string | undefined;
  warnings: string[];
}

export interface ClusterView {
  job?: { annotations: Record<string, string>; template: Record<string, string>; uid?: string; containers: string[]; createdMs?: number };
  jobFound: Resolution['jobFound'];
  namespaceAnnotations?: Record<string, string>;
  namespaceNote: string;
  config?: Config;
  configNote: string;
  secret: (name: string) => Promise<Record<string, string> | undefined>;
  defaultNamespace?: string;
}

/**
 * Reads what the cluster knows: the Job, its namespace and the installed
 * chart's ConfigMap. Every read may fail (gone, forbidden, no cluster at all);
 * each failure only removes one level of configuration.
 */
async function readCluster(flags: LogsFlags, namespace: string | undefined, job: string): Promise<ClusterView & { namespace: string }> {
  const k8s = await import('@kubernetes/client-node');
  const kc = new k8s.KubeConfig();
  try {
    if (flags.kubeconfig) kc.loadFromFile(flags.kubeconfig);
    else kc.loadFromDefault();
    if (flags.context) kc.setCurrentContext(flags.context);
  } catch (e) {
    if (flags.kubeconfig) bad(`--kubeconfig ${flags.kubeconfig}: ${(e as Error).message}`);
  }
  const ctxNs = kc.getContextObject(kc.getCurrentContext())?.namespace;
  const ns = namespace ?? ctxNs ?? 'default';
  const view: ClusterView & { namespace: string } = { namespace: ns, jobFound: 'unreadable', namespaceNote: '', configNote: '', secret: async () => undefined };
  if (!kc.getCurrentCluster()) {
    view.namespaceNote = view.configNote = 'no cluster in the kubeconfig';
    return view;
  }
  const batch = kc.makeApiClient(k8s.BatchV1Api);
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const why = (e: unknown) => {
    const code = (e as { code?: number }).code;
    return code === 404 ? 'not found' : code === 403 ? 'forbidden' : code ? `HTTP ${code}` : ((e as NodeJS.ErrnoException).code ?? 'unreachable');
  };
  const [jobR, nsR, cmR] = await Promise.allSettled([
    batch.readNamespacedJob({ name: job, namespace: ns }),
    core.readNamespace({ name: ns }),
    core.listNamespacedConfigMap({ namespace: flags.chartNamespace, labelSelector: 'app.kubernetes.io/name=jobharvest' }),
  ]);
  if (jobR.status === 'fulfilled') {
    const j = jobR.value;
    view.jobFound = 'exists';
    view.job = {
      annotations: j.metadata?.annotations ?? {},
      template: j.spec?.template.metadata?.annotations ?? {},
      uid: j.metadata?.uid,
      containers: (j.spec?.template.spec?.containers ?? []).map((c) => c.name),
      ...(j.metadata?.creationTimestamp ? { createdMs: new Date(j.metadata.creationTimestamp).getTime() } : {}),
    };
  } else {
    view.jobFound = (jobR.reason as { code?: number }).code === 404 ? 'gone' : 'unreadable';
  }
  if (nsR.status === 'fulfilled') view.namespaceAnnotations = nsR.value.metadata?.annotations ?? {};
  else view.namespaceNote = `namespace ${ns}: ${why(nsR.reason)}`;
  if (cmR.status === 'fulfilled') {
    const cm = cmR.value.items.find((c) => c.data?.['config.yaml'] !== undefined);
    if (cm) {
      try {
        view.config = parseConfig(parseYaml(cm.data!['config.yaml']!) ?? {});
        view.configNote = `ConfigMap ${flags.chartNamespace}/${cm.metadata?.name}`;
      } catch (e) {
        view.configNote = `ConfigMap ${flags.chartNamespace}/${cm.metadata?.name} ignored: ${(e as Error).message}`;
      }
    } else view.configNote = `no jobharvest ConfigMap in namespace ${flags.chartNamespace}`;
  } else view.configNote = `chart ConfigMap in ${flags.chartNamespace}: ${why(cmR.reason)}`;
  view.secret = async (name) => {
    try {
      const s = await core.readNamespacedSecret({ name, namespace: ns });
      return Object.fromEntries(Object.entries(s.data ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64').toString('utf8')]));
    } catch {
      return undefined;
    }
  };
  return view;
}

function readSecretFile(path: string, flag: string): string {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch (e) {
    bad(`${flag} ${path}: ${(e as NodeJS.ErrnoException).code ?? String(e)}`);
  }
}

/** Job annotations > namespace annotations > chart configuration > embedded defaults; flags over all. */
export async function resolve(flags: LogsFlags, job: string, cluster?: ClusterView & { namespace: string }): Promise<Resolution> {
  const view = cluster ?? (await readCluster(flags, flags.namespace, job));
  const sources: string[] = [];
  const warnings: string[] = [];
  sources.push(`Job: ${view.jobFound === 'exists' ? `found (uid ${view.job?.uid})` : view.jobFound === 'gone' ? 'gone (deleted or never created): its annotations are not available' : 'could not be read'}`);
  sources.push(`namespace annotations: ${view.namespaceAnnotations ? 'read' : view.namespaceNote}`);
  sources.push(`chart configuration: ${view.configNote}`);
  const config = view.config ?? defaultConfig();
  const levels: AnnotationLevel[] = [
    { level: 'namespace', annotations: view.namespaceAnnotations },
    { level: 'Job', annotations: view.job?.annotations },
    { level: 'pod template', annotations: view.job?.template },
  ];
  const { settings, warnings: w } = resolveSettings(config, levels);
  warnings.push(...w);
  const origin = (annotation: string, chartValue: unknown): string => {
    for (const l of [...levels].reverse()) if (l.annotations?.[annotation] !== undefined) return `${l.level} annotation ${annotation}`;
    return chartValue !== undefined && view.config ? 'chart configuration' : 'default';
  };
  sources.push(`sink: ${settings.sink} (${origin(ANNOTATIONS.sink, config.sink.type)})`);
  if (settings.endpoint) sources.push(`sink endpoint: ${redactUrls(settings.endpoint)} (${origin(ANNOTATIONS.endpoint, config.sink.endpoint)})`);

  const annotated = (a: string) => view.job?.annotations[a] ?? view.namespaceAnnotations?.[a];
  let qType = (flags.queryType ?? annotated(ANNOTATIONS.queryType) ?? config.query.type) as QueryType | undefined;
  if (qType !== undefined && !(QUERY_TYPES as readonly string[]).includes(qType)) {
    if (flags.queryType) bad(`--query-type ${flags.queryType}: expected ${QUERY_TYPES.join(', ')}`);
    warnings.push(`query type ${JSON.stringify(qType)} ignored: expected ${QUERY_TYPES.join(', ')}`);
    qType = config.query.type;
  }
  const qEndpoint = flags.queryEndpoint ?? annotated(ANNOTATIONS.queryEndpoint) ?? config.query.endpoint;
  const qFrom = flags.queryEndpoint ? '--query-endpoint' : annotated(ANNOTATIONS.queryEndpoint) ? `${view.job?.annotations[ANNOTATIONS.queryEndpoint] ? 'Job' : 'namespace'} annotation ${ANNOTATIONS.queryEndpoint}` : config.query.endpoint ? 'chart configuration query.endpoint' : undefined;
  let target = resolveTarget(
    { sink: settings.sink, endpoint: settings.endpoint, esIndex: flags.esIndex ?? settings.esIndex, lokiTenant: flags.lokiTenant ?? settings.lokiTenant },
    { type: qType, endpoint: qEndpoint },
  );
  if (typeof target !== 'string' && qFrom) target = { ...target, how: `${target.how} from ${qFrom}` };

  // Which containers: kubectl's default container while the Job exists.
  let containers: string[] | undefined;
  let containerNote: string;
  if (flags.container) {
    containers = [flags.container];
    containerNote = `-c ${flags.container}`;
  } else if (flags.allContainers) {
    containerNote = 'all containers (--all-containers)';
  } else if (view.job) {
    const dflt = view.job.template[DEFAULT_CONTAINER_ANNOTATION] ?? view.job.containers[0];
    containers = dflt ? [dflt] : undefined;
    containerNote = `${dflt} (the Job's default container)`;
  } else {
    containerNote = 'every container shipped (the Job is gone, so its default container is unknown; use -c to pick one)';
  }

  // Credentials: the user's own flags, else the Secret the chart names for querying, else the sink's.
  let credentials: Resolution['credentials'] = { creds: undefined, from: 'none' };
  if (flags.tokenFile) credentials = { creds: { token: readSecretFile(flags.tokenFile, '--token-file') }, from: '--token-file' };
  else if (process.env.JOBHARVEST_QUERY_TOKEN) credentials = { creds: { token: process.env.JOBHARVEST_QUERY_TOKEN }, from: 'JOBHARVEST_QUERY_TOKEN' };
  else if (flags.username !== undefined) {
    if (!flags.passwordFile) bad('--username needs --password-file');
    credentials = { creds: { username: flags.username, password: readSecretFile(flags.passwordFile, '--password-file') }, from: '--username/--password-file' };
  } else {
    const name = config.query.authSecret ?? settings.authSecret;
    if (name) {
      const data = await view.secret(name);
      if (data && (data.token || (data.username !== undefined && data.password !== undefined))) {
        credentials = { creds: data.token ? { token: data.token } : { username: data.username, password: data.password }, from: `Secret ${view.namespace}/${name} (${data.token ? 'token' : 'username, password'})` };
      } else {
        warnings.push(`Secret ${view.namespace}/${name} could not be read or holds no token or username/password; querying without credentials`);
      }
    }
  }
  const ca = flags.caFile ? readSecretFile(flags.caFile, '--ca-file') : undefined;
  return { namespace: view.namespace, job, jobFound: view.jobFound, jobUid: view.job?.uid, ...(view.job?.createdMs !== undefined ? { jobCreatedMs: view.job.createdMs } : {}), sources, target, containers, containerNote, credentials, ca, warnings };
}

export async function makeClient(t: QueryTarget, creds: Credentials | undefined, ca: string | undefined, q: LogQuery): Promise<QueryClient> {
  const http = { ...(creds ? { credentials: creds } : {}), ...(ca ? { ca } : {}) };
  if (t.type === 'victorialogs') {
    const { VictoriaLogsClient, FIELD_MAPS, detectFields } = await import('../query/victorialogs.ts');
    return new VictoriaLogsClient(t.endpoint, FIELD_MAPS[await detectFields(t.endpoint, q, t.fields, http)], http);
  }
  if (t.type === 'loki') {
    const { LokiClient } = await import('../query/loki.ts');
    return new LokiClient(t.endpoint, http, t.tenant);
  }
  const { ElasticsearchClient } = await import('../query/elasticsearch.ts');
  return new ElasticsearchClient(t.endpoint, t.index, http);
}

/** Writes with backpressure, so a slow reader holds the query back instead of filling memory. */
class Out {
  closed = false;
  constructor(private readonly stream: NodeJS.WritableStream) {
    stream.on('error', (e: NodeJS.ErrnoException) => {
      // `| head` closing the pipe is a normal way to stop reading.
      if (e.code === 'EPIPE') this.closed = true;
      else throw e;
    });
  }
  async write(s: string): Promise<void> {
    if (this.closed) return;
    if (!this.stream.write(s)) await new Promise<void>((r) => this.stream.once('drain', r));
  }
}

export function formatLine(l: LogLine, ctx: { namespace: string; job: string }, flags: Pick<LogsFlags, 'output' | 'timestamps' | 'prefix'>): string {
  if (flags.output === 'json') {
    return JSON.stringify({ time: formatTimeNs(l.ns), namespace: ctx.namespace, job: ctx.job, pod: l.pod, container: l.container, restart: l.restart, stream: l.stream, message: l.message }) + '\n';
  }
  return `${flags.prefix ? `[pod/${l.pod}/${l.container}] ` : ''}${flags.timestamps ? `${formatTimeNs(l.ns)} ` : ''}${l.message}\n`;
}

// Clock skew between the API server and the node that stamped the CRI lines.
const CREATION_SLACK_MS = 60_000;

export function buildQuery(flags: LogsFlags, r: Pick<Resolution, 'namespace' | 'job' | 'containers' | 'jobCreatedMs'>, nowMs: number): LogQuery {
  if (flags.since && flags.sinceTime) bad('--since and --since-time cannot both be given');
  let fromNs: bigint | undefined;
  if (flags.since) fromNs = BigInt(nowMs - parseDuration(flags.since)) * 1_000_000n;
  if (flags.sinceTime) {
    fromNs = parseTimeNs(flags.sinceTime);
    if (fromNs === undefined) bad(`--since-time ${flags.sinceTime}: expected RFC 3339, e.g. 2026-01-02T15:04:05Z`);
  }
  // Records carry the Job's name, not its uid: while the Job exists, its
  // creation time keeps an earlier Job of the same name out.
  if (r.jobCreatedMs !== undefined) {
    const created = BigInt(r.jobCreatedMs - CREATION_SLACK_MS) * 1_000_000n;
    if (fromNs === undefined || fromNs < created) fromNs = created;
  }
  return { namespace: r.namespace, job: r.job, ...(flags.pod ? { pod: flags.pod } : {}), ...(r.containers ? { containers: r.containers } : {}), ...(fromNs !== undefined ? { fromNs } : {}) };
}

/**
 * The lines to print, in CRI order. --previous needs each container's latest
 * restart first, so it reads the lines twice rather than holding them.
 */
export async function* selectLines(client: QueryClient, q: LogQuery, flags: Pick<LogsFlags, 'previous' | 'tail' | 'pageSize'>): AsyncIterable<LogLine> {
  const pageSize = flags.pageSize ? Number(flags.pageSize) : undefined;
  let keep: (l: LogLine) => boolean = () => true;
  if (flags.previous) {
    const latest = new Map<string, number>();
    for await (const l of client.lines(q, pageSize)) {
      const k = `${l.pod}\0${l.container}`;
      if ((latest.get(k) ?? -1) < l.restart) latest.set(k, l.restart);
    }
    if (![...latest.values()].some((n) => n > 0)) bad('previous terminated container not found: no container of this Job restarted');
    keep = (l) => l.restart === (latest.get(`${l.pod}\0${l.container}`) ?? 0) - 1;
  }
  const tail = flags.tail === undefined ? -1 : Number(flags.tail);
  if (!Number.isInteger(tail) || tail < -1) bad(`--tail ${flags.tail}: expected a whole number, -1 for all`);
  if (tail === -1) {
    for await (const l of client.lines(q, pageSize)) if (keep(l)) yield l;
    return;
  }
  // A ring of the last N: memory is bounded by what the user asked to see.
  const ring: LogLine[] = [];
  let at = 0;
  if (tail === 0) return;
  for await (const l of client.lines(q, pageSize)) {
    if (!keep(l)) continue;
    if (ring.length < tail) ring.push(l);
    else ring[at] = l;
    at = (at + 1) % tail;
  }
  yield* ring.length < tail ? ring : [...ring.slice(at), ...ring.slice(0, at)];
}

export async function runLogs(ref: string, flags: LogsFlags, out: NodeJS.WritableStream = process.stdout, err: NodeJS.WritableStream = process.stderr): Promise<number> {
  const job = parseJobRef(ref);
  if (flags.output !== undefined && flags.output !== 'json') bad(`-o ${flags.output}: only json is supported`);
  const r = await resolve(flags, job);
  const q = buildQuery(flags, r, Date.now());
  if (flags.explain) {
    const lines = [`job/${job} in namespace ${r.namespace}`, ...r.sources.map((s) => `  ${s}`)];
    if (typeof r.target === 'string') lines.push(`  query: none: ${r.target}`);
    else lines.push(`  query: ${r.target.type} at ${redactUrls(r.target.endpoint)} (${r.target.how})${r.target.type === 'victorialogs' ? `, fields of the ${r.target.fields} writer` : ''}${r.target.type === 'elasticsearch' ? `, index ${r.target.index}` : ''}`);
    lines.push(`  containers: ${r.containerNote}`);
    if (q.fromNs !== undefined) lines.push(`  from: ${formatTimeNs(q.fromNs)}${r.jobCreatedMs !== undefined ? ' (the Job\'s creation, less a minute, or a later --since)' : ''}`);
    lines.push(`  credentials: ${r.credentials.from}`);
    for (const w of r.warnings) lines.push(`  warning: ${w}`);
    out.write(lines.join('\n') + '\n');
    return 0;
  }
  for (const w of r.warnings) err.write(`warning: ${w}\n`);
  if (typeof r.target === 'string') {
    err.write(`jobharvest logs: cannot query: ${r.target}\n`);
    return 2;
  }
  const client = await makeClient(r.target, r.credentials.creds, r.ca, q);
  const o = new Out(out);
  let n = 0;
  for await (const l of selectLines(client, q, flags)) {
    if (o.closed) break;
    await o.write(formatLine(l, r, flags));
    n++;
  }
  if (n === 0 && r.jobFound !== 'exists') err.write(`jobharvest logs: no lines found for job/${job} in namespace ${r.namespace} at ${redactUrls(r.target.endpoint)}\n`);
  return 0;
}
