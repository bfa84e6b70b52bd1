/**
 * What a replica does when it is told to stop (a rollout, a drain): the API
 * server keeps sending reviews to it until its endpoints drop the pod, so it
 * says "not ready" at once but answers reviews until --shutdown-delay-seconds
 * are over, then exits 0.
 */
import { spawn } from 'node:child_process';
import { request } from 'node:https';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { job, review } from '../support/fixtures.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const TSX = join(ROOT, 'node_modules/.bin/tsx');

function get(port: number, method: 'GET' | 'POST', path: string, body?: string): Promise<{ status: number; body: string } | { error: string }> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, method, path, rejectUnauthorized: false, agent: false, headers: body ? { 'content-type': 'application/json' } : {} }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('error', (err: NodeJS.ErrnoException) => resolve({ error: err.code ?? err.message }));
    req.end(body);
  });
}

const body = JSON.stringify(review(job('j'), { uid: 'u-1', name: 'j' }));

describe('the webhook after SIGTERM', () => {
  it('is not ready at once, answers reviews through --shutdown-delay-seconds, then stops listening and exits 0', async () => {
    const child = spawn(TSX, [join(ROOT, 'src/cli/main.ts'), 'webhook', '--standalone', '--host', '127.0.0.1', '--port', '0', '--shutdown-delay-seconds', '3'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    try {
      const port = await new Promise<number>((resolve, reject) => {
        const t = setInterval(() => {
          const m = /"url":"https:\/\/127\.0\.0\.1:(\d+)\/mutate"/.exec(out);
          if (m) {
            clearInterval(t);
            resolve(Number(m[1]));
          } else if (child.exitCode !== null) {
            clearInterval(t);
            reject(new Error(`the webhook exited ${child.exitCode}:\n${out}`));
          }
        }, 50);
      });
      expect(await get(port, 'GET', '/readyz')).toMatchObject({ status: 200 });

      const signalled = Date.now();
      child.kill('SIGTERM');
      await new Promise((r) => setTimeout(r, 300));
      const ready = await get(port, 'GET', '/readyz');
      expect(ready).toMatchObject({ status: 503 });
      expect((ready as { body: string }).body).toContain('shutting down');
      // Still serving: a review sent meanwhile gets its patch.
      const answered = await get(port, 'POST', '/mutate', body);
      expect(answered).toMatchObject({ status: 200 });
      const response = (JSON.parse((answered as { body: string }).body) as { response: { uid: string; allowed: boolean; patch?: string } }).response;
      expect(response).toMatchObject({ uid: 'u-1', allowed: true });
      expect(Buffer.from(response.patch ?? '', 'base64').toString()).toContain('"name":"jobharvest"');
      await new Promise((r) => setTimeout(r, 1500));
      expect(await get(port, 'GET', '/readyz')).toMatchObject({ status: 503 });

      expect(await exited).toBe(0);
      const tookMs = Date.now() - signalled;
      expect(tookMs).toBeGreaterThanOrEqual(3000);
      expect(tookMs).toBeLessThan(10_000);
      expect(await get(port, 'GET', '/readyz')).toMatchObject({ error: 'ECONNREFUSED' });
    } finally {
      child.kill('SIGKILL');
    }
  }, 30_000);

  it('refuses a delay outside 0-60 before it starts', async () => {
    const { webhookOptions } = await import('../../src/cli/webhook-flags.ts');
    const base = { host: '127.0.0.1', port: '0', serviceName: 'jh', logReaderClusterrole: 'r', apiRbac: true, standalone: true };
    expect(webhookOptions({ ...base, shutdownDelaySeconds: '5' }).shutdownDelayMs).toBe(5000);
    expect(webhookOptions(base).shutdownDelayMs).toBe(0);
    expect(() => webhookOptions({ ...base, shutdownDelaySeconds: '61' })).toThrow(/--shutdown-delay-seconds 61: expected 0-60/);
    expect(() => webhookOptions({ ...base, shutdownDelaySeconds: '-1' })).toThrow(/expected 0-60/);
  });
});
