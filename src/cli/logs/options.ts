import { QUERY_TYPES, type QueryType } from '../../core/annotations.ts';
import { ERROR_CODES, JobharvestError } from '../../core/errors.ts';
import { parseTimeNs } from '../../query/types.ts';

/** The `logs` command's flags as commander hands them over: text, unchecked. */
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
  chartNamespace?: string;
  release?: string;
  queryEndpoint?: string;
  queryType?: string;
  esIndex?: string;
  lokiTenant?: string;
  tokenFile?: string;
  username?: string;
  passwordFile?: string;
  caFile?: string;
  pageSize?: string;
  trustEndpoint?: string;
  follow?: boolean;
  followLag?: string;
  pollInterval?: string;
  run?: string;
  raw?: boolean;
}

/**
 * The command's options, parsed and checked in full: everything a flag can
 * get wrong is refused here, before the kubeconfig, the cluster, a file or
 * the log server is touched (kubectl's Complete and Validate).
 */
export interface LogsOptions {
  /** The Job's name; for cronjob/NAME, the CronJob's, until a run is chosen. */
  job: string;
  /** Set for cronjob/NAME: its runs are listed, or one of them (--run) is printed. */
  cronJob: boolean;
  /** --run: 1 for the newest run, 2 for the one before, or a Job's name. */
  run: string | undefined;
  namespace: string | undefined;
  container: string | undefined;
  allContainers: boolean;
  /** --since, in ms before now. */
  sinceMs: number | undefined;
  /** --since-time, in ns. */
  sinceTimeNs: bigint | undefined;
  /** -1: every line. */
  tail: number;
  timestamps: boolean;
  prefix: boolean;
  previous: boolean;
  pod: string | undefined;
  output: 'text' | 'json';
  explain: boolean;
  kubeconfig: string | undefined;
  context: string | undefined;
  /** Narrows which installed release's configuration is read (see release.ts). */
  chartNamespace: string | undefined;
  release: string | undefined;
  queryEndpoint: string | undefined;
  queryType: QueryType | undefined;
  esIndex: string | undefined;
  lokiTenant: string | undefined;
  tokenFile: string | undefined;
  /** $JOBHARVEST_QUERY_TOKEN, read once with the flags. */
  envToken: string | undefined;
  username: string | undefined;
  passwordFile: string | undefined;
  caFile: string | undefined;
  pageSize: number;
  /** A query endpoint chosen by an annotation that may receive the credentials anyway. */
  trustEndpoint: string | undefined;
  /** -f: keep printing lines as they reach the log server until the Job is done. */
  follow: boolean;
  /** --follow: lines are printed once they are this old, so that lines of other pods delivered a little later still come in order. */
  followLagMs: number;
  /** --follow: how often the log server is asked for new lines. */
  pollIntervalMs: number;
  /** --raw: print the lines' control characters as they are, also on a terminal. */
  raw: boolean;
}

export const DEFAULT_PAGE_SIZE = 5000;
export const DEFAULT_FOLLOW_LAG_MS = 5000;
export const DEFAULT_POLL_INTERVAL_MS = 1000;

function bad(msg: string): never {
  throw new JobharvestError(ERROR_CODES.BAD_INPUT, msg);
}

/** `job/NAME`, `jobs/NAME`, `job.batch/NAME` or a bare NAME, as kubectl takes them. */
export function parseJobRef(ref: string): string {
  const m = /^(?:(?:jobs?|jobs?\.batch)\/)?([a-z0-9]([-a-z0-9.]*[a-z0-9])?)$/.exec(ref);
  if (!m) bad(`${ref}: expected job/NAME or cronjob/NAME`);
  return m[1]!;
}

/** `cronjob/NAME` (also `cronjobs/`, `cj/`, `cronjob.batch/`): the name, or undefined for any other reference. */
export function parseCronJobRef(ref: string): string | undefined {
  const m = /^(?:cronjobs?|cj|cronjobs?\.batch)\/([a-z0-9]([-a-z0-9.]*[a-z0-9])?)$/.exec(ref);
  return m ? m[1]! : undefined;
}

/** kubectl's --since: a Go duration such as 90s, 15m, 2h or 1h30m. */
export function parseDuration(s: string, flag = '--since'): number {
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/g;
  let total = 0;
  let consumed = 0;
  for (const m of s.matchAll(re)) {
    if (m.index !== consumed) break;
    consumed += m[0].length;
    total += Number(m[1]) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] as 'ms' | 's' | 'm' | 'h'];
  }
  if (consumed !== s.length || s.length === 0) bad(`${flag} ${s}: expected a duration such as 30s, 5m or 2h`);
  return total;
}

