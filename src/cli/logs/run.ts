import { readFileSync } from 'node:fs';
import { redactUrls } from '../../contract/redact.ts';
import { ERROR_CODES, JobharvestError } from '../../core/errors.ts';
import type { Credentials, HttpOptions } from '../../query/http.ts';
import { VL_TENANT_HEADERS } from '../../core/tenants.ts';
import type { QueryTarget } from '../../query/resolve.ts';
import { compareLines, formatTimeNs, transient, type LogLine, type LogQuery, type QueryClient } from '../../query/types.ts';
import { readCluster, type ClusterView, type JobState } from './cluster.ts';
import { parseOptions, type LogsFlags, type LogsOptions } from './options.ts';
import { credentialLabel, plan, type CredentialPlan, type Plan } from './resolve.ts';
import { chooseRun, formatRuns, mergeRuns, runPattern } from './runs.ts';
import { applyPolicy, controlPolicy, escapeJsonControls, isTerminal, type ControlPolicy } from '../terminal.ts';

function bad(msg: string): never {
  throw new JobharvestError(ERROR_CODES.BAD_INPUT, msg);
}

function readSecretFile(path: string, flag: string): string {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch (e) {
    bad(`${flag} ${path}: ${(e as NodeJS.ErrnoException).code ?? String(e)}`);
  }
}

/** Reads the credentials the plan allows, and only those. */
export async function loadCredentials(p: CredentialPlan, o: Pick<LogsOptions, 'envToken'>, view: Pick<ClusterView, 'secret'>): Promise<{ creds: Credentials | undefined; from: string; warnings: string[] }> {
  switch (p.kind) {
    case 'none':
      return { creds: undefined, from: credentialLabel(p), warnings: [] };
    case 'token-file':
      return { creds: { token: readSecretFile(p.path, '--token-file') }, from: credentialLabel(p), warnings: [] };
    case 'env':
      return { creds: { token: o.envToken! }, from: credentialLabel(p), warnings: [] };
    case 'basic':
      return { creds: { username: p.username, password: readSecretFile(p.passwordFile, '--password-file') }, from: credentialLabel(p), warnings: [] };
    case 'secret': {
      const data = await view.secret(p.name);
      if (data && (data.token || (data.username !== undefined && data.password !== undefined))) {
        return { creds: data.token ? { token: data.token } : { username: data.username, password: data.password }, from: `Secret ${p.namespace}/${p.name} (${data.token ? 'token' : 'username, password'})`, warnings: [] };
      }
      return { creds: undefined, from: 'none', warnings: [`Secret ${p.namespace}/${p.name} could not be read or holds no token or username/password; querying without credentials`] };
    }
  }
}

