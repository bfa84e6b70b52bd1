// Loki push API (JSON). Labels stay low-cardinality (namespace, job, pod,
// container, stream); everything else rides along as structured metadata.
// The original CRI timestamp is sent in nanoseconds.
import { LOKI_LABELS as L, LOKI_METADATA as M } from '../../src/contract/record.ts';
import { nanosText, nowTime, parseTimestamp } from '../records/timestamp.ts';
import { FLAG_INCOMPLETE, FLAG_MALFORMED, FLAG_TRUNCATED, type FileMeta, type LogRecord } from '../records/record.ts';
import { withPath } from './http/client.ts';
import { attempt } from './http/result.ts';
import type { Sink, SinkContext } from './types.ts';
import type { Identity } from '../config.ts';

export const LOKI_PUSH_PATH = '/loki/api/v1/push';

interface StreamGroup {
  readonly head: string;
  body: string;
}

function labelsFor(identity: Identity, file: FileMeta, stream: string): Record<string, string> {
  const labels: Record<string, string> = { [L.namespace]: identity.namespace };
  if (identity.job) labels[L.job] = identity.job;
  labels[L.pod] = identity.pod;
  labels[L.container] = file.container;
  labels[L.stream] = stream;
  return labels;
}

const jsonKey = (name: string) => `${JSON.stringify(name)}:`;
const TRUNCATED = `,${jsonKey(M.truncated)}"true"`;
const MALFORMED = `,${jsonKey(M.malformed)}"true"`;
const INCOMPLETE = `,${jsonKey(M.incomplete)}"true"`;

export function encodeLokiPush(identity: Identity, records: readonly LogRecord[]): string {
  const groups = new Map<string, StreamGroup>();
  const podMeta = `${jsonKey(M.podUid)}${JSON.stringify(identity.podUid)}${identity.node ? `,${jsonKey(M.node)}${JSON.stringify(identity.node)}` : ''}`;
  for (const r of records) {
    const key = `${r.file.container}\0${r.stream}`;
    let g = groups.get(key);
    if (!g) {
      g = { head: `{"stream":${JSON.stringify(labelsFor(identity, r.file, r.stream))},"values":[`, body: '' };
      groups.set(key, g);
    }
    const t = parseTimestamp(r.ts) ?? nowTime();
    let meta = `{${podMeta},${jsonKey(M.restart)}"${r.file.restart}",${jsonKey(M.id)}"${r.file.idPrefix}${r.offset}"`;
    if (r.flags & FLAG_TRUNCATED) meta += TRUNCATED;
    if (r.flags & FLAG_MALFORMED) meta += MALFORMED;
    if (r.flags & FLAG_INCOMPLETE) meta += INCOMPLETE;
    g.body += (g.body ? ',' : '') + `["${nanosText(t)}",${JSON.stringify(r.message)},${meta}}]`;
  }
  let out = '{"streams":[';
  let first = true;
  for (const g of groups.values()) {
    out += (first ? '' : ',') + g.head + g.body + ']}';
    first = false;
  }
  return out + ']}';
}

export function createSink(ctx: SinkContext): Sink {
  const url = withPath(ctx.config.endpoint!, LOKI_PUSH_PATH);
  const client = ctx.http();
  const headers: Record<string, string> = ctx.config.lokiTenant ? { 'x-scope-orgid': ctx.config.lokiTenant } : {};
  return {
    async send(records, signal) {
      const body = encodeLokiPush(ctx.config.identity, records);
      const { result } = await attempt(() => client.post(url, body, { contentType: 'application/json', headers, signal }));
      return result;
    },
  };
}
