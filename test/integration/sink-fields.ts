import type { SinkType } from '../../src/contract/env.ts';
import { DOCUMENT_FIELDS, LOKI_FIELDS, OTLP_ATTRIBUTES } from '../../src/contract/record.ts';

/**
 * Where each sink's metadata lands once VictoriaLogs has ingested it. The
 * names are the sink formats' own (OpenTelemetry k8s attributes for the JSON
 * document and OTLP, Loki labels plus structured metadata for Loki), so a
 * query that finds them proves the sidecar sent them.
 */
export interface Fields {
  namespace: string;
  pod: string;
  uid: string;
  container: string;
  restart: string;
  job: string;
  node: string;
  stream: string;
  id: string;
}

const of = (m: { namespace: string; pod: string; podUid: string; container: string; restart: string; job: string; node: string; stream: string; id: string }): Fields => ({
  namespace: m.namespace,
  pod: m.pod,
  uid: m.podUid,
  container: m.container,
  restart: m.restart,
  job: m.job,
  node: m.node,
  stream: m.stream,
  id: m.id,
});

export const FIELDS: Partial<Record<SinkType, Fields>> = {
  http: of(DOCUMENT_FIELDS),
  elasticsearch: of(DOCUMENT_FIELDS),
  loki: of(LOKI_FIELDS),
  otlp: of(OTLP_ATTRIBUTES),
};

export function fieldsOf(sink: SinkType): Fields {
  const f = FIELDS[sink];
  if (!f) throw new Error(`no field map for sink ${sink}`);
  return f;
}

/**
 * VictoriaLogs takes the message and time field names per request; the
 * document sinks (http, elasticsearch) name them `message` and `@timestamp`.
 * Sent as headers through the sidecar's JOBHARVEST_HEADERS, as a user would.
 */
export const DOCUMENT_HEADERS = 'VL-Msg-Field=message,VL-Time-Field=@timestamp';
