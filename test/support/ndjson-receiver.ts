// A small NDJSON log server for tests: stores what its handler accepts.
import http from 'node:http';
import { closeServer, decodeBody, listenLocal, localPort } from '../harness/receiver.ts';

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
      const body = decodeBody(Buffer.concat(chunks), req.headers['content-encoding']);
      const docs = body.toString('utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Doc);
      this.received.push(...docs);
      if (this.handler(docs, req, res) === true) {
        this.accepted.push(...docs);
        res.writeHead(200).end('{}');
      }
    });
  });

  async start(): Promise<this> {
    await listenLocal(this.server);
    this.url = `http://127.0.0.1:${localPort(this.server)}/ingest`;
    return this;
  }

  async stop(): Promise<void> {
    await closeServer(this.server);
  }
}
