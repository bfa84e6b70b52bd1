// One logger for the harvester: JSON lines on stderr, the same writer as the
// engine's, so a harvest's lines (Job and pod named by `withLogFields`) and the
// controller's read alike.
import { log as engineLog } from '../sidecar/engine.ts';

export type Level = 'debug' | 'info' | 'warn' | 'error';
export type Log = (level: Level, msg: string, fields?: Record<string, unknown>) => void;

export const log: Log = (level, msg, fields) => engineLog[level](msg, { component: 'harvester', ...fields });

export const LEVELS: readonly Level[] = ['debug', 'info', 'warn', 'error'];

/** Lines below this level are not written (info by default). */
export function setLogLevel(level: Level): void {
  engineLog.setLevel(level);
}
