// Flag parsers shared by the harvester's commands (the controller and the
// uninstall hook), so both refuse a bad value the same way.
import { InvalidArgumentError } from 'commander';
import { LEVELS, type LogLevel } from './log.ts';

/** A whole number from `min` to `max`. */
export const int = (min: number, max: number) => (v: string): number => {
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < min || n > max) throw new InvalidArgumentError(`an integer from ${min} to ${max}`);
  return n;
};

/** A repeatable flag: every value given, in order. */
export const collect = (v: string, all: string[]): string[] => [...all, v];

/** One of the log levels. */
export function level(v: string): LogLevel {
  if (!(LEVELS as readonly string[]).includes(v)) throw new InvalidArgumentError(LEVELS.join(', '));
  return v as LogLevel;
}
