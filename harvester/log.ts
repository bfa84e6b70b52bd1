// One logger for the harvester: JSON lines on stderr, the same writer as the
// engine's, so a harvest's lines (Job and pod named by `withLogFields`) and the
// controller's read alike. Its shape is the one all programs share
// (src/contract/log.ts).
import { LOG_LEVELS, type Log, type LogLevel } from '../src/contract/log.ts';
import { log as engineLog } from '../sidecar/engine.ts';

export type { Log, LogLevel };

export const log: Log = (level, msg, fields) => engineLog.line(level, msg, { component: 'harvester', ...fields });

export const LEVELS: readonly LogLevel[] = LOG_LEVELS;

/** Lines below this level are not written (info by default). */
export function setLogLevel(level: LogLevel): void {
  engineLog.setLevel(level);
}
