// Sidecar entry point. Only the signal latch is loaded before the SIGTERM
// handler goes in; the configuration, the pipeline and the sinks follow
// through a dynamic import, so the window in which a SIGTERM could be lost is
// Node's own boot (see signals.ts). `--help` and `--wait-started` are not the
// sidecar's run and install nothing.
import { catchSignals } from './signals.ts';

const argv = process.argv.slice(2);
const handlerAtMs = argv.length === 0 ? catchSignals() : undefined;
const { main } = await import('./run.ts');
await main(argv, handlerAtMs);
