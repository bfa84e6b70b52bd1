import { connect, type Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import { build } from '../../src/http/app.ts';
import { webhookLogger } from '../../src/http/logging.ts';
import { BODY_LIMIT, serverLimits } from '../../src/http/limits.ts';
import { deps, job, optedIn, review } from '../support/fixtures.ts';

async function listening(app: ReturnType<typeof build>): Promise<number> {
  await app.listen({ host: '127.0.0.1', port: 0 });
  return (app.server.address() as { port: number }).port;
}

/** Sends the headers of a POST of `length` bytes and `sent` of them; resolves with what came back once the server closes. */
function halfSent(port: number, length: number, sent: number): { socket: Socket; closed: Promise<string> } {
  const socket = connect(port, '127.0.0.1');
  let text = '';
  socket.on('data', (c) => (text += c.toString('latin1')));
  const closed = new Promise<string>((resolve) => socket.on('close', () => resolve(text)));
  socket.on('error', () => {});
  socket.write(`POST /mutate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n\r\n`);
  socket.write('{'.padEnd(sent, ' '));
  return { socket, closed };
}

describe('the HTTP server\'s limits follow the API server\'s own', () => {
  it('takes its timeouts and connection cap from timeoutSeconds, and its body limit from the API server\'s 3 MiB request limit', () => {
    const l = serverLimits(10);
    expect(l).toMatchObject({ requestTimeoutMs: 10_000, connectionTimeoutMs: 10_000, keepAliveTimeoutMs: 10_000, handshakeTimeoutMs: 10_000, maxConnections: 500 });
    expect(serverLimits(5).maxConnections).toBe(250);
    expect(BODY_LIMIT).toBe(4 * 1024 * 1024);
    const app = build({ deps: deps(), timeoutSeconds: 5 });
    expect(app.server.maxConnections).toBe(250);
    expect(app.server.requestTimeout).toBe(5_000);
    expect(app.server.keepAliveTimeout).toBe(5_000);
    expect(app.server.headersTimeout).toBe(5_000);
    expect(app.server.timeout).toBe(5_000);
  });

  it('closes a connection whose body never finishes arriving, once the request timeout has passed', async () => {
    const app = build({ deps: deps(), limits: { requestTimeoutMs: 300, headersTimeoutMs: 300, connectionTimeoutMs: 300, checkIntervalMs: 100 } });
    const port = await listening(app);
    try {
      const { closed } = halfSent(port, 100_000, 10_000);
      const answer = await closed;
      expect(answer === '' || /^HTTP\/1.1 408/.test(answer)).toBe(true);
    } finally {
      await app.close();
    }
  });

  it('answers 503 and closes the connection when the bytes in flight would pass the budget, and takes requests again once they are given back', async () => {
    const app = build({ deps: deps(), limits: { inFlightBytes: 150_000 } });
    const port = await listening(app);
    try {
      const first = halfSent(port, 100_000, 1_000);
      await new Promise((r) => setTimeout(r, 100));
      const second = halfSent(port, 100_000, 1_000);
      const refused = await second.closed;
      expect(refused).toMatch(/^HTTP\/1.1 503/);
      expect(refused).toMatch(/connection: close/i);
      expect(refused).toMatch(/JH_OVERLOADED/);
      first.socket.destroy();
      await first.closed;
      await new Promise((r) => setTimeout(r, 50));
      const ok = await app.inject({ method: 'POST', url: '/mutate', payload: review(job()) as object });
      expect(ok.statusCode).toBe(200);
    } finally {
      await app.close();
    }
  });

  it('logs a forged review\'s name and namespace cut to Kubernetes\' limits, and reads no namespace that is not a DNS label', async () => {
    const lines: string[] = [];
    const looked: string[] = [];
    const app = build({
      deps: deps({ namespace: (name) => (looked.push(name), optedIn(name)) }),
      logger: webhookLogger({ level: 'info', stream: { write: (l) => lines.push(l) } }),
    });
    const j = job('n'.repeat(1_000_000));
    const huge = 'x'.repeat(1_000_000);
    const res = await app.inject({ method: 'POST', url: '/mutate', payload: review(j, { namespace: huge }) as object });
    expect(res.statusCode).toBe(200);
    expect(res.json().response.allowed).toBe(true);
    expect(looked).toEqual([]);
    expect(lines).toHaveLength(1);
    expect(lines[0]!.length).toBeLessThan(2_000);
    const line = JSON.parse(lines[0]!);
    expect(line.namespace).toMatch(/^x{63}…/);
    expect(line.name).toMatch(/^n{253}…/);
    // A valid name is read and logged whole.
    await app.inject({ method: 'POST', url: '/mutate', payload: review(job('short')) as object });
    expect(looked).toEqual(['team-a']);
    expect(JSON.parse(lines[1]!)).toMatchObject({ namespace: 'team-a', name: 'short' });
    // Not a string at all: logged as its type, never as the value.
    const odd = await app.inject({ method: 'POST', url: '/mutate', payload: review(job(), { namespace: { deep: 'x'.repeat(100_000) } }) as object });
    expect(odd.statusCode).toBe(200);
    expect(JSON.parse(lines[2]!).namespace).toBe('(object)');
    expect(lines[2]!.length).toBeLessThan(2_000);
  });
});
