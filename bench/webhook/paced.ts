// Open-loop load at a fixed rate: one request every 1/rate s, whether or not
// earlier ones answered. autocannon's rate mode sends each second's budget in
// a burst at the start of the second, which measures its own queueing rather
// than the server's latency at that rate.
import { Agent, request } from 'node:https';

export interface PacedResult {
  sent: number;
  errors: number;
  p50: number;
  p99: number;
  max: number;
}

export async function paced(opts: {
  port: number;
  path: string;
  /** The request body, or a function of the request's index. */
  body: string | ((i: number) => string);
  rate: number;
  seconds: number;
  /** Called after `every` requests have been answered, with their count. */
  progress?: { every: number; at: (answered: number) => void | Promise<void> };
}): Promise<PacedResult> {
  const agent = new Agent({ keepAlive: true, maxSockets: 64, rejectUnauthorized: false });
  const total = Math.round(opts.rate * opts.seconds);
  const intervalMs = 1000 / opts.rate;
  const latencies: number[] = [];
  let errors = 0;
  let answered = 0;
  const inflight: Promise<void>[] = [];
  const start = performance.now();
  for (let i = 0; i < total; i++) {
    const due = start + i * intervalMs;
    const wait = due - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait - 0.5));
    while (performance.now() < due) await new Promise((r) => setImmediate(r));
    const body = typeof opts.body === 'string' ? opts.body : opts.body(i);
    const sentAt = performance.now();
    inflight.push(
      new Promise<void>((resolve) => {
        const req = request(
          { host: '127.0.0.1', port: opts.port, path: opts.path, method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } },
          (res) => {
            res.resume();
            res.on('end', () => {
              if (res.statusCode === 200) latencies.push(performance.now() - sentAt);
              else errors++;
              answered++;
              if (opts.progress && answered % opts.progress.every === 0) void opts.progress.at(answered);
              resolve();
            });
          },
        );
        req.on('error', () => {
          errors++;
          answered++;
          resolve();
        });
        req.end(body);
      }),
    );
  }
  await Promise.all(inflight);
  agent.destroy();
  latencies.sort((a, b) => a - b);
  const q = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] ?? NaN;
  return { sent: total, errors, p50: q(0.5), p99: q(0.99), max: latencies.at(-1) ?? NaN };
}
