import type { SinkType } from '../../src/contract/env.ts';

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

const DOCUMENT: Fields = {
  namespace: 'k8s.namespace.name',
  pod: 'k8s.pod.name',
  uid: 'k8s.pod.uid',
  container: 'k8s.container.name',
  restart: 'k8s.container.restart_count',
  job: 'k8s.job.name',
  node: 'k8s.node.name',
  stream: 'stream',
  id: 'id',
};

export const FIELDS: Partial<Record<SinkType, Fields>> = {
  http: DOCUMENT,
  elasticsearch: DOCUMENT,
  loki: { namespace: 'namespace', pod: 'pod', uid: 'pod_uid', container: 'container', restart: 'restart_count', job: 'job', node: 'node', stream: 'stream', id: 'id' },
  otlp: { ...DOCUMENT, stream: 'log.iostream', id: 'log.record.uid' },
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
