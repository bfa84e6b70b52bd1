// The webhook under load, in its own process so the load generator does not
// share its event loop. Prints the port it listens on, then serves until killed.
import { build } from '../../src/http/app.ts';
import { defaultConfig } from '../../src/core/config.ts';
import { generateBundle } from '../../src/tls/generate.ts';
import { webhookLogger } from '../../src/http/logging.ts';

const bundle = await generateBundle({ dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'] });
const config = defaultConfig();
const app = build({
  tls: bundle.serving,
  baselineRoute: true,
  // Logging on, as in production (the same logger, its redaction included):
  // the cost of the per-admission log line is part of what is measured.
  logger: webhookLogger({ level: 'info', stream: { write: () => {} } }),
  deps: {
    config,
    namespace: (name) => ({ name, annotations: { 'jobharvest.io/inject': 'enabled' } }),
    serverVersion: () => ({ major: 1, minor: 34 }),
  },
});
await app.listen({ host: '127.0.0.1', port: 0 });
process.stdout.write(`${(app.server.address() as { port: number }).port}\n`);
process.on('SIGTERM', () => void app.close().then(() => process.exit(0)));
