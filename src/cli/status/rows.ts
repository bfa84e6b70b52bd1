/**
 * `jobharvest status`, the pure part: one row per Job from the Job object
 * alone (its annotations carry everything: the injection status, the
 * delivery record, the hold, the logs link), so the command reads no pod.
 * Every annotation is the tenant's to write: a count is shown only as the
 * record says it, and the RECORD column says whether jobharvest's harvester
 * signed it, checked with the signing key, never assumed.
 */
import { Document, visit, type Scalar } from 'yaml';
import { DELIVERY_ANNOTATION, HOLD_ANNOTATION, LOGS_URL_ANNOTATION, parseDelivery, STATUS_ANNOTATION, type DeliveryRecord, type DeliveryUsage } from '../../contract/harvest.ts';
import { checkSignedJson, keyId, PURPOSE, signatureKeyId, type SigningKey } from '../../contract/signature.ts';
import { applyPolicy, escapeJsonControls, type ControlPolicy } from '../terminal.ts';

/** The parts of a Job the status reads: a list call's items, as the API returns them. */
export interface JobLike {
  metadata?: {
    name?: string;
    namespace?: string;
    uid?: string;
    creationTimestamp?: Date | string;
    annotations?: Record<string, string>;
    ownerReferences?: Array<{ apiVersion: string; kind: string; name: string; uid: string; controller?: boolean }>;
  };
  spec?: { ttlSecondsAfterFinished?: number };
  status?: { conditions?: Array<{ type: string; status: string }>; active?: number; succeeded?: number; failed?: number };
}

/**
 * What the delivery record's signature says:
 * - `verified`: its MAC checks with a signing key read from the release;
 * - `unverified`: no key could be read (no right to the Secret, no release
 *   found), so nothing was checked;
 * - `other-key`: it names a key id none of the keys read has (a key rotated
 *   or re-created since, or a forgery naming an id): not checked;
 * - `invalid`: a key was read and the record is not signed with it for this
 *   Job (forged, altered, copied from another Job), or it is not a record;
 * - `none`: no record (yet).
 */
export type RecordState = 'verified' | 'unverified' | 'other-key' | 'invalid' | 'none';

/** Where the Job's TTL stands. */
export type TtlState =
  /** The harvester raised it to ship what a sidecar could not (jobharvest.io/hold). */
  | 'held'
  /** Held, then put back by the harvester once the lines were shipped (the record counts harvested lines). */
  | 'released'
  /** Left to the controller that owns the Job (a JobSet's child): jobharvest set none. */
  | 'owner'
  /** As the Job says, never held. */
  | 'set'
  /** No TTL. */
  | 'none';

export interface StatusRow {
  namespace: string;
  name: string;
  uid: string | undefined;
  /** running, complete, failed or suspended. */
  phase: string;
  /** The version of jobharvest that injected the sidecar; undefined: not injected. */
  injected: string | undefined;
  sink: string | undefined;
  record: RecordState;
  /** The key id the record's signature names, when it names one none of the keys read has. */
  recordKeyId?: string;
  shipped: number | undefined;
  harvested: number | undefined;
  lost: number | undefined;
  unaccounted: number | undefined;
  ttl: { state: TtlState; seconds: number | undefined; owner?: string };
  logs: string | undefined;
  usage?: DeliveryUsage;
  notes?: readonly string[];
}

type Obj = Record<string, unknown>;

function json(text: string | undefined): Obj | undefined {
  if (!text) return undefined;
  try {
    const v = JSON.parse(text) as unknown;
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Obj) : undefined;
  } catch {
    return undefined;
  }
}

export function phaseOf(job: JobLike): string {
  const c = job.status?.conditions ?? [];
  const on = (t: string) => c.some((x) => x.type === t && x.status === 'True');
  if (on('Complete')) return 'complete';
  if (on('Failed')) return 'failed';
  if (on('Suspended')) return 'suspended';
  return 'running';
}

/**
 * The record and what its signature says. `keys` undefined: none could be
 * read, so nothing is checked. With keys, the first that verifies wins; a
 * record no key verifies reads `other-key` when its signature names a key id
 * none of them has, `invalid` otherwise.
 */
