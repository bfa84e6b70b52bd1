// An error raised while a request is being built (an invalid header name or
// value, e.g. ERR_INVALID_CHAR for a Loki tenant `团队`) happens before any
// byte reaches the network and will happen again on every attempt: retrying
// it would only burn the drain budget. It is permanent, so the batch is
// dead-lettered at once.

export class RequestBuildError extends Error {
  readonly code: string | undefined;
  constructor(cause: unknown) {
    const code = (cause as NodeJS.ErrnoException | undefined)?.code;
    super(`request could not be built${code ? ` (${code})` : ''}: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'RequestBuildError';
    this.code = code;
  }
}

/** Runs the synchronous part of building/starting a request; what it throws is permanent. */
export function buildRequest<T>(build: () => T): T {
  try {
    return build();
  } catch (err) {
    throw new RequestBuildError(err);
  }
}

export function isRequestBuildError(err: unknown): err is RequestBuildError {
  return err instanceof RequestBuildError;
}
