/**
 * Stable error and reason codes. Logs, metrics labels, warnings and the CLI all
 * use these strings, so dashboards and alerts keep working across releases:
 * never rename one, only add.
 */
export const SKIP_REASONS = {
  NOT_A_JOB: 'not-a-job',
  NOT_CREATE: 'not-create',
  NAMESPACE_EXCLUDED: 'namespace-excluded',
  NAMESPACE_NOT_OPTED_IN: 'namespace-not-opted-in',
  OPTED_OUT_JOB: 'opted-out-job',
  OPTED_OUT_TEMPLATE: 'opted-out-template',
  ALREADY_INJECTED: 'already-injected',
  NAME_CONFLICT: 'name-conflict',
  UNSUPPORTED_SERVER_VERSION: 'unsupported-server-version',
  SINK_UNCONFIGURED: 'sink-unconfigured',
  NAMESPACE_UNKNOWN: 'namespace-unknown',
} as const;
export type SkipReason = (typeof SKIP_REASONS)[keyof typeof SKIP_REASONS];

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
} as const;
export type ErrorCode = (typeof ERROR_CODES)[keyof typeof ERROR_CODES];

export class JobharvestError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = 'JobharvestError';
  }
}

export function errorCodeOf(err: unknown): ErrorCode {
  return err instanceof JobharvestError ? err.code : ERROR_CODES.INTERNAL;
}
