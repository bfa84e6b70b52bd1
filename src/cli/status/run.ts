/**
 * `jobharvest status`: Complete and Validate (options.ts), then read the
 * cluster (cluster.ts) and print the rows (rows.ts).
 */
import { ERROR_CODES, JobharvestError } from '../../core/errors.ts';
import type { SigningKey } from '../../contract/signature.ts';
import { applyPolicy, controlPolicy, isTerminal } from '../terminal.ts';
import type { StatusApi, WatchEvent } from './cluster.ts';
import { parseStatusOptions, type StatusFlags, type StatusOptions } from './options.ts';
import { columnWidths, cronJobRuns, exitCodeOf, renderJson, renderTable, renderYaml, statusRow, tableCells, type JobLike, type StatusRow } from './rows.ts';

export interface Listed {
  rows: StatusRow[];
  /** Where a watch starts from. */
  resourceVersion: string | undefined;
  /** The CronJob's uid, when one was named and could be read. */
  cronJobUid?: string;
}

const createdMs = (j: JobLike) => (j.metadata?.creationTimestamp ? new Date(j.metadata.creationTimestamp).getTime() : 0);

/** What the target lists: which namespace, which selectors. */
function scope(api: StatusApi, o: StatusOptions): { namespace: string | undefined; selector: string | undefined; fieldSelector?: string } {
  const namespace = o.allNamespaces ? undefined : (o.namespace ?? api.namespace);
  if (o.target.kind === 'job') return { namespace, selector: undefined, fieldSelector: `metadata.name=${o.target.name}` };
  return { namespace, selector: o.selector };
}

/**
 * The rows of every Job the options name, a page at a time. A CronJob's runs
 * are picked from each page of its namespace's Jobs (its controller reference
 * names it), newest first.
 */
export async function listRows(api: StatusApi, o: StatusOptions, keys: readonly SigningKey[] | undefined): Promise<Listed> {
  const where = scope(api, o);
  if (o.target.kind === 'job') {
    const job = await api.readJob(where.namespace!, o.target.name);
    if (!job) throw new JobharvestError(ERROR_CODES.BAD_INPUT, `jobs.batch "${o.target.name}" not found in namespace ${where.namespace}`);
    return { rows: [statusRow(job, keys)], resourceVersion: (job.metadata as { resourceVersion?: string } | undefined)?.resourceVersion };
  }
  const cron = o.target.kind === 'cronjob' ? { name: o.target.name, uid: await api.cronJobUid(where.namespace!, o.target.name) } : undefined;
  // A run keeps its row and its creation time only, not its Job object.
  const runs: Array<{ created: number; name: string; row: StatusRow }> = [];
  const rows: StatusRow[] = [];
  let cont: string | undefined;
  let resourceVersion: string | undefined;
  do {
    const page = await api.listJobs({ ...where, limit: o.pageSize, continue: cont });
    if (cron) runs.push(...cronJobRuns(page.items, cron).map((j) => ({ created: createdMs(j), name: j.metadata?.name ?? '', row: statusRow(j, keys) })));
    else for (const j of page.items) rows.push(statusRow(j, keys));
    cont = page.continue;
    resourceVersion = page.resourceVersion;
  } while (cont);
  if (cron) rows.push(...runs.sort((a, b) => b.created - a.created || a.name.localeCompare(b.name)).map((r) => r.row));
  return { rows, resourceVersion, ...(cron?.uid ? { cronJobUid: cron.uid } : {}) };
}

/** Whether a watched Job is one the options list (a CronJob's runs are filtered here; the API cannot). */
export function watched(job: JobLike, o: StatusOptions, cronJobUid: string | undefined): boolean {
  if (o.target.kind !== 'cronjob') return true;
  return cronJobRuns([job], { name: o.target.name, uid: cronJobUid }).length === 1;
}

export interface StatusIo {
  out: NodeJS.WritableStream;
  err: NodeJS.WritableStream;
  /** Stops a --watch (SIGINT); absent: never stopped but by the process ending. */
  signal?: AbortSignal;
}

/** Runs the command; returns the exit code: 1 when a listed Job lost lines. */
export async function runStatusWith(api: StatusApi, o: StatusOptions, io: StatusIo): Promise<number> {
  const { keys, note } = await api.signingKeys();
  const listed = await listRows(api, o, keys);
  const controls = controlPolicy(isTerminal(io.out), o.raw);
  const table = { allNamespaces: o.allNamespaces, wide: o.output === 'wide', controls };
  const print = (rows: StatusRow[], first: boolean, widths?: number[]): void => {
    if (o.output === 'json') io.out.write(o.watch && !first ? renderJson(rows).replace(/\n\s*/g, '') + '\n' : renderJson(rows));
    else if (o.output === 'yaml') io.out.write(`${first ? '' : '---\n'}${renderYaml(rows)}`);
    else io.out.write(renderTable(rows, { ...table, header: first, ...(widths ? { widths } : {}) }));
  };
  if (listed.rows.length === 0 && (o.output === 'table' || o.output === 'wide')) {
    io.err.write(o.allNamespaces ? 'No Jobs found.\n' : `No Jobs found in ${o.namespace ?? api.namespace} namespace.\n`);
  } else print(listed.rows, true);
  if (keys === undefined && listed.rows.some((r) => r.record !== 'none')) {
    io.err.write(`records unverified: ${applyPolicy(controlPolicy(isTerminal(io.err)), note)}\n`);
  }
  if (!o.watch) return exitCodeOf(listed.rows);
  const widths = columnWidths(tableCells(listed.rows, table));
  await watchRows(api, o, keys, listed, (row) => print([row], false, widths), io.signal ?? new AbortController().signal);
  return exitCodeOf(listed.rows);
}

/**
 * --watch: a row for each change after the list, as `kubectl get -w` prints
 * them. The watch resumes from the last resourceVersion seen; a version the
 * server no longer has (410) lists again, quietly, and watches on from there.
 */
async function watchRows(api: StatusApi, o: StatusOptions, keys: readonly SigningKey[] | undefined, listed: Listed, emit: (row: StatusRow) => void, signal: AbortSignal): Promise<void> {
  let rv = listed.resourceVersion;
  const where = scope(api, o);
  while (!signal.aborted) {
    try {
      await api.watchJobs({ ...where, resourceVersion: rv }, (e: WatchEvent) => {
        if (e.type === 'BOOKMARK') {
          rv = e.resourceVersion ?? rv;
          return;
        }
        rv = (e.job.metadata as { resourceVersion?: string } | undefined)?.resourceVersion ?? rv;
        if (watched(e.job, o, listed.cronJobUid)) emit(statusRow(e.job, keys));
      }, signal);
    } catch (e) {
      if (signal.aborted) return;
      if ((e as { code?: number }).code !== 410) throw e;
      rv = (await listRows(api, o, keys)).resourceVersion;
    }
  }
}

export async function runStatus(ref: string | undefined, flags: StatusFlags): Promise<number> {
  const o = parseStatusOptions(ref, flags);
  const { connect } = await import('./cluster.ts');
  const api = await connect(o);
  const ac = new AbortController();
  if (o.watch) process.once('SIGINT', () => ac.abort());
  return runStatusWith(api, o, { out: process.stdout, err: process.stderr, signal: ac.signal });
}
