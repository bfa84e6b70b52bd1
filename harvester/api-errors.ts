// What an API error says, read from client-node's exceptions (an ApiException
// carries the HTTP code and the Status body, the watch's errors a statusCode).
// Pure: the edge (harvester/kube.ts) and reconcile both read errors with it.

/** The HTTP status of an API error, or undefined for a network error. */
export function statusOf(err: unknown): number | undefined {
  const e = err as { code?: unknown; statusCode?: unknown; response?: { statusCode?: unknown } } | undefined;
  const c = e?.code ?? e?.statusCode ?? e?.response?.statusCode;
  return typeof c === 'number' ? c : undefined;
}

interface Status {
  reason?: string;
  message?: string;
  details?: { kind?: string; causes?: Array<{ reason?: string; type?: string }> };
}

/** The Status object of an ApiException (its body: a parsed object, or the JSON text). */
function statusBody(err: unknown): Status | undefined {
  const body = (err as { body?: unknown } | undefined)?.body;
  if (typeof body === 'string') {
    try {
      const parsed = JSON.parse(body) as unknown;
      return parsed && typeof parsed === 'object' ? (parsed as Status) : undefined;
    } catch {
      return undefined;
    }
  }
  return body && typeof body === 'object' ? (body as Status) : undefined;
}

/**
 * The namespace is being deleted or is gone: a create there is refused with
 * 403 and the cause NamespaceTerminating (the NamespaceLifecycle admission
 * plugin; a StatusCause's type is `reason` in JSON), or 404 for the namespace itself. Nothing to do about it, and
 * nothing to warn about.
 */
export function namespaceGoing(err: unknown): boolean {
  const code = statusOf(err);
  const s = statusBody(err);
  if (code === 403) return (s?.details?.causes ?? []).some((c) => (c.reason ?? c.type) === 'NamespaceTerminating') || /because it is being terminated/.test(s?.message ?? '');
  if (code === 404) return s?.details?.kind === 'namespaces';
  return false;
}

/**
 * How long the pods of a namespace may be refused (403: the log-reader
 * RoleBinding the webhook keeps there is gone, or not there yet; 404) before
 * that is a warning. A namespace being deleted loses the binding first and its
 * Jobs moments later, and the harvester lets it go with them: no warning. One
 * still refused a minute on, with a Job the harvester cares about, is one.
 */
export const REFUSED_GRACE_MS = 60_000;

/** The pods of a namespace could not be read for want of rights there (or of the namespace). */
export function refused(err: unknown): boolean {
  const code = statusOf(err);
  return code === 403 || code === 404;
}
