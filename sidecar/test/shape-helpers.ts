// Feeding lines through the shaping stage, as a source would.
import { VERSION } from '../../src/contract/version.ts';
import { OtlpEncoder } from '../encode/otlp.ts';
import { Shaper, type ShaperOptions } from '../shape/shaper.ts';
import { parseShaping, type ShapingSettings } from '../shaping-settings.ts';
import type { FileMeta, LogRecord, Stream } from '../records/record.ts';
import { newStats, type Stats } from '../stats.ts';
import { makeMeta, testConfig } from '../../test/support/sidecar-helpers.ts';

/** Shaping settings as the sidecar would read them from these env vars (names without the JOBHARVEST_ prefix). */
export function shaping(env: Record<string, string>, maxRecordBytes = 262_144): ShapingSettings {
  const full = Object.fromEntries(Object.entries(env).map(([k, v]) => [`JOBHARVEST_${k}`, v]));
  const { settings, problems } = parseShaping(full, maxRecordBytes);
  if (problems.length > 0) throw new Error(problems.join('; '));
  return settings;
}

/** Lines of one file, laid out one after the other: each its own offset, its size the message plus a CRI prefix. */
export class Lines {
  offset = 0;
  constructor(readonly file: FileMeta = makeMeta()) {}

  make(texts: string | readonly string[], stream: Stream = 'stdout'): LogRecord[] {
    const list = typeof texts === 'string' ? texts.split('\n') : texts;
    return list.map((message) => {
      const size = Buffer.byteLength(message) + 40;
      const r: LogRecord = { file: this.file, offset: this.offset, ts: `2024-05-06T07:08:09.${String(this.offset).padStart(9, '0')}Z`, stream, message, size, safe: this.offset + size, flags: 0 };
      this.offset += size;
      return r;
    });
  }
}

/** Options for a shaper in front of the OTLP protobuf sink: its encoder writes JSON lines' values in the pass that decides them. */
export function otlpValues(): ShaperOptions {
  return { jsonPreparer: new OtlpEncoder(testConfig().identity, 'jobharvest', VERSION) };
}

export function harness(settings: ShapingSettings, stats: Stats = newStats(), options: ShaperOptions = {}) {
  const out: LogRecord[] = [];
  const shaper = new Shaper(
    settings,
    stats,
    async (records) => {
      out.push(...records);
    },
    undefined,
    options,
  );
  return { shaper, out, stats, messages: () => out.map((r) => r.message) };
}
