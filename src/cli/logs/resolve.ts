import { redactUrls } from '../../contract/redact.ts';
import { ANNOTATIONS, DEFAULT_CONTAINER_ANNOTATION, parse, QUERY_TYPES, type ParseResult, type QueryType } from '../../core/annotations.ts';
import { defaultConfig } from '../../core/config.ts';
import { resolveSettings, TENANT_LOCKED, type AnnotationLevel } from '../../core/settings.ts';
import { tenantOf, type Tenant } from '../../core/tenants.ts';
import { resolveTarget, type QueryTarget } from '../../query/resolve.ts';
import type { ClusterView } from './cluster.ts';
import type { LogsOptions } from './options.ts';

/**
 * Where a setting came from. `operator` is true for the sources the trust
 * model gives to whoever runs jobharvest: the flags of this command and the
 * chart's configuration. Annotations, a Job's and a namespace's alike, may be
 * a tenant's.
 */
export interface Origin {
  from: string;
  operator: boolean;
}

/** Which credentials to send, decided before any is read. */
export type CredentialPlan =
  | { kind: 'none'; why: string }
  | { kind: 'token-file'; path: string }
  | { kind: 'env' }
  | { kind: 'basic'; username: string; passwordFile: string }
  | { kind: 'secret'; name: string; namespace: string; from: string };

/** The outcome of the pure resolution step: what to query, where, with what, and why. */
export interface Plan {
  namespace: string;
  job: string;
  jobFound: ClusterView['jobFound'];
  jobUid?: string;
  /** While the Job exists: its creation, so an earlier Job of the same name stays out. */
  jobCreatedMs?: number;
  /** One line per setting, with its source, for --explain; URLs redacted. */
  sources: string[];
  target: QueryTarget | string;
  /** Where the query endpoint came from, when there is one. */
  endpoint?: Origin & { trusted: boolean };
  containers: string[] | undefined;
  containerNote: string;
  credentials: CredentialPlan;
  warnings: string[];
  /** Warnings --explain shows besides `warnings`, which a run prints too. */
  explainWarnings: string[];
}

const LEVELS_HIGH_FIRST = ['pod template', 'Job', 'namespace'] as const;

/** Two query endpoints are one when their URLs are, up to a trailing slash. */
export function sameEndpoint(a: string, b: string): boolean {
  const norm = (s: string) => {
    try {
      return new URL(s).href.replace(/\/+$/, '');
    } catch {
      return s;
    }
  };
  return norm(a) === norm(b);
}

/**
 * Job annotations > namespace annotations > chart configuration > embedded
 * defaults, flags over all; then which credentials may go to the endpoint
 * found. Pure: no cluster, file or network access.
 */
