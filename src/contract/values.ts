/**
 * What the sinks' protocols accept for values that go into headers, URLs or
 * routing keys. The webhook refuses bad ones at admission (a warning, and the
 * level below wins) instead of letting every push of the sidecar fail later,
 * e.g. Node throwing ERR_INVALID_CHAR on a non-ASCII header. Each check returns
 * why a value is refused, or undefined when it is fine.
 */

/** HTTP header field name: an RFC 9110 token. */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** HTTP header field value Node sends unchanged: visible ASCII, space and tab. */
const HEADER_VALUE = /^[\t\x20-\x7e]*$/;

export function headerNameProblem(name: string): string | undefined {
  return HEADER_NAME.test(name) ? undefined : 'not a valid HTTP header name';
}

export function headerValueProblem(value: string): string | undefined {
  return HEADER_VALUE.test(value) ? undefined : 'HTTP header values may hold only printable ASCII';
}

/**
 * JOBHARVEST_HEADERS: comma-separated name=value pairs, as the sidecar reads
 * them (empty entries are skipped; names and values are trimmed).
 */
export function headerListProblem(text: string): string | undefined {
  for (const part of text.split(',')) {
    if (part.trim() === '') continue;
    const eq = part.indexOf('=');
    if (eq <= 0) return `entry ${JSON.stringify(part.trim().slice(0, 40))} is not name=value`;
    const name = part.slice(0, eq).trim();
    const why = headerNameProblem(name) ?? headerValueProblem(part.slice(eq + 1).trim());
    if (why) return `header ${JSON.stringify(name.slice(0, 40))}: ${why}`;
  }
  return undefined;
}

/** Loki's tenant id (X-Scope-OrgID): Loki accepts these characters, up to 150 bytes. */
export function lokiTenantProblem(v: string): string | undefined {
  if (v === '.' || v === '..') return 'a Loki tenant id cannot be . or ..';
  if (v.length > 150) return 'a Loki tenant id is at most 150 characters';
  return /^[A-Za-z0-9!._*'()-]+$/.test(v) ? undefined : "a Loki tenant id may hold only letters, digits and ! - _ . * ' ( )";
}

/** Elasticsearch/OpenSearch index or data stream name rules. */
export function esIndexProblem(v: string): string | undefined {
  if (v === '.' || v === '..') return 'an index name cannot be . or ..';
  if (Buffer.byteLength(v) > 255) return 'an index name is at most 255 bytes';
  if (/^[-_+]/.test(v)) return 'an index name cannot start with -, _ or +';
  if (v !== v.toLowerCase()) return 'an index name must be lowercase';
  return /^[\x21-\x7e]+$/.test(v) && !/[\\/*?"<>|,#:]/.test(v)
    ? undefined
    : 'an index name may hold only printable ASCII without spaces or \\ / * ? " < > | , # :';
}

/** Variables a forward tag template may use. */
export const FORWARD_TAG_VARIABLES = ['namespace', 'pod', 'container', 'job', 'stream', 'node'] as const;

/** Fluentd routes on the tag: printable ASCII without spaces, and only known ${variables}. */
export function forwardTagProblem(v: string): string | undefined {
  for (const m of v.matchAll(/\$\{([^}]*)\}/g)) {
    if (!(FORWARD_TAG_VARIABLES as readonly string[]).includes(m[1]!)) return `unknown tag variable \${${m[1]!.slice(0, 20)}}`;
  }
  const literal = v.replace(/\$\{[^}]*\}/g, '');
  return /^[\x21-\x7e]*$/.test(literal) && !/[${}]/.test(literal) ? undefined : 'a tag may hold only printable ASCII without spaces, besides ${variables}';
}
