// Generic sink: POST the batch as NDJSON, one flat JSON document per record.
import { releaser } from '../encode/body.ts';
import { DocumentEncoder } from '../encode/document.ts';
import { attempt } from './http/result.ts';
import type { Sink } from '../delivery/sink.ts';
import type { SinkContext } from './types.ts';

export function createSink(ctx: SinkContext): Sink {
  const url = ctx.config.endpoint!;
  const client = ctx.http();
  const encoder = new DocumentEncoder(ctx.config.identity);
  return {
    async send(records, signal) {
      const body = encoder.lines(records);
      const release = releaser(body);
      try {
        const { result } = await attempt(() => client.post(url, body, { contentType: 'application/x-ndjson', signal, release }));
        return result;
      } finally {
        release();
      }
    },
  };
}
