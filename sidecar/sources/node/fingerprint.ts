// A file's identity beyond (device, inode): a hash of its first line. It
// survives rename and gzip (computed on the decompressed bytes), so the
// plain and the compressed copy of one rotation are recognised as the same
// file, also by a restarted sidecar whose inode numbers mean nothing.
import { createHash } from 'node:crypto';
import type { FileHandle } from 'node:fs/promises';
import zlib from 'node:zlib';

/** At most this much of the head is hashed, for files whose first line is long. */
export const FINGERPRINT_BYTES = 1024;

/**
 * `head` is the start of the file. Returns undefined while the first line is
 * still incomplete (it may grow), unless `final` says the file will not grow.
 */
export function fingerprintOf(head: Buffer, final = false): string | undefined {
  const nl = head.indexOf(10);
  let n: number;
  if (nl >= 0 && nl < FINGERPRINT_BYTES) n = nl + 1;
  else if (head.length >= FINGERPRINT_BYTES) n = FINGERPRINT_BYTES;
  else if (final) n = head.length;
  else return undefined;
  if (n === 0) return undefined;
  return createHash('sha256').update(head.subarray(0, n)).digest('hex').slice(0, 16);
}

export async function plainFingerprint(fh: FileHandle, final = false): Promise<string | undefined> {
  const buf = Buffer.allocUnsafe(FINGERPRINT_BYTES);
  const { bytesRead } = await fh.read(buf, 0, FINGERPRINT_BYTES, 0);
  return fingerprintOf(buf.subarray(0, bytesRead), final);
}

/** Decompresses just enough of a .gz rotation to fingerprint its content. */
export async function gzipFingerprint(fh: FileHandle): Promise<string | undefined> {
  const { size } = await fh.stat();
  // Partial input is fine with a sync flush; grow the read until the first line is in.
  for (let want = 16 * 1024; ; want *= 4) {
    const n = Math.min(want, size);
    const buf = Buffer.allocUnsafe(n);
    const { bytesRead } = await fh.read(buf, 0, n, 0);
    const head = zlib.gunzipSync(buf.subarray(0, bytesRead), { finishFlush: zlib.constants.Z_SYNC_FLUSH });
    const fp = fingerprintOf(head, n >= size);
    if (fp || n >= size) return fp;
  }
}
