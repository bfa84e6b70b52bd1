// Structured JSON lines on stderr. stdout is left to the stdout sink, so that
// shipped records and the sidecar's own diagnostics never mix.
import { AsyncLocalStorage } from 'node:async_hooks';
import type { LogLevel } from './config.ts';
import { redactUrls } from '../src/contract/redact.ts';

const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export type Fields = Record<string, unknown>;
export type LogWriter = (line: string) => void;

/**
 * Fields every line logged within `withLogFields` carries: a program that
 * runs several pipelines at once (the harvester, one per pod) names the Job
 * and pod on each of their lines without threading a logger through the engine.
 */
const context = new AsyncLocalStorage<Fields>();

export function withLogFields<T>(fields: Fields, f: () => T): T {
  return context.run({ ...context.getStore(), ...fields }, f);
}

export class Logger {
  private min = ORDER.info;
  constructor(private write: LogWriter = (line) => void process.stderr.write(line)) {}

  setLevel(level: LogLevel): void {
    this.min = ORDER[level];
  }

  setWriter(write: LogWriter): void {
    this.write = write;
  }

  debug(msg: string, fields?: Fields): void {
    this.emit('debug', msg, fields);
  }
  info(msg: string, fields?: Fields): void {
    this.emit('info', msg, fields);
  }
  warn(msg: string, fields?: Fields): void {
    this.emit('warn', msg, fields);
  }
  error(msg: string, fields?: Fields): void {
    this.emit('error', msg, fields);
  }

  private emit(level: LogLevel, msg: string, fields?: Fields): void {
    if (ORDER[level] < this.min) return;
    const entry = { time: new Date().toISOString(), level, msg, ...context.getStore(), ...fields };
    // Error messages and fields may quote an endpoint; no line leaves with its credentials.
    this.write(redactUrls(JSON.stringify(entry, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v instanceof Error ? v.message : v))) + '\n');
  }
}

/** One logger for the process; tests swap its writer. */
export const log = new Logger();

/** Endpoints may carry user:password or a token in the query; never let either reach a log line. */
export { redactUrl } from '../src/contract/redact.ts';