function httpUrl(flag: string, text: string): string {
  let u: URL;
  try {
    u = new URL(text);
  } catch {
    bad(`${flag} ${text}: not a URL`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') bad(`${flag} ${u.protocol}: expected an http or https URL`);
  return text.replace(/\/+$/, '');
}

function wholeNumber(flag: string, text: string, min: number): number {
  const n = /^-?\d+$/.test(text.trim()) ? Number(text) : NaN;
  if (!Number.isSafeInteger(n) || n < min) bad(`${flag} ${text}: expected a whole number${min === -1 ? ', -1 for all' : ` of at least ${min}`}`);
  return n;
}

/** Parses every flag into its value (kubectl's Complete, without the cluster). Pure. */
export function completeOptions(ref: string, flags: LogsFlags, env: NodeJS.ProcessEnv = process.env): LogsOptions {
  const queryType = flags.queryType;
  if (queryType !== undefined && !(QUERY_TYPES as readonly string[]).includes(queryType)) bad(`--query-type ${queryType}: expected ${QUERY_TYPES.join(', ')}`);
  let sinceTimeNs: bigint | undefined;
  if (flags.sinceTime !== undefined) {
    sinceTimeNs = parseTimeNs(flags.sinceTime);
    if (sinceTimeNs === undefined) bad(`--since-time ${flags.sinceTime}: expected RFC 3339, e.g. 2026-01-02T15:04:05Z`);
  }
  if (flags.output !== undefined && flags.output !== 'json') bad(`-o ${flags.output}: only json is supported`);
  const cronJob = parseCronJobRef(ref);
  if (flags.run !== undefined && cronJob === undefined) bad('--run chooses a run of a CronJob: give cronjob/NAME');
  if (flags.run !== undefined && !(/^[1-9][0-9]{0,5}$/.test(flags.run) || (/[^0-9]/.test(flags.run) && /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(flags.run)))) bad(`--run ${flags.run}: expected a run number (1 is the newest) or a Job's name`);
  return {
    job: cronJob ?? parseJobRef(ref),
    cronJob: cronJob !== undefined,
    run: flags.run,
    namespace: flags.namespace,
    container: flags.container,
    allContainers: flags.allContainers ?? false,
    sinceMs: flags.since !== undefined ? parseDuration(flags.since) : undefined,
    sinceTimeNs,
    tail: flags.tail !== undefined ? wholeNumber('--tail', flags.tail, -1) : -1,
    timestamps: flags.timestamps ?? false,
    prefix: flags.prefix ?? false,
    previous: flags.previous ?? false,
    pod: flags.pod,
    output: flags.output === 'json' ? 'json' : 'text',
    explain: flags.explain ?? false,
    kubeconfig: flags.kubeconfig,
    context: flags.context,
    chartNamespace: flags.chartNamespace,
    release: flags.release,
    queryEndpoint: flags.queryEndpoint !== undefined ? httpUrl('--query-endpoint', flags.queryEndpoint) : undefined,
    queryType: queryType as QueryType | undefined,
    esIndex: flags.esIndex,
    lokiTenant: flags.lokiTenant,
    tokenFile: flags.tokenFile,
    envToken: env.JOBHARVEST_QUERY_TOKEN || undefined,
    username: flags.username,
    passwordFile: flags.passwordFile,
    caFile: flags.caFile,
    pageSize: flags.pageSize !== undefined ? wholeNumber('--page-size', flags.pageSize, 1) : DEFAULT_PAGE_SIZE,
    trustEndpoint: flags.trustEndpoint !== undefined ? httpUrl('--trust-endpoint', flags.trustEndpoint) : undefined,
    follow: flags.follow ?? false,
    followLagMs: flags.followLag !== undefined ? parseDuration(flags.followLag, '--follow-lag') : DEFAULT_FOLLOW_LAG_MS,
    pollIntervalMs: flags.pollInterval !== undefined ? parseDuration(flags.pollInterval, '--poll-interval') : DEFAULT_POLL_INTERVAL_MS,
    raw: flags.raw ?? false,
  };
}

/** Refuses options that contradict each other (kubectl's Validate). Pure. */
export function validateOptions(o: LogsOptions): LogsOptions {
  if (o.sinceMs !== undefined && o.sinceTimeNs !== undefined) bad('--since and --since-time cannot both be given');
  if (o.container !== undefined && o.allContainers) bad('--all-containers cannot be given with -c/--container');
  if (o.tokenFile !== undefined && o.username !== undefined) bad('--token-file and --username cannot both be given');
  if (o.username !== undefined && o.passwordFile === undefined) bad('--username needs --password-file');
  if (o.passwordFile !== undefined && o.username === undefined) bad('--password-file needs --username');
  if (o.follow && o.previous) bad('--follow cannot be given with --previous: that run has ended');
  if (o.pollIntervalMs <= 0) bad('--poll-interval must be more than 0');
  return o;
}

/** Flags → checked options, with no I/O. */
export function parseOptions(ref: string, flags: LogsFlags, env: NodeJS.ProcessEnv = process.env): LogsOptions {
  return validateOptions(completeOptions(ref, flags, env));
}
