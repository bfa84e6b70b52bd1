import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { watchFilePair, type FilePair } from '../../src/tls/file-source.ts';

describe('mounted certificate files (cert-manager and provided modes)', () => {
  it('reports a changed pair for hot reload, and keeps the current one while a file is unreadable', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'jh-certs-'));
    const cert = join(dir, 'tls.crt');
    const key = join(dir, 'tls.key');
    writeFileSync(cert, 'CERT-1');
    writeFileSync(key, 'KEY-1');
    const seen: FilePair[] = [];
    const errors: unknown[] = [];
    const w = watchFilePair(cert, key, { intervalMs: 50, onChange: (p) => seen.push(p), onError: (e) => errors.push(e) });
    expect(w.initial).toEqual({ cert: 'CERT-1', key: 'KEY-1' });
    writeFileSync(cert, 'CERT-2');
    writeFileSync(key, 'KEY-2');
    await new Promise((r) => setTimeout(r, 400));
    w.stop();
    expect(seen.at(-1)).toEqual({ cert: 'CERT-2', key: 'KEY-2' });
    expect(errors).toEqual([]);
  });
});
