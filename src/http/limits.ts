/**
 * What the webhook's HTTP server accepts, derived from what the API server
 * itself sends: nothing a genuine caller needs is refused, and a caller that is
 * not the API server (any pod that reaches the Service can connect) cannot hold
 * more memory or connections than that.
 */

/** The API server refuses request bodies over 3 MiB (its MaxRequestBodyBytes), before admission. */
export const API_SERVER_REQUEST_LIMIT = 3 * 1024 * 1024;
/**
 * The AdmissionReview around the object: uid, kind, resource, userInfo (with
 * its groups and extra), options. 1 MiB is far above any real one.
 */
export const REVIEW_ENVELOPE = 1024 * 1024;
/** Largest body /mutate reads; larger ones get 413 before they are read. */
export const BODY_LIMIT = API_SERVER_REQUEST_LIMIT + REVIEW_ENVELOPE;
/**
 * Request bytes held at once, by all connections together (reserved from the
 * declared length as a request starts). Four reviews of the largest size, or
 * thousands of ordinary Jobs (5–20 KiB). Past it a request is answered 503 at
 * once and its connection closed: the API server applies the failurePolicy, as
 * for any unanswered call, and the webhook's memory stays bounded.
 */
export const IN_FLIGHT_BYTES = 4 * BODY_LIMIT;
/** The API server's ceiling for a webhook's timeoutSeconds is 30; the chart allows 10 at most. */
export const MAX_TIMEOUT_SECONDS = 30;
/**
 * Admissions per second a replica can have in flight each for the whole
 * timeout (Little's law: connections = rate × time held). A review takes about
 * a millisecond, so the cap is reached only by callers that hold connections
 * open, which the timeouts below close.
 */
const ADMISSIONS_PER_SECOND_AT_TIMEOUT = 50;

export interface ServerLimits {
  /** Whole request, headers and body, must arrive within it. */
  requestTimeoutMs: number;
  headersTimeoutMs: number;
  /** A socket with no traffic for this long is closed. */
  connectionTimeoutMs: number;
  /** An idle keep-alive connection is kept this long for the API server's next call. */
  keepAliveTimeoutMs: number;
  /** The TLS handshake must finish within it. */
  handshakeTimeoutMs: number;
  /** How often Node checks requests against requestTimeoutMs and headersTimeoutMs. */
  checkIntervalMs: number;
  maxConnections: number;
  bodyLimit: number;
  inFlightBytes: number;
}

/**
 * The API server gives up on a call after the webhook's timeoutSeconds, so a
 * request that has not arrived by then will never be used: the timeouts are
 * that figure, and the connection cap follows from it.
 */
export function serverLimits(timeoutSeconds: number): ServerLimits {
  const s = Math.min(MAX_TIMEOUT_SECONDS, Math.max(1, Math.ceil(timeoutSeconds)));
  const ms = s * 1000;
  return {
    requestTimeoutMs: ms,
    headersTimeoutMs: ms,
    connectionTimeoutMs: ms,
    keepAliveTimeoutMs: ms,
    handshakeTimeoutMs: ms,
    // Node's default (30 s) would let a request outlive its timeout by that much.
    checkIntervalMs: Math.min(1000, ms),
    maxConnections: ADMISSIONS_PER_SECOND_AT_TIMEOUT * s,
    bodyLimit: BODY_LIMIT,
    inFlightBytes: IN_FLIGHT_BYTES,
  };
}

/** Kubernetes' own limits: a namespace is a DNS label (63), an object name a DNS subdomain (253). */
export const NAMESPACE_MAX = 63;
export const NAME_MAX = 253;

/**
 * A field from the review cut to what Kubernetes allows, so a forged review
 * cannot write a long log line. A forged review may put anything there: what
 * is not a string is logged as its type only.
 */
export function cut(v: unknown, max: number): string | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'string') return `(${v === null ? 'null' : typeof v})`;
  if (v.length <= max) return v;
  return `${v.slice(0, max)}…(${v.length} chars)`;
}
