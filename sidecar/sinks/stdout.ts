// Debugging sink: NDJSON documents on the sidecar's stdout, acknowledged once
// the stream has taken them (its backpressure is honoured).
import type { Writable } from 'node:stream';
import { recycleBody } from '../encode/body.ts';
import { DocumentEncoder } from '../encode/document.ts';
import type { Sink } from '../delivery/sink.ts';
import type { SinkContext } from './types.ts';

export function createSink(ctx: SinkContext, out: Writable = process.stdout): Sink {
  const encoder = new DocumentEncoder(ctx.config.identity);
  return {
    send(records) {
      const body = encoder.lines(records);
      return new Promise((resolve) => {
        out.write(body, (err) => {
          recycleBody(body);
          resolve(err ? { kind: 'retry', reason: `stdout: ${err.message}` } : { kind: 'ok' });
        });
      });
    },
  };
}
