/**
 * Hides credentials in text that mentions URLs, before it reaches a warning,
 * `explain` or a log line. Both the webhook and the sidecar use it.
 *
 * Everything between `scheme://` and the last `@` before the next URL on the
 * line is taken as userinfo: a password may hold `@`, `/` or spaces, and such
 * a value is often not a valid URL at all (it is shown precisely because it
 * was refused), so a parser cannot be trusted to find where it ends. Hiding a
 * little too much is the safe side. Query values are hidden as well, because
 * tokens travel there.
 */
const URL_START = /[a-z][a-z0-9+.-]*:\/\//gi;
export const REDACTED = '***';

export function redactUrls(text: string): string {
  return text.split('\n').map(redactLine).join('\n');
}

function redactLine(line: string): string {
  const starts = [...line.matchAll(URL_START)].map((m) => ({ at: m.index, end: m.index + m[0].length }));
  if (starts.length === 0) return line;
  let out = line.slice(0, starts[0]!.at);
  for (const [i, s] of starts.entries()) {
    const stop = starts[i + 1]?.at ?? line.length;
    let rest = line.slice(s.end, stop);
    const at = rest.lastIndexOf('@');
    if (at >= 0) rest = `${REDACTED}@${rest.slice(at + 1)}`;
    out += line.slice(s.at, s.end) + redactQuery(rest);
  }
  return out;
}

function redactQuery(rest: string): string {
  const q = rest.indexOf('?');
  if (q < 0) return rest;
  const tail = rest.slice(q + 1);
  const end = tail.search(/[#\s]/);
  const query = end < 0 ? tail : tail.slice(0, end);
  const after = end < 0 ? '' : tail.slice(end);
  const hidden = query
    .split('&')
    .map((p) => {
      const eq = p.indexOf('=');
      return eq < 0 ? p : `${p.slice(0, eq)}=${REDACTED}`;
    })
    .join('&');
  return `${rest.slice(0, q + 1)}${hidden}${after}`;
}
