// bench:burst's no-op webhook: the same Fastify app, TLS settings and Node
// runtime as jobharvest (src/http/app.ts, bundled, plain node), but its
// admission route answers allowed: true without reading the Job. The bench
// registers it exactly as jobharvest registers itself, so the difference
// between the two is jobharvest's own work per review.
//
// Prints one JSON line on stdout, {"port":…,"ca":"<PEM>"}, then serves until
// SIGTERM. GET /calls answers how many reviews it has allowed, so the bench
// can tell when the API server has started or stopped calling it.
import { build } from '../../src/http/app.ts';
import { defaultConfig } from '../../src/core/config.ts';
import { generateBundle } from '../../src/tls/generate.ts';

const bundle = await generateBundle({ dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] });
const app = build({
  tls: bundle.serving,
  baselineRoute: true,
  deps: { config: defaultConfig(), namespace: () => undefined, serverVersion: () => undefined },
});
let calls = 0;
app.addHook('onResponse', async (req) => {
  // The API server adds ?timeout=… to the webhook's URL.
  if (req.routeOptions.url === '/allow') calls++;
});
app.get('/calls', async () => ({ calls }));
await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT ?? 0) });
process.stdout.write(`${JSON.stringify({ port: (app.server.address() as { port: number }).port, ca: bundle.ca.cert })}\n`);
process.once('SIGTERM', () => void app.close().then(() => process.exit(0)));
