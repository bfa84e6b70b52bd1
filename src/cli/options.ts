import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { SINKS } from '../contract/env.ts';
import { parseConfig, type Config } from '../core/config.ts';
import { ERROR_CODES, JobharvestError } from '../core/errors.ts';
import { parse } from '../core/annotations.ts';

export interface SettingFlags {
  config?: string;
  mode?: string;
  sink?: string;
  endpoint?: string;
  ttl?: string;
}

/** The config file (the one the chart renders) with the command-line flags on top. */
export function loadConfig(flags: SettingFlags): Config {
  let raw: Record<string, unknown> = {};
  if (flags.config) {
    let text: string;
    try {
      text = readFileSync(flags.config, 'utf8');
    } catch (e) {
      throw new JobharvestError(ERROR_CODES.BAD_CONFIG, `cannot read config ${flags.config}: ${(e as NodeJS.ErrnoException).code ?? e}`);
    }
    try {
      raw = (parseYaml(text) as Record<string, unknown>) ?? {};
    } catch (e) {
      throw new JobharvestError(ERROR_CODES.BAD_CONFIG, `config ${flags.config} is not valid YAML: ${(e as Error).message.split('\n')[0]}`);
    }
  }
  const sink = { ...((raw.sink as Record<string, unknown>) ?? {}) };
  if (flags.sink !== undefined) {
    const r = parse.sink(flags.sink);
    if (!r.ok) throw new JobharvestError(ERROR_CODES.BAD_CONFIG, `--sink ${flags.sink}: expected one of ${SINKS.join(', ')}`);
    sink.type = r.value;
  }
  if (flags.endpoint !== undefined) sink.endpoint = flags.endpoint;
  const merged: Record<string, unknown> = { ...raw, sink };
  if (flags.mode !== undefined) {
    const r = parse.mode(flags.mode);
    if (!r.ok) throw new JobharvestError(ERROR_CODES.BAD_CONFIG, `--mode ${flags.mode}: ${r.why}`);
    merged.mode = r.value;
  }
  if (flags.ttl !== undefined) {
    const r = parse.seconds(0, 2_147_483_647)(flags.ttl);
    if (!r.ok) throw new JobharvestError(ERROR_CODES.BAD_CONFIG, `--ttl ${flags.ttl}: ${r.why}`);
    merged.ttlSecondsAfterFinished = r.value;
  }
  return parseConfig(merged);
}
