// Endpoints carry credentials in the userinfo (http://user:pass@host) and in
// query values (?token=...). Nothing of either may reach a log line, so both
// are replaced whole, whatever they contain.

const MASK = '***';
const URL_START = /^([a-z][a-z0-9+.-]*:\/\/)([^/?#]*)([^?#]*)(\?[^#]*)?(#.*)?$/is;

/** Masks each query value; a parameter without `=` may itself be a token, so it is masked whole. */
function redactQuery(query: string): string {
  if (query.length <= 1) return query;
  return (
    '?' +
    query
      .slice(1)
      .split('&')
      .map((part) => {
        if (part === '') return part;
        const eq = part.indexOf('=');
        return eq >= 0 ? `${part.slice(0, eq)}=${MASK}` : MASK;
      })
      .join('&')
  );
}

/**
 * `http://alice:S3cr@tPassw0rd@logs/x?token=abc` -> `http://***@logs/x?token=***`.
 * The userinfo runs to the LAST `@` of the authority: a password may hold an
 * unescaped `@`, and masking only up to the first one would print its tail.
 */
export function redactUrlText(text: string): string {
  const m = URL_START.exec(text);
  if (!m) return text;
  const [, scheme, authority, rest, query, fragment] = m as unknown as [string, string, string, string, string | undefined, string | undefined];
  const at = authority.lastIndexOf('@');
  const host = at >= 0 ? `${MASK}@${authority.slice(at + 1)}` : authority;
  return scheme + host + rest + (query ? redactQuery(query) : '') + (fragment && fragment.length > 1 ? `#${MASK}` : fragment ?? '');
}

export function redactUrl(url: URL | string | undefined): string | undefined {
  if (url === undefined) return undefined;
  return redactUrlText(typeof url === 'string' ? url : url.href);
}

/** Any URL with a scheme inside free text (error messages, whole log lines): up to whitespace or a quote. */
const URL_IN_TEXT = /[a-z][a-z0-9+.-]*:\/\/[^\s"'<>]+/gi;

export function redactUrlsIn(text: string): string {
  if (!text.includes('://')) return text;
  return text.replace(URL_IN_TEXT, (u) => redactUrlText(u));
}