export function checkRecord(job: JobLike, keys: readonly SigningKey[] | undefined): { state: RecordState; delivery?: DeliveryRecord; keyId?: string } {
  const text = job.metadata?.annotations?.[DELIVERY_ANNOTATION];
  if (text === undefined) return { state: 'none' };
  const parsed = json(text);
  const delivery = parsed ? parseDelivery((({ sig: _sig, ...rest }) => rest)(parsed)) : undefined;
  if (!delivery) return { state: 'invalid' };
  if (keys === undefined || keys.length === 0) return { state: 'unverified', delivery };
  for (const key of keys) {
    const r = checkSignedJson(key, PURPOSE.delivery, job.metadata?.uid, text);
    if (r.value !== undefined && r.check.ok) return { state: 'verified', delivery };
  }
  const named = signatureKeyId(parsed!.sig);
  if (named !== undefined && !keys.some((k) => keyId(k) === named)) return { state: 'other-key', delivery, keyId: named };
  return { state: 'invalid', delivery };
}

/** The TTL and who holds it, from the Job, its status annotation, its hold and its record. */
export function ttlOf(job: JobLike, delivery: DeliveryRecord | undefined): StatusRow['ttl'] {
  const seconds = job.spec?.ttlSecondsAfterFinished ?? undefined;
  const ann = job.metadata?.annotations ?? {};
  const leftTo = json(ann[STATUS_ANNOTATION])?.ttlLeftTo;
  if (typeof leftTo === 'string' && leftTo !== '') return { state: 'owner', seconds, owner: leftTo };
  if (ann[HOLD_ANNOTATION] !== undefined) return { state: 'held', seconds };
  if (delivery?.harvested !== undefined && seconds !== undefined) return { state: 'released', seconds };
  return { state: seconds === undefined ? 'none' : 'set', seconds };
}

export function statusRow(job: JobLike, keys: readonly SigningKey[] | undefined): StatusRow {
  const ann = job.metadata?.annotations ?? {};
  const status = json(ann[STATUS_ANNOTATION]);
  const { state, delivery, keyId: named } = checkRecord(job, keys);
  const injected = status && typeof status.version === 'string' ? status.version : undefined;
  const statusSink = status && typeof status.sink === 'string' ? status.sink : undefined;
  return {
    namespace: job.metadata?.namespace ?? '',
    name: job.metadata?.name ?? '',
    uid: job.metadata?.uid,
    phase: phaseOf(job),
    injected,
    sink: delivery?.sink ?? statusSink,
    record: state,
    ...(named !== undefined ? { recordKeyId: named } : {}),
    shipped: delivery?.shipped,
    harvested: delivery ? (delivery.harvested ?? 0) : undefined,
    lost: delivery?.lost,
    unaccounted: delivery?.unaccounted,
    ttl: ttlOf(job, delivery),
    logs: ann[LOGS_URL_ANNOTATION],
    ...(delivery?.usage ? { usage: delivery.usage } : {}),
    ...(delivery?.notes?.length ? { notes: delivery.notes } : {}),
  };
}

/**
 * The Jobs a CronJob created, newest first: those its controller reference
 * names (by uid when the CronJob could be read, else by name), whatever the
 * Jobs are called.
 */
export function cronJobRuns<T extends JobLike>(jobs: readonly T[], cronJob: { name: string; uid?: string | undefined }): T[] {
  const mine = jobs.filter((j) =>
    (j.metadata?.ownerReferences ?? []).some((r) => r.controller === true && r.kind === 'CronJob' && r.apiVersion.startsWith('batch/') && r.name === cronJob.name && (cronJob.uid === undefined || r.uid === cronJob.uid)),
  );
  const created = (j: JobLike) => (j.metadata?.creationTimestamp ? new Date(j.metadata.creationTimestamp).getTime() : 0);
  return mine.sort((a, b) => created(b) - created(a) || (a.metadata?.name ?? '').localeCompare(b.metadata?.name ?? ''));
}

/** 1 when a listed Job's record says lines were lost, for scripts; else 0. */
export function exitCodeOf(rows: readonly StatusRow[]): number {
  return rows.some((r) => (r.lost ?? 0) > 0) ? 1 : 0;
}

