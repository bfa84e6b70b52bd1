import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { noClusterMessage } from '../../src/webhook/run.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const TSX = join(ROOT, 'node_modules/.bin/tsx');

/** `jobharvest webhook` as its own process, with no kubeconfig anywhere it looks. */
function webhook(env: Record<string, string>, ...args: string[]) {
  const home = mkdtempSync(join(tmpdir(), 'jh-nokube-'));
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'KUBECONFIG' && !k.startsWith('KUBERNETES_')));
  const r = spawnSync(TSX, [join(ROOT, 'src/cli/main.ts'), 'webhook', '--host', '127.0.0.1', '--port', '0', ...args], {
    encoding: 'utf8',
    cwd: ROOT,
    env: { ...base, HOME: home, ...env },
    timeout: 20_000,
  });
  return { code: r.status, signal: r.signal, stderr: r.stderr };
}

describe('the webhook without a cluster', () => {
  it('in a pod with no service-account token: exits non-zero and says how to fix it', () => {
    const r = webhook({ KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443' });
    expect(r.signal).toBeNull();
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('JH_BAD_CONFIG');
    expect(r.stderr).toContain('no service-account token');
    expect(r.stderr).toContain('automountServiceAccountToken: true');
    expect(r.stderr).toContain('--standalone');
    expect(r.stderr).not.toContain('webhook listening');
  });

  it('outside a cluster with no kubeconfig: exits non-zero unless --standalone', () => {
    const r = webhook({});
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('no kubeconfig found');
  });

  it('names the cause that applies', () => {
    expect(noClusterMessage({ KUBERNETES_SERVICE_HOST: '10.96.0.1' })).toMatch(/^running in a pod with no service-account token/);
    expect(noClusterMessage({})).toMatch(/^no kubeconfig found/);
  });
});
