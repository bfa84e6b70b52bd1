// Whether a parsed line's bytes are valid UTF-8, and so are its message as
// written: an encoder may then copy them instead of the decoded string (whose
// invalid sequences became U+FFFD), and the shaping stage may read JSON from
// them. Runs for every line an OTLP sink or a JSON-parsing shaper sees.
import { isUtf8 } from 'node:buffer';

// A 32-bit view of the chunk last checked: the lines of one chunk come in a row.
let viewOf: Buffer | undefined;
let view: DataView | undefined;

/** ASCII four bytes at a time (the usual log line); anything else goes to the native check. */
export function utf8Valid(src: Buffer, s: number, e: number): boolean {
  if (src !== viewOf) {
    viewOf = src;
    view = new DataView(src.buffer, src.byteOffset, src.byteLength);
  }
  const v = view!;
  let high = 0;
  let i = s;
  for (; i + 4 <= e; i += 4) high |= v.getUint32(i, true);
  for (; i < e; i++) high |= src[i]!;
  if ((high & 0x80808080) === 0) return true;
  return isUtf8(src.subarray(s, e));
}
