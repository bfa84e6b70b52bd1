/**
 * Request-body codecs, and which ones each sink's protocol takes. The webhook
 * renders the codec a pod's sink takes, and the sidecar and the harvester
 * choose by the same rule, so that a sink picked by annotation never gets a
 * codec its protocol has no header for.
 */
import type { SinkType } from './env.ts';

export const CODECS = ['gzip', 'zstd', 'none'] as const;
export type Codec = (typeof CODECS)[number];

/**
 * What each protocol can say on the wire. OTLP/HTTP and plain NDJSON carry
 * any Content-Encoding the server decodes; Loki's push API and the
 * Elasticsearch bulk API are documented with gzip only; Fluentd forward has
 * only CompressedPackedForward (gzip); syslog frames are never compressed.
 * The first codec is what a refused one falls back to.
 */
const TAKES: Readonly<Record<SinkType, readonly Codec[]>> = {
  otlp: ['gzip', 'zstd', 'none'],
  http: ['gzip', 'zstd', 'none'],
  loki: ['gzip', 'none'],
  elasticsearch: ['gzip', 'none'],
  forward: ['gzip', 'none'],
  syslog: ['none'],
  stdout: ['none'],
};

export function sinkCodecs(sink: SinkType): readonly Codec[] {
  return TAKES[sink];
}

/**
 * The codec a sink uses when `wanted` is asked for: `wanted` if the protocol
 * takes it, otherwise its first codec, with the reason when that changes
 * what the operator asked for (syslog and stdout never compress, so gzip is
 * no change there).
 */
export function codecFor(sink: SinkType, wanted: Codec): { readonly codec: Codec; readonly note?: string } {
  const takes = TAKES[sink];
  if (takes.includes(wanted)) return { codec: wanted };
  const codec = takes[0]!;
  if (takes.length === 1 && takes[0] === 'none') return { codec };
  return { codec, note: `the ${sink} sink takes ${takes.filter((c) => c !== 'none').join(', ')}, not ${wanted}; using ${codec}` };
}

/**
 * The codec asked for: `compression` (unset: gzip), where the older gzip
 * switch, when false, turns gzip into none. Undefined for an unknown name.
 */
export function configuredCodec(compression: string | undefined, gzip: boolean): Codec | undefined {
  const named = compression === undefined || compression === '' ? 'gzip' : compression;
  if (!(CODECS as readonly string[]).includes(named)) return undefined;
  return named === 'gzip' && !gzip ? 'none' : (named as Codec);
}
