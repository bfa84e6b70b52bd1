import type { FastifyServerOptions } from 'fastify';
import { redactUrls } from '../contract/redact.ts';

function redactValue(v: unknown, depth = 0): unknown {
  if (typeof v === 'string') return redactUrls(v);
  if (depth > 4 || v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) return v.map((x) => redactValue(x, depth + 1));
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, redactValue(x, depth + 1)]));
}

/**
 * The webhook's JSON logger. Every string that reaches a log line, in the
 * message or in its fields, goes through redactUrls: error messages from the
 * API client or the core may quote an endpoint with credentials in it.
 */
export function webhookLogger(opts: { level: string; stream?: { write(line: string): void } }): NonNullable<FastifyServerOptions['logger']> {
  return {
    level: opts.level,
    base: { app: 'jobharvest-webhook' },
    ...(opts.stream ? { stream: opts.stream } : {}),
    hooks: {
      logMethod(args: unknown[], method: (...a: unknown[]) => void) {
        method.apply(this, args.map((a) => redactValue(a)));
      },
    },
  } as NonNullable<FastifyServerOptions['logger']>;
}

/** For lines written before the app exists (start-up, certificates, the Kubernetes side). */
export function earlyLog(level: string, msg: string, extra?: object): void {
  process.stderr.write(JSON.stringify(redactValue({ level, time: Date.now(), app: 'jobharvest-webhook', msg, ...extra })) + '\n');
}