const dash = (v: string | number | undefined) => (v === undefined ? '-' : String(v));

function ttlCell(t: StatusRow['ttl']): string {
  const s = t.seconds === undefined ? '' : `${t.seconds}s`;
  if (t.state === 'owner') return `owner ${t.owner}`;
  if (t.state === 'held' || t.state === 'released') return `${t.state}${s ? ` ${s}` : ''}`;
  return s || '<none>';
}

function recordCell(r: StatusRow): string {
  if (r.record === 'none') return r.phase === 'running' || r.injected === undefined ? '-' : 'pending';
  return r.record === 'other-key' ? `other-key ${r.recordKeyId}` : r.record;
}

export interface TableOptions {
  allNamespaces: boolean;
  wide: boolean;
  controls: ControlPolicy;
  /** Print the header row (not for the rows a watch adds). */
  header?: boolean;
  /** Column widths to keep (a watch's later rows line up with the first table). */
  widths?: number[];
}

/** The table columns, kubectl's way: upper-case headers, two spaces apart, `-` for nothing. */
export function tableCells(rows: readonly StatusRow[], o: Pick<TableOptions, 'allNamespaces' | 'wide' | 'controls'>): string[][] {
  const head = [...(o.allNamespaces ? ['NAMESPACE'] : []), 'NAME', 'INJECTED', 'SINK', 'SHIPPED', 'HARVESTED', 'LOST', 'RECORD', 'TTL', ...(o.wide ? ['STATUS', 'UNACCOUNTED', 'CPU', 'MEMORY', 'RUN'] : []), 'LOGS'];
  const out = [head];
  for (const r of rows) {
    const u = r.usage;
    out.push(
      [
        ...(o.allNamespaces ? [r.namespace] : []),
        r.name,
        r.injected ?? 'no',
        dash(r.sink),
        dash(r.shipped),
        dash(r.harvested),
        dash(r.lost),
        recordCell(r),
        ttlCell(r.ttl),
        ...(o.wide ? [r.phase, dash(r.unaccounted), u ? `${u.cpu_request_millicores}m` : '-', u ? `${Math.ceil(u.memory_request_bytes / 2 ** 20)}Mi` : '-', u ? `${u.run_seconds}s` : '-'] : []),
        dash(r.logs),
        // Every cell may hold a tenant's text (annotations): escaped on a terminal, one line each.
      ].map((c) => applyPolicy(o.controls, c).replace(/\n/g, '\\n')),
    );
  }
  return out;
}

export function columnWidths(cells: readonly string[][]): number[] {
  return cells[0]!.map((_, c) => Math.max(...cells.map((row) => row[c]!.length)));
}

export function renderTable(rows: readonly StatusRow[], o: TableOptions): string {
  const cells = tableCells(rows, o);
  const widths = o.widths ?? columnWidths(cells);
  const shown = o.header === false ? cells.slice(1) : cells;
  return shown.map((row) => row.map((cell, c) => (c === row.length - 1 ? cell : cell.padEnd(widths[c]!))).join('  ') + '\n').join('');
}

/** -o json: one object, kubectl's List shape, each item a row; C1 controls escaped as JSON escapes too. */
export function renderJson(rows: readonly StatusRow[]): string {
  return escapeJsonControls(JSON.stringify({ kind: 'List', items: rows }, null, 2)) + '\n';
}

/**
 * -o yaml. The YAML library double-quotes strings with C0 controls and
 * escapes them, but writes C1 controls (U+009B is CSI) as they are: strings
 * holding one are double-quoted here and the character written as `\u00HH`,
 * which a YAML reader decodes to the same text.
 */
export function renderYaml(rows: readonly StatusRow[]): string {
  // Through JSON first, so absent fields are left out as -o json leaves them, not written as null.
  const doc = new Document(JSON.parse(JSON.stringify({ kind: 'List', items: rows })) as unknown);
  visit(doc, {
    Scalar(_key, node: Scalar) {
      if (typeof node.value === 'string' && /[\x7f-\x9f]/.test(node.value)) node.type = 'QUOTE_DOUBLE';
    },
  });
  return doc.toString().replace(/[\x7f-\x9f]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}
