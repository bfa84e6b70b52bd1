import type { FastifyServerOptions } from 'fastify';
import type { Log } from '../contract/log.ts';
import { redactUrls } from '../contract/redact.ts';

/**
 * `v` with redactUrls applied to every string in it, down to depth 4. Plain
 * objects and arrays with nothing to redact come back as they are, so the
 * line logged for every admission allocates nothing here; anything else (an
 * Error, a class instance) becomes a plain object of its own enumerable
 * fields, as it always has: an Error's message is not logged through here.
 */
export function redactValue(v: unknown, depth = 0): unknown {
  if (typeof v === 'string') return redactUrls(v);
  if (depth > 4 || v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) {
    let out: unknown[] | undefined;
    for (let i = 0; i < v.length; i++) {
      const r = redactValue(v[i], depth + 1);
      if (r !== v[i]) (out ??= [...v])[i] = r;
    }
    return out ?? v;
  }
  const proto = Object.getPrototypeOf(v);
  if (proto !== Object.prototype && proto !== null) return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, redactValue(x, depth + 1)]));
  let out: Record<string, unknown> | undefined;
  for (const k of Object.keys(v)) {
    const x = (v as Record<string, unknown>)[k];
    const r = redactValue(x, depth + 1);
    if (r !== x) (out ??= Object.fromEntries(Object.entries(v)))[k] = r;
  }
  return out ?? v;
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
    stream: opts.stream ?? batchedStream(process.stdout),
    hooks: {
      logMethod(args: unknown[], method: (...a: unknown[]) => void) {
        method.apply(this, args.map((a) => redactValue(a)));
      },
    },
  } as NonNullable<FastifyServerOptions['logger']>;
}

/** Lines held by batched streams, written out when the process exits. */
const unflushed = new Set<() => void>();
let exitHookSet = false;

/**
 * A log stream that gathers the lines of one turn of the event loop and
 * writes them with one write: every admission logs a line, and a write to
 * stdout is a system call (synchronous for files and pipes on Linux) that
 * cost more than the rest of the line's logging in bench:burst. A line waits
 * at most until the loop's next check phase; the lines of a process that
 * exits are written on its 'exit' event, so none is lost there.
 */
export function batchedStream(out: { write(chunk: string): unknown }, maxBytes = 64 * 1024): { write(line: string): void; flush(): void } {
  let buffered = '';
  let scheduled = false;
  const flush = () => {
    scheduled = false;
    unflushed.delete(flush);
    if (buffered === '') return;
    const chunk = buffered;
    buffered = '';
    out.write(chunk);
  };
  if (!exitHookSet) {
    exitHookSet = true;
    process.on('exit', () => {
      for (const f of [...unflushed]) f();
    });
  }
  return {
    write(line: string) {
      buffered += line;
      if (buffered.length >= maxBytes) return flush();
      if (!scheduled) {
        scheduled = true;
        unflushed.add(flush);
        setImmediate(flush);
      }
    },
    flush,
  };
}

/** For lines written before the app exists (start-up, certificates, the Kubernetes side). */
export const earlyLog: Log = (level, msg, fields) => {
  process.stderr.write(JSON.stringify(redactValue({ level, time: Date.now(), app: 'jobharvest-webhook', msg, ...fields })) + '\n');
};
