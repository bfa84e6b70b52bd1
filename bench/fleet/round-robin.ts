// The webhook Service of bench:fleet: a TCP round-robin over the replicas'
// ports (argv), TLS passed through, as kube-proxy spreads connections. A
// process of its own, so that proxying costs the bench's own event loop
// (which creates the Jobs and times them) nothing. Prints `port <n>` once
// listening, and `connections <a>/<b>/…` when told to stop (SIGTERM).
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';

const ports = process.argv.slice(2).map(Number);
const connections = ports.map(() => 0);
let next = 0;
const server = createServer((client: Socket) => {
  const i = next++ % ports.length;
  connections[i]!++;
  const up = connect(ports[i]!, '127.0.0.1');
  client.pipe(up).pipe(client);
  const end = () => (client.destroy(), up.destroy());
  client.on('error', end);
  up.on('error', end);
});
server.listen(0, '127.0.0.1', () => console.log(`port ${(server.address() as AddressInfo).port}`));
process.on('SIGTERM', () => {
  console.log(`connections ${connections.join('/')}`);
  process.exit(0);
});
