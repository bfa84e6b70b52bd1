// A small NDJSON log server for tests: stores what its handler accepts.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import zlib, { gunzipSync } from 'node:zlib';

export interface Doc {
  message: string;
  id: string;
  [k: string]: unknown;
}

/** Return true to store the docs and answer 200; otherwise answer yourself (or never). */
export type Handler = (docs: Doc[], req: http.IncomingMessage, res: http.ServerResponse) => boolean | void;

export class NdjsonReceiver {
  readonly accepted: Doc[] = [];
  /** Everything that arrived, answered or not. */
  readonly received: Doc[] = [];
  requests = 0;
  handler: Handler = () => true;
  url = '';
  private readonly server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      this.requests++;
      let body: Buffer = Buffer.concat(chunks);
      if (req.headers['content-encoding'] === 'gzip') body = gunzipSync(body);
      else if (req.headers['content-encoding'] === 'zstd') body = (zlib as unknown as { zstdDecompressSync(b: Buffer): Buffer }).zstdDecompressSync(body);
      const docs = body.toString('utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Doc);
      this.received.push(...docs);
      if (this.handler(docs, req, res) === true) {
        this.accepted.push(...docs);
        res.writeHead(200).end('{}');
      }
    });
  });

  async start(): Promise<this> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/ingest`;
    return this;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((r) => this.server.close(r));
  }
}
