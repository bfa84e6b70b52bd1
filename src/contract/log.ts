// The one shape of a logger that the three programs share. Each program
// writes lines its own way (the webhook through pino and its early writer, the
// sidecar and the harvester through the sidecar's JSON-lines logger), but
// every component that only reports what it did takes a `Log`, so the same
// component logs the same way wherever it runs and a test can capture its
// lines with one function.

export const LOG_LEVELS = ['debug', 'info', 'warn', 'error'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** Structured fields of one line, next to its message. */
export type LogFields = Record<string, unknown>;

export type Log = (level: LogLevel, msg: string, fields?: LogFields) => void;
