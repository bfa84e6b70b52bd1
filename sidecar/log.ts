// Structured JSON lines on stderr. stdout is left to the stdout sink, so that
// shipped records and the sidecar's own diagnostics never mix.
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Log, LogFields, LogLevel } from '../src/contract/log.ts';
import { redactUrls } from '../src/contract/redact.ts';

const ORDER: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export type LogWriter = (line: string) => void;

/**
 * Fields every line logged within `withLogFields` carries: a program that
 * runs several pipelines at once (the harvester, one per pod) names the Job
 * and pod on each of their lines without threading a logger through the engine.
 */
const context = new AsyncLocalStorage<LogFields>();

export function withLogFields<T>(fields: LogFields, f: () => T): T {
  return context.run({ ...context.getStore(), ...fields }, f);
}

export class Logger {
  private min = ORDER.info;
  /** Bytes of lines the logger may still write; unbounded unless a program sets one. */
  private left = Infinity;
  private dropped = 0;
  constructor(private write: LogWriter = (line) => void process.stderr.write(line)) {}

  setLevel(level: LogLevel): void {
    this.min = ORDER[level];
  }

  setWriter(write: LogWriter): void {
    this.write = write;
  }

  /**
   * Bounds what the logger writes, in bytes: the sidecar's own log counts
   * against its pod's ephemeral storage, and a log server down for hours must
   * not fill it with retry warnings. Past the bound, lines are counted, and the
   * count goes into the summary (`last`), which is always written.
   */
  setBudget(bytes: number): void {
    this.left = bytes;
  }

  /** The one line that is always written, with the count of lines the budget held back. */
  last(msg: string, fields: LogFields): void {
    this.emit('info', msg, this.dropped > 0 ? { ...fields, log_lines_suppressed: this.dropped } : fields, true);
  }

  /** The logger as the shared `Log` shape, for a component that takes one (the harvester's). */
  readonly line: Log = (level, msg, fields) => this.emit(level, msg, fields);

  debug(msg: string, fields?: LogFields): void {
    this.emit('debug', msg, fields);
  }
  info(msg: string, fields?: LogFields): void {
    this.emit('info', msg, fields);
  }
  warn(msg: string, fields?: LogFields): void {
    this.emit('warn', msg, fields);
  }
  error(msg: string, fields?: LogFields): void {
    this.emit('error', msg, fields);
  }

  private emit(level: LogLevel, msg: string, fields?: LogFields, always = false): void {
    if (ORDER[level] < this.min && !always) return;
    if (this.left <= 0 && !always) {
      this.dropped++;
      return;
    }
    const entry = { time: new Date().toISOString(), level, msg, ...context.getStore(), ...fields };
    // Error messages and fields may quote an endpoint; no line leaves with its credentials.
    let line = redactUrls(JSON.stringify(entry, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v instanceof Error ? v.message : v))) + '\n';
    if (!always) {
      this.left -= line.length;
      if (this.left <= 0) line += JSON.stringify({ time: entry.time, level: 'warn', msg: 'own log budget spent: further lines are only counted, in the summary' }) + '\n';
    }
    this.write(line);
  }
}

/** One logger for the process; tests swap its writer. */
export const log = new Logger();

/** Endpoints may carry user:password or a token in the query; never let either reach a log line. */
export { redactUrl } from '../src/contract/redact.ts';
