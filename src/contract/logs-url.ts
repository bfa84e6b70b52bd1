/** What the logs-url template may name. Values are URL-encoded where they land. */
export interface LogsUrlValues {
  namespace: string;
  job: string | undefined;
  uid: string | undefined;
  /** Epoch milliseconds, the unit Grafana's from/to take. */
  from: number | undefined;
  /** Epoch milliseconds, or undefined while the Job runs: rendered as `now`. */
  to: number | undefined;
}

/**
 * Renders the configured template, or returns undefined when it names
 * something not known yet: at admission a Job has no uid, and a Job created
 * with generateName has no name. A link that points at the wrong Job, or at
 * every Job, would be worse than none; the harvester can write it later.
 */
export function renderLogsUrl(template: string, v: LogsUrlValues): string | undefined {
  let missing = false;
  const out = template.replace(/\{(namespace|job|uid|from|to)\}/g, (_m, key: string) => {
    let value: string | undefined;
    if (key === 'namespace') value = v.namespace;
    else if (key === 'job') value = v.job;
    else if (key === 'uid') value = v.uid;
    else if (key === 'from') value = v.from === undefined ? undefined : String(v.from);
    else value = v.to === undefined ? 'now' : String(v.to);
    if (value === undefined || value === '') {
      missing = true;
      return '';
    }
    return encodeURIComponent(value);
  });
  return missing ? undefined : out;
}
