/**
 * `jobharvest logs` / `kubectl jobharvest logs`, in kubectl's shape:
 * - options (logs/options.ts): every flag parsed and checked, no I/O;
 * - the cluster (logs/cluster.ts): the Job, its namespace, the chart's ConfigMap;
 * - resolution (logs/resolve.ts): pure; what to query, where, and which
 *   credentials may go there;
 * - run (logs/run.ts): credentials read as the plan allows, the query, the output.
 */
import type { Credentials } from '../query/http.ts';
import type { ClusterView } from './logs/cluster.ts';
import { parseOptions, type LogsFlags } from './logs/options.ts';
import { plan, type Plan } from './logs/resolve.ts';
import { loadCredentials } from './logs/run.ts';

export type { ClusterView, JobState } from './logs/cluster.ts';
export { completeOptions, parseDuration, parseJobRef, parseOptions, validateOptions, type LogsFlags, type LogsOptions } from './logs/options.ts';
export { plan, sameEndpoint, type CredentialPlan, type Plan } from './logs/resolve.ts';
export { buildQuery, explainText, followLines, formatLine, loadCredentials, makeClient, runLogs, selectLines, type FollowClock } from './logs/run.ts';

/** The resolution with its credentials read, as a run sees it. */
export interface Resolution extends Omit<Plan, 'credentials'> {
  credentials: { creds: Credentials | undefined; from: string };
}

/** Options, the pure resolution, then the credentials it allows: everything but the query. */
export async function resolve(flags: LogsFlags, job: string, view: ClusterView): Promise<Resolution> {
  const o = parseOptions(`job/${job}`, flags);
  const p = plan(o, view);
  const c = await loadCredentials(p.credentials, o, view);
  return { ...p, credentials: { creds: c.creds, from: c.from }, warnings: [...p.warnings, ...c.warnings] };
}
