/**
 * Hides credentials in text that mentions URLs, before it reaches a warning,
 * `explain` or a log line. The webhook and the sidecar both use it.
 *
 * Everything between `scheme://` and the last `@` before the next URL (or the
 * `"` that ends a JSON or quoted string in a log line) is taken as userinfo: a
 * password may hold `@`, `/`, spaces or quotes, and such a value is often not a valid
 * URL at all (it is shown precisely because it was refused), so a parser cannot
 * be trusted to find where it ends. Hiding a little too much is the safe side.
 * Query values are hidden as well, because tokens travel there; a parameter
 * without `=` may itself be a token, so it is hidden whole, and so is a
 * fragment.
 */
const URL_START = /[a-z][a-z0-9+.-]*:\/\//gi;
export const REDACTED = '***';

export function redactUrls(text: string): string {
  if (!text.includes('://')) return text;
  return text.split('\n').map(redactLine).join('\n');
}

/** One URL object or string, e.g. a configured endpoint, for a log field. */
export function redactUrl(url: URL | string | undefined): string | undefined {
  if (url === undefined) return undefined;
  return redactUrls(typeof url === 'string' ? url : url.href);
}

function redactLine(line: string): string {
  const starts = [...line.matchAll(URL_START)].map((m) => ({ at: m.index, end: m.index + m[0].length }));
  if (starts.length === 0) return line;
  let out = line.slice(0, starts[0]!.at);
  for (const [i, s] of starts.entries()) {
    const next = starts[i + 1]?.at ?? line.length;
    const quote = closingQuote(line, s.end, next);
    const stop = quote >= 0 ? quote : next;
    let rest = line.slice(s.end, stop);
    const at = rest.lastIndexOf('@');
    if (at >= 0) rest = `${REDACTED}@${rest.slice(at + 1)}`;
    out += line.slice(s.at, s.end) + redactQueryAndFragment(rest) + line.slice(stop, next);
  }
  return out;
}

/**
 * The `"` that closes the string a URL sits in, or -1. A quote inside a
 * password does not: an escaped one (`\"`, the value was JSON-encoded) never
 * does, and a bare one does only when a delimiter follows it (whitespace, the
 * end, or `,;:)}]`) and no `@` follows it before the next whitespace or quote.
 */
function closingQuote(line: string, from: number, to: number): number {
  for (let q = line.indexOf('"', from); q >= 0 && q < to; q = line.indexOf('"', q + 1)) {
    if (line[q - 1] === '\\') continue;
    const after = line[q + 1];
    if (after !== undefined && !/[\s,;:)}\]]/.test(after)) continue;
    const word = /^[^\s"]*/.exec(line.slice(q + 1, to))![0];
    if (word.includes('@')) continue;
    return q;
  }
  return -1;
}

function redactQueryAndFragment(rest: string): string {
  const q = rest.search(/[?#]/);
  if (q < 0) return rest;
  const end = rest.slice(q).search(/\s/);
  const part = end < 0 ? rest.slice(q) : rest.slice(q, q + end);
  const after = end < 0 ? '' : rest.slice(q + end);
  const hash = part.indexOf('#');
  const query = hash < 0 ? part : part.slice(0, hash);
  const fragment = hash < 0 ? '' : part.slice(hash);
  const hidden = query
    .slice(1)
    .split('&')
    .map((p) => {
      if (p === '') return p;
      const eq = p.indexOf('=');
      return eq < 0 ? REDACTED : `${p.slice(0, eq)}=${REDACTED}`;
    })
    .join('&');
  const shownQuery = query === '' ? '' : `?${hidden}`;
  const shownFragment = fragment.length > 1 ? `#${REDACTED}` : fragment;
  return `${rest.slice(0, q)}${shownQuery}${shownFragment}${after}`;
}
