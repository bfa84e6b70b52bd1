import { X509Certificate, createPrivateKey } from 'node:crypto';
import { readFileSync, watch, type FSWatcher } from 'node:fs';
import { dirname } from 'node:path';

export interface FilePair {
  cert: string;
  key: string;
}

/** Throws unless the certificate parses and the key is the one it was issued for. */
function checkPair(p: FilePair): void {
  if (!new X509Certificate(p.cert).checkPrivateKey(createPrivateKey(p.key))) {
    throw new Error('the key does not match the certificate');
  }
}

/**
 * A certificate and key mounted from a Secret (cert-manager or provided mode).
 * Kubelet updates such mounts by swapping a symlink, which fs.watch reports
 * unreliably, so a poll backs the watch up. A half-written pair (a file cut
 * short, or a new certificate beside the old key) is never published: the
 * current pair stays in service and the files are read again on the next check.
 */
export function watchFilePair(certFile: string, keyFile: string, opts: { intervalMs?: number; onChange: (p: FilePair) => void; onError: (e: unknown) => void }) {
  const read = (): FilePair => ({ cert: readFileSync(certFile, 'utf8'), key: readFileSync(keyFile, 'utf8') });
  let current = read();
  checkPair(current);
  const check = () => {
    try {
      const next = read();
      if (next.cert === current.cert && next.key === current.key) return;
      checkPair(next);
      current = next;
      opts.onChange(next);
    } catch (e) {
      opts.onError(e);
    }
  };
  const timer = setInterval(check, opts.intervalMs ?? 10_000);
  timer.unref();
  let watcher: FSWatcher | undefined;
  try {
    watcher = watch(dirname(certFile), () => setTimeout(check, 200).unref());
  } catch {
    // Polling alone is enough.
  }
  return {
    initial: current,
    stop() {
      clearInterval(timer);
      watcher?.close();
    },
  };
}
