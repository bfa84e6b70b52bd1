import { createConnection, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP relay to a real server that holds back everything the server sends
 * for `lagMs`, in order: what a client on a loaded or distant link sees. TLS
 * passes through untouched, so the client still verifies the real server.
 * Through it, a watch delivers its events `lagMs` late, and every read
 * answers at least `lagMs` late too.
 */
export class LaggingLink {
  private readonly sockets = new Set<Socket>();
  private constructor(
    private readonly server: Server,
    readonly port: number,
  ) {}

  static async start(upstream: { host: string; port: number }, lagMs: number): Promise<LaggingLink> {
    const server = createServer((client) => {
      const up = createConnection(upstream);
      client.on('data', (chunk) => up.write(chunk));
      // What the client sends goes at once; its hang-up too.
      client.on('error', () => up.destroy()).on('close', () => up.destroy());
      // Timers of equal delay fire in the order they were set: the stream stays
      // in order, and the server's hang-up comes after its last bytes.
      up.on('data', (chunk) => setTimeout(() => client.destroyed || client.write(chunk), lagMs));
      up.on('error', () => {}).on('close', () => setTimeout(() => client.destroy(), lagMs));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const address = server.address();
    if (!address || typeof address === 'string') throw new Error('the lagging link has no port');
    const link = new LaggingLink(server, address.port);
    server.on('connection', (s) => {
      link.sockets.add(s);
      s.on('close', () => link.sockets.delete(s));
    });
    return link;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
