/**
 * Stable error codes. Logs, metrics labels, HTTP answers and the CLI all use
 * these strings, so dashboards and alerts keep working across releases: never
 * rename one, only add.
 */
export const ERROR_CODES = {
  /** The request body is not a usable AdmissionReview (answered with HTTP 400). */
  BAD_REQUEST: 'JH_BAD_REQUEST',
  /** The core threw; the object was allowed unpatched. */
  INTERNAL: 'JH_INTERNAL',
  /** The patch could not be produced or verified; the object was allowed unpatched. */
  PATCH_FAILED: 'JH_PATCH_FAILED',
  /** A configuration file or flag is invalid. */
  BAD_CONFIG: 'JH_BAD_CONFIG',
  /** A manifest given to the CLI cannot be parsed. */
  BAD_INPUT: 'JH_BAD_INPUT',
  /** More request bytes in flight than the webhook holds at once (HTTP 503; the API server applies the failurePolicy). */
  OVERLOADED: 'JH_OVERLOADED',
} as const;
export type ErrorCode = (typeof ERROR_CODES)[keyof typeof ERROR_CODES];

/** The HTTP status each error answers with, where it reaches an HTTP client at all. */
export const HTTP_STATUS: Readonly<Record<ErrorCode, number>> = {
  JH_BAD_REQUEST: 400,
  JH_INTERNAL: 500,
  JH_PATCH_FAILED: 500,
  JH_BAD_CONFIG: 500,
  JH_BAD_INPUT: 400,
  JH_OVERLOADED: 503,
};

export class JobharvestError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = 'JobharvestError';
  }

  /** Read by Fastify's error handler, like the statusCode of its own errors. */
  get statusCode(): number {
    return HTTP_STATUS[this.code];
  }
}

export function errorCodeOf(err: unknown): ErrorCode {
  return err instanceof JobharvestError ? err.code : ERROR_CODES.INTERNAL;
}
