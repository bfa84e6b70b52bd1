// A codec's floor: the CPU it alone spends on the bodies a sender compresses.
// The bodies are the ones a receiver got in the same run, with their codec
// undone, so the floor is measured on exactly what the sidecar compressed
// (its OTLP protobuf or NDJSON, not the raw log text), with the sidecar's own
// compress call and settings.
import { compressBody } from '../../sidecar/encode/compress.ts';
import type { Codec } from '../../src/contract/codec.ts';

const GZIP_LEVEL = 1;

export interface Floor {
  /** CPU-seconds per byte of body. */
  readonly cpuPerByte: number;
  /** Compressed size over body size. */
  readonly sizeRatio: number;
  readonly bytesMeasured: number;
}

/** Compresses `bodies` in a loop, one by one as requests are, for at least `minCpuSeconds` of CPU (the receivers are idle by then). */
export function measureFloor(bodies: readonly Buffer[], codec: Exclude<Codec, 'none'>, minCpuSeconds = 3): Floor {
  if (bodies.length === 0) throw new Error('no bodies captured');
  // One pass first: page in the bodies and warm the code.
  let inBytes = 0;
  let outBytes = 0;
  for (const b of bodies) {
    inBytes += b.length;
    outBytes += compressBody(codec, b, GZIP_LEVEL).body.length;
  }
  const sizeRatio = outBytes / inBytes;
  const start = process.cpuUsage();
  let measured = 0;
  let cpu: number;
  do {
    for (const b of bodies) compressBody(codec, b, GZIP_LEVEL);
    measured += inBytes;
    const used = process.cpuUsage(start);
    cpu = (used.user + used.system) / 1e6;
  } while (cpu < minCpuSeconds);
  return { cpuPerByte: cpu / measured, sizeRatio, bytesMeasured: measured };
}

/**
 * The most log MiB per CPU-second a sender could reach if compressing its
 * bodies were all it did: the log bytes over the CPU the codec alone needs
 * for all the bodies of the run (`bodyBytes`).
 */
export function floorMiBPerCpuSecond(floor: Floor, logBytes: number, bodyBytes: number): number {
  return logBytes / 2 ** 20 / (floor.cpuPerByte * bodyBytes);
}
