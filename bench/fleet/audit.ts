// The API requests of jobharvest's components, from the API server's own
// audit log: each component runs on its own identity, so the log names it as
// it would in a cluster (its ServiceAccount), and no component's own count is
// trusted. `apiserver_request_total` has no user label, hence the audit log.
import { readFileSync } from 'node:fs';

/**
 * Metadata for every request of the given users, and the request body of the
 * Events they create (an Event's name does not say which Job it is about; its
 * involvedObject does). Nothing of anyone else, so the log stays small and the
 * API server's cost of writing it is the same in both arms.
 */
export function auditPolicy(users: readonly string[]): object {
  return {
    apiVersion: 'audit.k8s.io/v1',
    kind: 'Policy',
    omitStages: ['RequestReceived', 'ResponseStarted'],
    rules: [
      { level: 'Request', users: [...users], verbs: ['create'], resources: [{ group: '', resources: ['events'] }, { group: 'events.k8s.io', resources: ['events'] }] },
      { level: 'Metadata', users: [...users] },
      { level: 'None' },
    ],
  };
}

export interface AuditEvent {
  user: string;
  verb: string;
  /** resource, or resource/subresource */
  resource: string;
  namespace: string;
  /** The Job the request is about, when it is about one. */
  job: string | undefined;
  at: number;
  code: number;
}

export const WRITE_VERBS: ReadonlySet<string> = new Set(['create', 'update', 'patch', 'delete', 'deletecollection']);

/** The Job a request names: the Job itself, one of its pods (`<job>-…`), or an Event about it. */
export function jobOfRequest(resource: string, name: string | undefined, involved: string | undefined, isJob: (name: string) => boolean): string | undefined {
  if (resource.startsWith('jobs')) return name && isJob(name) ? name : undefined;
  if (resource === 'events') return involved && isJob(involved) ? involved : undefined;
  if (resource.startsWith('pods') && name) {
    // A Job's pod is `<job>-<suffix>` (Indexed: `<job>-<index>-<suffix>`).
    for (let i = name.lastIndexOf('-'); i > 0; i = name.lastIndexOf('-', i - 1)) if (isJob(name.slice(0, i))) return name.slice(0, i);
  }
  return undefined;
}

interface RawAuditEvent {
  stage?: string;
  verb?: string;
  user?: { username?: string };
  objectRef?: { resource?: string; subresource?: string; namespace?: string; name?: string };
  requestObject?: { involvedObject?: { name?: string }; regarding?: { name?: string } };
  stageTimestamp?: string;
  responseStatus?: { code?: number };
}

/** The completed requests of an audit log (JSON lines), attributed to Jobs by `isJob`. */
export function parseAuditLog(text: string, isJob: (name: string) => boolean): AuditEvent[] {
  const out: AuditEvent[] = [];
  for (const line of text.split('\n')) {
    if (line.length === 0) continue;
    let e: RawAuditEvent;
    try {
      e = JSON.parse(line) as RawAuditEvent;
    } catch {
      continue; // a line cut by the API server's stop
    }
    if (e.stage !== 'ResponseComplete' && e.stage !== 'Panic') continue;
    const ref = e.objectRef ?? {};
    const resource = ref.subresource ? `${ref.resource ?? ''}/${ref.subresource}` : (ref.resource ?? '(non-resource)');
    const involved = e.requestObject?.involvedObject?.name ?? e.requestObject?.regarding?.name;
    out.push({
      user: e.user?.username ?? '',
      verb: e.verb ?? '',
      resource,
      namespace: ref.namespace ?? '',
      job: jobOfRequest(resource, ref.name, involved, isJob),
      at: e.stageTimestamp ? Date.parse(e.stageTimestamp) : 0,
      code: e.responseStatus?.code ?? 0,
    });
  }
  return out;
}

export function readAuditLog(path: string, isJob: (name: string) => boolean): AuditEvent[] {
  return parseAuditLog(readFileSync(path, 'utf8'), isJob);
}

/** Requests counted by `<verb> <resource>`, most first. */
export function countByRequest(events: readonly AuditEvent[]): Array<[string, number]> {
  const m = new Map<string, number>();
  for (const e of events) m.set(`${e.verb} ${e.resource}`, (m.get(`${e.verb} ${e.resource}`) ?? 0) + 1);
  return [...m].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
}