/** `jobPattern`: the client is for listing the Jobs of that name pattern (a CronJob's runs), not one Job's lines. */
export async function makeClient(t: QueryTarget, creds: Credentials | undefined, ca: string | undefined, q: LogQuery, jobPattern?: string): Promise<QueryClient> {
  let http: HttpOptions = { ...(creds ? { credentials: creds } : {}), ...(ca ? { ca } : {}) };
  if (t.type === 'victorialogs') {
    if (t.vlTenant) http = { ...http, headers: { [VL_TENANT_HEADERS.accountID]: String(t.vlTenant.accountID), [VL_TENANT_HEADERS.projectID]: String(t.vlTenant.projectID) } };
    const { VictoriaLogsClient, FIELD_MAPS, detectFields } = await import('../../query/victorialogs.ts');
    return new VictoriaLogsClient(t.endpoint, FIELD_MAPS[await detectFields(t.endpoint, q, t.fields, http, jobPattern)], http);
  }
  if (t.type === 'loki') {
    const { LokiClient } = await import('../../query/loki.ts');
    return new LokiClient(t.endpoint, http, t.tenant);
  }
  const { ElasticsearchClient } = await import('../../query/elasticsearch.ts');
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

/**
 * One log line as printed. `controls: 'escape'` (stdout is a terminal, no
 * --raw) prints the control characters of the message and of the pod and
 * container names as visible escapes: all three come from the log server,
 * which holds what a tenant's program wrote. -o json escapes them always, as
 * JSON escapes that decode to the same text.
 */
export function formatLine(l: LogLine, ctx: { namespace: string; job: string }, o: { output?: string; timestamps?: boolean; prefix?: boolean; controls?: ControlPolicy }): string {
  if (o.output === 'json') {
    return escapeJsonControls(JSON.stringify({ time: formatTimeNs(l.ns), namespace: ctx.namespace, job: ctx.job, pod: l.pod, container: l.container, restart: l.restart, stream: l.stream, message: l.message })) + '\n';
  }
  const policy = o.controls ?? 'keep';
  const head = applyPolicy(policy, `${o.prefix ? `[pod/${l.pod}/${l.container}] ` : ''}${o.timestamps ? `${formatTimeNs(l.ns)} ` : ''}`);
  // A joined record (a stack trace, say) is printed as the lines it was written as, each with the head, as kubectl logs shows them.
  if (!l.message.includes('\n')) return `${head}${applyPolicy(policy, l.message)}\n`;
  let out = '';
  for (const line of l.message.split('\n')) out += `${head}${applyPolicy(policy, line)}\n`;
  return out;
}

// Clock skew between the API server and the node that stamped the CRI lines.
const CREATION_SLACK_MS = 60_000;

/** The query for the options and the resolution. Pure. */
export function buildQuery(o: Pick<LogsOptions, 'sinceMs' | 'sinceTimeNs' | 'pod'>, r: Pick<Plan, 'namespace' | 'job' | 'containers' | 'jobCreatedMs'>, nowMs: number): LogQuery {
  let fromNs: bigint | undefined;
  if (o.sinceMs !== undefined) fromNs = BigInt(Math.round(nowMs - o.sinceMs)) * 1_000_000n;
  if (o.sinceTimeNs !== undefined) fromNs = o.sinceTimeNs;
  // Records carry the Job's name, not its uid: while the Job exists, its
  // creation time keeps an earlier Job of the same name out.
  if (r.jobCreatedMs !== undefined) {
    const created = BigInt(r.jobCreatedMs - CREATION_SLACK_MS) * 1_000_000n;
    if (fromNs === undefined || fromNs < created) fromNs = created;
  }
  return { namespace: r.namespace, job: r.job, ...(o.pod ? { pod: o.pod } : {}), ...(r.containers ? { containers: r.containers } : {}), ...(fromNs !== undefined ? { fromNs } : {}) };
}

/**
 * The lines to print, in CRI order. --previous needs each container's latest
 * restart first, so it reads the lines twice rather than holding them.
 */
export async function* selectLines(client: QueryClient, q: LogQuery, o: Pick<LogsOptions, 'previous' | 'tail' | 'pageSize'>): AsyncIterable<LogLine> {
  let keep: (l: LogLine) => boolean = () => true;
  if (o.previous) {
    const latest = new Map<string, number>();
    for await (const l of client.lines(q, o.pageSize)) {
      const k = `${l.pod}\0${l.container}`;
      if ((latest.get(k) ?? -1) < l.restart) latest.set(k, l.restart);
    }
    if (![...latest.values()].some((n) => n > 0)) bad('previous terminated container not found: no container of this Job restarted');
    keep = (l) => l.restart === (latest.get(`${l.pod}\0${l.container}`) ?? 0) - 1;
  }
  const tail = o.tail;
  if (tail === -1) {
    for await (const l of client.lines(q, o.pageSize)) if (keep(l)) yield l;
    return;
  }
  // A ring of the last N: memory is bounded by what the user asked to see.
  const ring: LogLine[] = [];
  let at = 0;
  if (tail === 0) return;
  for await (const l of client.lines(q, o.pageSize)) {
    if (!keep(l)) continue;
    if (ring.length < tail) ring.push(l);
    else ring[at] = l;
    at = (at + 1) % tail;
  }
  yield* ring.length < tail ? ring : [...ring.slice(at), ...ring.slice(0, at)];
}

/** How --follow waits and tells the time; a test may run it on its own clock. */
export interface FollowClock {
  nowMs: () => number;
  sleep: (ms: number) => Promise<void>;
}

const realClock: FollowClock = { nowMs: () => Date.now(), sleep: (ms) => new Promise((r) => setTimeout(r, ms)) };

// With --follow, how long a finished Job may go without its delivery record
// (the report is off, or cannot write) before the command ends anyway.
const FINISHED_GRACE_MS = 30_000;

// A server error that lasts this long is worth a note; shorter ones (an index being created) pass quietly.
const TRANSIENT_NOTE_MS = 10_000;

/**
 * --follow: the lines already there (as selectLines gives them, --tail
 * included), then the lines after the last one printed as they arrive: through
 * the server's live tail where the client has one, else by polling up to
 * `followLagMs` ago, so that lines of other pods still in flight are not
 * overtaken. The cursor is the last printed line (timestamp and record id).
 * Every read reaches back one lag before it, and the lines printed in that
 * window are remembered by record id: a line that became visible late (a busy
 * server) is still printed, once, where it would otherwise be lost. Once the
 * Job is delivered or gone (or finished for long), one last read after the lag
 * takes the rest, and the stream ends.
 */
export async function* followLines(client: QueryClient, q: LogQuery, o: Pick<LogsOptions, 'tail' | 'pageSize' | 'followLagMs' | 'pollIntervalMs' | 'previous'>, jobState: (() => Promise<JobState>) | undefined, clock: FollowClock = realClock, onNote: (note: string) => void = () => {}): AsyncIterable<LogLine> {
  const lagNs = BigInt(o.followLagMs) * 1_000_000n;
  const upTo = () => BigInt(clock.nowMs() - o.followLagMs) * 1_000_000n;
  let last: LogLine | undefined;
  // Record ids printed within one lag of the last line: memory bounded by the lag, not the Job.
  const printed = new Map<string, bigint>();
  const keyOf = (l: LogLine) => `${l.ns}\0${l.id}`;
  // With --tail, the lines before the first read's last one were left out on purpose.
  let floor: LogLine | undefined;
  const take = (l: LogLine): boolean => {
    const k = keyOf(l);
    if (printed.has(k) || (floor && compareLines(l, floor) <= 0)) return false;
    if (last && l.ns < last.ns - lagNs) return false;
    printed.set(k, l.ns);
    if (!last || compareLines(l, last) > 0) last = l;
    if (printed.size > 4096 && printed.size % 1024 === 0) for (const [key, ns] of printed) if (ns < last.ns - lagNs) printed.delete(key);
    return true;
  };
  const since = (): LogQuery => {
    const from = last ? last.ns - lagNs : q.fromNs;
    return { ...q, ...(from !== undefined ? { fromNs: q.fromNs !== undefined && q.fromNs > from ? q.fromNs : from } : {}) };
  };
  let failingSince: number | undefined;
  const failed = (e: unknown, end: boolean) => {
    // A server still starting (an index being created) answers 503 for a moment: the reads go on.
    if (end || !transient(e)) throw e;
    failingSince ??= clock.nowMs();
    if (clock.nowMs() - failingSince >= TRANSIENT_NOTE_MS) {
      onNote(`${(e as Error).message}; trying again`);
      failingSince = clock.nowMs();
    }
  };

  let state: JobState = jobState ? await jobState() : 'unknown';
  if (state === 'unknown') onNote('the Job cannot be read, so when it ends is unknown: stop with Ctrl-C');
  let finishedAt: number | undefined;
  let end = state === 'delivered' || state === 'gone';
  const first = end ? q : { ...q, toNs: upTo() };
  try {
    for await (const l of selectLines(client, first, o)) if (take(l)) yield l;
    failingSince = undefined;
  } catch (e) {
    failed(e, end);
  }
  if (o.tail >= 0) floor = last;
  const isDone = async (): Promise<boolean> => {
    state = jobState ? await jobState() : 'unknown';
    if (state === 'finished') finishedAt ??= clock.nowMs();
    if (state === 'delivered' || state === 'gone' || (finishedAt !== undefined && clock.nowMs() - finishedAt >= FINISHED_GRACE_MS)) {
      if (state === 'finished') onNote(`the Job finished ${FINISHED_GRACE_MS / 1000}s ago without a delivery record; reading what is there and stopping`);
      return true;
    }
    return false;
  };

  // The server's live tail where it has one; polling after the cursor otherwise, or if the tail fails.
  if (!end && client.tail) {
    const ac = new AbortController();
    const it = client.tail(q, { fromNs: since().fromNs ?? BigInt(clock.nowMs() - 3_600_000) * 1_000_000n, lagMs: o.followLagMs, refreshMs: o.pollIntervalMs, nowMs: clock.nowMs(), signal: ac.signal })[Symbol.asyncIterator]();
    type Pulled = { kind: 'line'; line: LogLine } | { kind: 'end' } | { kind: 'error'; error: unknown } | { kind: 'tick' };
    const ticker = (): Promise<Pulled> => clock.sleep(o.pollIntervalMs).then(() => ({ kind: 'tick' }));
    const pull = (): Promise<Pulled> =>
      it.next().then(
        (r): Pulled => (r.done ? { kind: 'end' } : { kind: 'line', line: r.value }),
        (e: unknown): Pulled => (ac.signal.aborted ? { kind: 'end' } : { kind: 'error', error: e }),
      );
    let tick = ticker();
    let next = pull();
    try {
      for (;;) {
        const r = await Promise.race([tick, next]);
        if (r.kind === 'tick') {
          if (await isDone()) {
            end = true;
            break;
          }
          tick = ticker();
          continue;
        }
        if (r.kind === 'error') {
          onNote(`the live tail failed (${(r.error as Error).message}); polling instead`);
          break;
        }
        if (r.kind === 'end') break;
        next = pull();
        if (take(r.line)) yield r.line;
      }
    } finally {
      // Also when the reader stops early (a closed pipe): the tail request must not keep the process alive.
      ac.abort();
    }
    if (end) await clock.sleep(o.followLagMs);
  }

  while (!end) {
    await clock.sleep(o.pollIntervalMs);
    if (await isDone()) {
      // The last lines were acknowledged by the server before the record was written; give it the lag to show them.
      await clock.sleep(o.followLagMs);
      end = true;
    }
    const poll: LogQuery = { ...since(), ...(end ? {} : { toNs: upTo() }) };
    if (!end && poll.fromNs !== undefined && poll.toNs !== undefined && poll.toNs <= poll.fromNs) continue;
    try {
      for await (const l of client.lines(poll, o.pageSize)) if (take(l)) yield l;
      failingSince = undefined;
    } catch (e) {
      failed(e, end);
    }
  }
  // Once the Job is done: what arrived after the tail stopped.
  if (end && client.tail) {
    for await (const l of client.lines(since(), o.pageSize)) if (take(l)) yield l;
  }
}

/** --explain's text. Pure: names where every setting and the credentials come from, never a credential. */
export function explainText(p: Plan, q: LogQuery, warnings: string[]): string {
  const lines = [`job/${p.job} in namespace ${p.namespace}`, ...p.sources.map((s) => `  ${s}`)];
  if (typeof p.target === 'string') lines.push(`  query: none: ${p.target}`);
  else lines.push(`  query: ${p.target.type} at ${redactUrls(p.target.endpoint)} (${p.target.how})${p.target.type === 'victorialogs' ? `, fields of the ${p.target.fields} writer` : ''}${p.target.type === 'elasticsearch' ? `, index ${p.target.index}` : ''}`);
  lines.push(`  containers: ${p.containerNote}`);
  if (q.fromNs !== undefined) lines.push(`  from: ${formatTimeNs(q.fromNs)}${p.jobCreatedMs !== undefined ? " (the Job's creation, less a minute, or a later --since)" : ''}`);
  lines.push(`  credentials: ${credentialLabel(p.credentials)}`);
  for (const w of warnings) lines.push(`  warning: ${w}`);
  return lines.join('\n') + '\n';
}

/**
 * `jobharvest logs`: the options are parsed and checked in full first (no
 * I/O), then the cluster is read, then the pure resolution decides what to
 * query and which credentials may go there, then the lines are printed.
 */
export async function runLogs(ref: string, flags: LogsFlags, out: NodeJS.WritableStream = process.stdout, err: NodeJS.WritableStream = process.stderr, cluster?: ClusterView): Promise<number> {
  const o = parseOptions(ref, flags);
  const view = cluster ?? (await readCluster(o));
  const p = plan(o, view);
  const q = buildQuery(o, p, Date.now());
  // Lines follow --raw; the command's own text (which quotes annotations, a
  // server's error, names the log server lists) is escaped on a terminal always.
  const lineControls = controlPolicy(isTerminal(out), o.raw);
  const say = (s: string) => out.write(applyPolicy(controlPolicy(isTerminal(out)), s));
  const warn = (s: string) => err.write(applyPolicy(controlPolicy(isTerminal(err)), s));
  if (o.explain) {
    say(explainText(p, q, [...p.warnings, ...p.explainWarnings]));
    return 0;
  }
  const creds = await loadCredentials(p.credentials, o, view);
  for (const w of [...p.warnings, ...creds.warnings]) warn(`warning: ${w}\n`);
  if (typeof p.target === 'string') {
    warn(`jobharvest logs: cannot query: ${p.target}\n`);
    return 2;
  }
  const ca = o.caFile ? readSecretFile(o.caFile, '--ca-file') : undefined;
  const client = await makeClient(p.target, creds.creds, ca, q, o.cronJob ? runPattern(o.job) : undefined);
  if (o.cronJob) {
    let note: string | undefined;
    const onServer = client.jobs ? await client.jobs(p.namespace, runPattern(o.job)) : [];
    if (!client.jobs) note = `${client.kind} lists no Jobs here: only the runs whose Jobs still exist are shown`;
    const runs = mergeRuns(o.job, view.cronJobRuns ?? [], onServer);
    if (o.run === undefined) {
      say(formatRuns(o.job, runs, note));
      return 0;
    }
    const chosen = chooseRun(runs, o.run);
    return runLogs(`job/${chosen.job}`, { ...flags, run: undefined, namespace: p.namespace }, out, err, cluster === undefined ? undefined : { ...cluster, jobFound: 'gone', job: undefined });
  }
  const w = new Out(out);
  let n = 0;
  const lines = o.follow ? followLines(client, q, o, view.jobState, realClock, (note) => warn(`jobharvest logs: ${note}\n`)) : selectLines(client, q, o);
  for await (const l of lines) {
    if (w.closed) break;
    await w.write(formatLine(l, p, { ...o, controls: lineControls }));
    n++;
  }
  if (n === 0 && p.jobFound !== 'exists') warn(`jobharvest logs: no lines found for job/${p.job} in namespace ${p.namespace} at ${redactUrls(p.target.endpoint)}\n`);
  return 0;
}
