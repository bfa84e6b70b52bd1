import type { SinkType } from '../contract/env.ts';
import type { QueryType } from '../core/annotations.ts';
import { type FieldPreset } from './victorialogs.ts';

/** Where a Job's lines can be read back, and which writer shaped them. */
export interface QueryTarget {
  type: QueryType;
  /** Base URL of the query API (no path of the API itself). */
  endpoint: string;
  /** VictoriaLogs: the field names the sink wrote. */
  fields: FieldPreset;
  /** elasticsearch: the index or data stream. */
  index: string;
  /** loki: X-Scope-OrgID. */
  tenant: string | undefined;
  /** victorialogs: the AccountID and ProjectID headers, where a tenant mapping sets them. */
  vlTenant?: { accountID: number; projectID: number };
  /** How it was found, for --explain. */
  how: string;
}

export interface SinkView {
  sink: SinkType;
  endpoint: string | undefined;
  esIndex: string | undefined;
  lokiTenant: string | undefined;
  /** VictoriaLogs tenant; an id left out is 0. */
  accountID?: number | undefined;
  projectID?: number | undefined;
}

export interface QueryView {
  type: QueryType | undefined;
  endpoint: string | undefined;
}

const FIELDS_OF: Partial<Record<SinkType, FieldPreset>> = { loki: 'loki', http: 'document', elasticsearch: 'document', otlp: 'otlp' };
const VL_INGEST = /\/insert\/(loki|elasticsearch|jsonline|opentelemetry)(\/.*)?$/;

/** The one line a user sees when the logs went somewhere no client here can read. */
export function notQueryable(sink: SinkType, why: string): string {
  return `the ${sink} sink ${why}: set query.endpoint and query.type (chart values), the jobharvest.io/query-endpoint and jobharvest.io/query-type annotations, or --query-endpoint and --query-type`;
}

/**
 * Decides where to query. An explicit query endpoint wins; otherwise the sink
 * endpoint itself, when it is one a query API sits on: VictoriaLogs' ingestion
 * paths (`/insert/...`), Loki's push API, Elasticsearch/OpenSearch `_bulk`.
 * Returns a string, the reason, when there is nothing to query. A VictoriaLogs
 * target carries the tenant a mapping set (its AccountID and ProjectID).
 */
export function resolveTarget(sink: SinkView, query: QueryView): QueryTarget | string {
  const t = targetOf(sink, query);
  if (typeof t === 'string' || t.type !== 'victorialogs' || (sink.accountID === undefined && sink.projectID === undefined)) return t;
  return { ...t, vlTenant: { accountID: sink.accountID ?? 0, projectID: sink.projectID ?? 0 } };
}

function targetOf(sink: SinkView, query: QueryView): QueryTarget | string {
  const fields = FIELDS_OF[sink.sink] ?? 'document';
  const index = sink.esIndex ?? 'jobharvest';
  if (query.endpoint) {
    if (!query.type) return 'a query endpoint is set without a query type (victorialogs, loki or elasticsearch)';
    return { type: query.type, endpoint: query.endpoint, fields, index, tenant: sink.lokiTenant, how: 'query endpoint' };
  }
  if (sink.sink === 'stdout') return 'the stdout sink keeps logs only in the pod: once the pod is gone there is nothing to query';
  if (!sink.endpoint) return notQueryable(sink.sink, 'has no endpoint');
  let u: URL;
  try {
    u = new URL(sink.endpoint);
  } catch {
    return notQueryable(sink.sink, 'endpoint is not a URL');
  }
  const vl = VL_INGEST.exec(u.pathname);
  if (vl && ['loki', 'http', 'elasticsearch', 'otlp'].includes(sink.sink)) {
    u.pathname = u.pathname.slice(0, vl.index);
    u.search = '';
    return { type: 'victorialogs', endpoint: trim(u), fields, index, tenant: undefined, how: `derived from the ${sink.sink} sink endpoint (VictoriaLogs ingestion path)` };
  }
  if (query.type === 'victorialogs') return { type: 'victorialogs', endpoint: trim(u), fields, index, tenant: undefined, how: `the ${sink.sink} sink endpoint, query type set` };
  if (sink.sink === 'loki') {
    u.pathname = u.pathname.replace(/\/loki\/api\/v1\/push\/?$/, '');
    return { type: 'loki', endpoint: trim(u), fields, index, tenant: sink.lokiTenant, how: 'derived from the loki sink endpoint' };
  }
  if (sink.sink === 'elasticsearch') {
    u.pathname = u.pathname.replace(/\/_bulk\/?$/, '');
    return { type: 'elasticsearch', endpoint: trim(u), fields, index, tenant: undefined, how: 'derived from the elasticsearch sink endpoint' };
  }
  return notQueryable(sink.sink, sink.sink === 'otlp' ? 'sends to an OTLP receiver, which has no query API' : `(${sink.sink}) has no query API`);
}

function trim(u: URL): string {
  return u.href.replace(/\/+$/, '');
}
