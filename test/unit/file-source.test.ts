import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { watchFilePair, type FilePair } from '../../src/tls/file-source.ts';
import { generateBundle } from '../../src/tls/generate.ts';

const names = { dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] };

function files(first: FilePair) {
  const dir = mkdtempSync(join(tmpdir(), 'jh-certs-'));
  const cert = join(dir, 'tls.crt');
  const key = join(dir, 'tls.key');
  writeFileSync(cert, first.cert);
  writeFileSync(key, first.key);
  return { cert, key };
}

describe('mounted certificate files (cert-manager and provided modes)', () => {
  it('reports a changed pair for hot reload', async () => {
    const one = (await generateBundle(names)).serving;
    const two = (await generateBundle(names)).serving;
    const f = files(one);
    const seen: FilePair[] = [];
    const errors: unknown[] = [];
    const w = watchFilePair(f.cert, f.key, { intervalMs: 50, onChange: (p) => seen.push(p), onError: (e) => errors.push(e) });
    expect(w.initial).toEqual(one);
    writeFileSync(f.cert, two.cert);
    writeFileSync(f.key, two.key);
    await sleep(400);
    w.stop();
    expect(seen.at(-1)).toEqual(two);
  });

  it('keeps the current pair while the files are half written, and publishes only a matching pair', async () => {
    const one = (await generateBundle(names)).serving;
    const two = (await generateBundle(names)).serving;
    const f = files(one);
    const seen: FilePair[] = [];
    const errors: unknown[] = [];
    const w = watchFilePair(f.cert, f.key, { intervalMs: 50, onChange: (p) => seen.push(p), onError: (e) => errors.push(e) });
    // The new certificate lands before its key.
    writeFileSync(f.cert, two.cert);
    await sleep(300);
    // Then a key cut short.
    writeFileSync(f.key, two.key.slice(0, 40));
    await sleep(300);
    expect(seen).toEqual([]);
    expect(errors.length).toBeGreaterThan(0);
    writeFileSync(f.key, two.key);
    await sleep(300);
    w.stop();
    expect(seen).toEqual([two]);
  });
});