export function plan(o: LogsOptions, view: ClusterView): Plan {
  const sources: string[] = [];
  const warnings: string[] = [];
  const explainWarnings: string[] = [];
  sources.push(`Job: ${view.jobFound === 'exists' ? `found (uid ${view.job?.uid})` : view.jobFound === 'gone' ? 'gone (deleted or never created): its annotations are not available' : 'could not be read'}`);
  sources.push(`namespace annotations: ${view.namespaceAnnotations ? 'read' : view.namespaceNote}`);
  sources.push(`chart configuration: ${view.configNote}`);
  const config = view.config ?? defaultConfig();
  const levels: AnnotationLevel[] = [
    { level: 'namespace', annotations: view.namespaceAnnotations },
    { level: 'Job', annotations: view.job?.annotations },
    { level: 'pod template', annotations: view.job?.template },
  ];
  // The namespace's own Secrets and tenant, as the chart maps them: by name,
  // or by labels, which are known only when the namespace could be read.
  const match = tenantOf(config.tenants, { name: view.namespace, labels: view.namespaceLabels });
  const tenant: Tenant | undefined = match.kind === 'tenant' ? match.tenant : undefined;
  if (match.kind === 'tenant') sources.push(`tenant mapping: ${match.tenant.name} (chart configuration tenants: ${match.by})`);
  if (match.kind === 'unknown') sources.push(`tenant mapping: unknown (${match.why})`);
  const { settings, warnings: w } = resolveSettings(config, levels, tenant);
  warnings.push(...w);
  /** The level whose valid annotation won, as resolveSettings applied them; else the tenant mapping, the chart or the default. */
  const originOf = (annotation: string, check: (v: string) => ParseResult<unknown>, chartValue: unknown, chartKey: string, tenantKey?: keyof Tenant): Origin => {
    const mapped = tenant !== undefined && tenantKey !== undefined && tenant[tenantKey] !== undefined;
    const locked = mapped && TENANT_LOCKED.has(tenantKey as never);
    for (const level of LEVELS_HIGH_FIRST) {
      if (locked && level !== 'namespace') continue;
      const raw = levels.find((l) => l.level === level)?.annotations?.[annotation];
      if (raw !== undefined && check(raw).ok) return { from: `${level} annotation ${annotation}`, operator: false };
    }
    if (mapped) return { from: `tenant mapping ${tenant.name} ${tenantKey}`, operator: true };
    return chartValue !== undefined && view.config ? { from: `chart configuration ${chartKey}`, operator: true } : { from: 'default', operator: true };
  };
  const sinkFrom = originOf(ANNOTATIONS.sink, parse.sink, config.sink.type, 'sink.type');
  const endpointFrom = originOf(ANNOTATIONS.endpoint, parse.endpoint, config.sink.endpoint, 'sink.endpoint');
  const authFrom = originOf(ANNOTATIONS.authSecret, parse.secretName, config.sink.authSecret, 'sink.authSecret', 'authSecret');
  const short = (f: Origin) => (f.from.startsWith('chart configuration') ? 'chart configuration' : f.from);
  sources.push(`sink: ${settings.sink} (${short(sinkFrom)})`);
  if (settings.endpoint) sources.push(`sink endpoint: ${redactUrls(settings.endpoint)} (${short(endpointFrom)})`);

  // The query API: flags, else a Job's or the namespace's annotation, else the chart.
  const annotated = (a: string): Origin | undefined =>
    view.job?.annotations[a] !== undefined ? { from: `Job annotation ${a}`, operator: false } : view.namespaceAnnotations?.[a] !== undefined ? { from: `namespace annotation ${a}`, operator: false } : undefined;
  const annotatedValue = (a: string) => view.job?.annotations[a] ?? view.namespaceAnnotations?.[a];
  let qType: QueryType | undefined = o.queryType ?? (annotatedValue(ANNOTATIONS.queryType) as QueryType | undefined) ?? config.query.type;
  const chartType: Origin = { from: 'chart configuration query.type', operator: true };
  let qTypeFrom: Origin = o.queryType ? { from: '--query-type', operator: true } : (annotated(ANNOTATIONS.queryType) ?? chartType);
  if (qType !== undefined && !(QUERY_TYPES as readonly string[]).includes(qType)) {
    warnings.push(`query type ${JSON.stringify(qType)} ignored: expected ${QUERY_TYPES.join(', ')}`);
    qType = config.query.type;
    qTypeFrom = chartType;
  }
  if (qType !== undefined) sources.push(`query type: ${qType} (${qTypeFrom.from})`);
  let qEndpoint: string | undefined;
  let qFrom: Origin | undefined;
  if (o.queryEndpoint) [qEndpoint, qFrom] = [o.queryEndpoint, { from: '--query-endpoint', operator: true }];
  else if (annotatedValue(ANNOTATIONS.queryEndpoint)) [qEndpoint, qFrom] = [annotatedValue(ANNOTATIONS.queryEndpoint), annotated(ANNOTATIONS.queryEndpoint)];
  else if (config.query.endpoint) [qEndpoint, qFrom] = [config.query.endpoint, { from: 'chart configuration query.endpoint', operator: true }];
  const esIndex = o.esIndex ?? settings.esIndex;
  const lokiTenant = o.lokiTenant ?? settings.lokiTenant;
  let target = resolveTarget({ sink: settings.sink, endpoint: settings.endpoint, esIndex, lokiTenant, accountID: settings.accountID, projectID: settings.projectID }, { type: qType, endpoint: qEndpoint });
  if (typeof target !== 'string' && qFrom) target = { ...target, how: `${target.how} from ${qFrom.from}` };

  let endpoint: Plan['endpoint'];
  // Everything that made this target queryable: the query endpoint's own
  // setting and the query type, or else the sink endpoint it was derived
  // from, the sink type that decided how, and a query type. The operator's
  // credentials go there only if the operator chose all of it: an
  // annotation's sink or query type alone would make the chart's ingest host
  // (a SaaS intake, say) receive them.
  const choosers: Origin[] = qFrom ? [qFrom] : [endpointFrom, sinkFrom];
  if (qType !== undefined) choosers.push(qTypeFrom);
  const chooser = choosers.find((c) => !c.operator) ?? choosers[0]!;
  if (typeof target !== 'string') {
    const trusted = chooser.operator || (o.trustEndpoint !== undefined && sameEndpoint(o.trustEndpoint, target.endpoint));
    endpoint = { from: qFrom ? qFrom.from : `derived from the sink endpoint (${short(endpointFrom)})`, operator: chooser.operator, trusted };
    sources.push(`query endpoint: ${redactUrls(target.endpoint)} (${endpoint.from}${!chooser.operator && trusted ? ', trusted with --trust-endpoint' : ''})`);
    if (target.type === 'elasticsearch') sources.push(`index: ${target.index} (${o.esIndex ? '--es-index' : short(originOf(ANNOTATIONS.esIndex, parse.esIndex, config.sink.esIndex, 'sink.esIndex', 'esIndex'))})`);
    if (target.type === 'loki' && target.tenant) sources.push(`tenant: ${target.tenant} (${o.lokiTenant ? '--loki-tenant' : short(originOf(ANNOTATIONS.lokiTenant, parse.lokiTenant, config.sink.lokiTenant, 'sink.lokiTenant', 'lokiTenant'))})`);
    if (target.vlTenant) sources.push(`tenant: AccountID ${target.vlTenant.accountID}, ProjectID ${target.vlTenant.projectID} (tenant mapping ${tenant?.name ?? ''})`);
  }

  // Which containers: kubectl's default container while the Job exists.
  let containers: string[] | undefined;
  let containerNote: string;
  if (o.container) {
    containers = [o.container];
    containerNote = `-c ${o.container}`;
  } else if (o.allContainers) {
    containerNote = 'all containers (--all-containers)';
  } else if (view.job) {
    const dflt = view.job.template[DEFAULT_CONTAINER_ANNOTATION] ?? view.job.containers[0];
    containers = dflt ? [dflt] : undefined;
    containerNote = `${dflt} (the Job's default container)`;
  } else {
    containerNote = 'every container shipped (the Job is gone, so its default container is unknown; use -c to pick one)';
  }

  // Credentials: the user's own, else the Secret the chart names for querying,
  // else the sink's. A Secret a Job names is never read: the Job's author
  // chose it, and it would be read with the user's kubeconfig.
  const jobNamed = authFrom.from.startsWith('Job ') || authFrom.from.startsWith('pod template ');
  let credentials: CredentialPlan = { kind: 'none', why: 'none configured' };
  if (o.tokenFile) credentials = { kind: 'token-file', path: o.tokenFile };
  else if (o.envToken) credentials = { kind: 'env' };
  else if (o.username !== undefined && o.passwordFile) credentials = { kind: 'basic', username: o.username, passwordFile: o.passwordFile };
  else if (match.kind === 'unknown') {
    // Its tenant's credential may be another one than the chart's: sending
    // the chart's instead would be guessing, with a credential of other namespaces.
    credentials = { kind: 'none', why: 'the namespace\'s tenant mapping is not known' };
    warnings.push(`${match.why}, so which of the chart's credentials is this namespace's is not known: none is read; --token-file or --username/--password-file sends your own`);
  } else if (tenant) {
    // A mapped namespace's own credential only: never the chart's global
    // query.authSecret or sink.authSecret, which may read other namespaces' logs.
    const ownAuth = settings.authSecret !== undefined && !jobNamed && !authFrom.from.startsWith('chart configuration') && authFrom.from !== 'default';
    if (tenant.queryAuthSecret) credentials = { kind: 'secret', name: tenant.queryAuthSecret, namespace: view.namespace, from: `tenant mapping ${tenant.name} queryAuthSecret` };
    else if (ownAuth) credentials = { kind: 'secret', name: settings.authSecret!, namespace: view.namespace, from: short(authFrom) };
    else {
      credentials = { kind: 'none', why: `tenant mapping ${tenant.name} names no credential` };
      if (config.query.authSecret || config.sink.authSecret) {
        warnings.push(`tenant mapping ${tenant.name} names no queryAuthSecret or authSecret for namespace ${view.namespace}: the chart's global ${config.query.authSecret ? 'query.authSecret' : 'sink.authSecret'} is not used for it`);
      }
    }
  } else if (config.query.authSecret && view.config) credentials = { kind: 'secret', name: config.query.authSecret, namespace: view.namespace, from: 'chart configuration query.authSecret' };
  else if (settings.authSecret && !jobNamed) credentials = { kind: 'secret', name: settings.authSecret, namespace: view.namespace, from: short(authFrom) };
  // Said whether or not another source came first: it is where a setting came from.
  if (settings.authSecret && jobNamed) warnings.push(`Secret ${settings.authSecret} named by the ${authFrom.from} is not read: a Job's annotations are its author's, and the Secret would be read with your kubeconfig`);
  if (endpoint && !endpoint.trusted && typeof target !== 'string') {
    const held = credentials.kind === 'none' ? '' : ` (${credentialLabel(credentials)} held back)`;
    const url = redactUrls(target.endpoint);
    // Always in --explain; on a run only when it changed something, so that
    // an annotation-chosen endpoint without credentials to send stays quiet.
    const what = chooser === qFrom || chooser === endpointFrom ? `chose the query endpoint ${url}` : `decided that ${url} is queried`;
    (held ? warnings : explainWarnings).push(`${chooser.from} ${what}: no credentials are sent there${held}; --trust-endpoint ${url} sends them`);
    credentials = { kind: 'none', why: "the query endpoint is not the operator's" };
  }
  if (typeof target === 'string' && credentials.kind !== 'none') credentials = { kind: 'none', why: 'nothing to query' };

  return {
    namespace: view.namespace,
    job: o.job,
    jobFound: view.jobFound,
    ...(view.job?.uid ? { jobUid: view.job.uid } : {}),
    ...(view.job?.createdMs !== undefined ? { jobCreatedMs: view.job.createdMs } : {}),
    sources,
    target,
    ...(endpoint ? { endpoint } : {}),
    containers,
    containerNote,
    credentials,
    warnings,
    explainWarnings,
  };
}

/** Where credentials come from, for --explain; never their value. */
export function credentialLabel(c: CredentialPlan): string {
  switch (c.kind) {
    case 'none':
      return `none (${c.why})`;
    case 'token-file':
      return '--token-file';
    case 'env':
      return 'JOBHARVEST_QUERY_TOKEN';
    case 'basic':
      return '--username/--password-file';
    case 'secret':
      return `Secret ${c.namespace}/${c.name} (${c.from})`;
  }
}
