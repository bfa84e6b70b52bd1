// Sidecar entry point. Only the signal latch is loaded before the SIGTERM
// handler goes in; the configuration, the pipeline and the sinks follow
// through a dynamic import, so the window in which a SIGTERM could be lost is
// Node's own boot (see signals.ts), and the kubelet's preStop hook holds its
// SIGTERM back until then (started.ts). `--wait-started` is that hook: it
// loads the marker's module alone, not the sidecar, to be as light and quick
// as a second Node process in the sidecar's container can be. `--help` is not
// the sidecar's run either; neither installs anything.
import { catchSignals } from './signals.ts';

const argv = process.argv.slice(2);
if (argv.length === 1 && argv[0] === '--wait-started') {
  const { waitStarted } = await import('./started.ts');
  if (!(await waitStarted(process.env))) {
    const { log } = await import('./log.ts');
    log.warn('the sidecar did not report started in time; letting the kubelet go on');
  }
} else {
  const handlerAtMs = argv.length === 0 ? catchSignals() : undefined;
  const { main } = await import('./run.ts');
  await main(argv, handlerAtMs);
}
