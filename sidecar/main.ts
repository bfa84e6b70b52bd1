// Sidecar entry point. Only the signal latch is loaded before the SIGTERM
// handler goes in; the started marker, a short pause (START_PAUSE_MS), then
// the configuration, the pipeline and the sinks follow through dynamic imports, so the window in which a SIGTERM could be lost is
// Node's own boot (see signals.ts), and the kubelet's preStop hook holds its
// SIGTERM back until then (started.ts). `--wait-started` is that hook: it
// loads the marker's module alone, not the sidecar, to be as light and quick
// as a second Node process in the sidecar's container can be. `--help` is not
// the sidecar's run either; neither installs anything.
import { catchSignals, pauseUnlessSignalled } from './signals.ts';

// The kubelet starts the Job's own containers right after the sidecar's
// (~20 ms later on the real node, then their create and start, ~50 ms), and
// loading the pipeline costs ~100 ms of CPU. On a busy node that load slowed
// the main container's own start, busybox sh reaching its `trap` included: a
// pod deleted as its main container started then had that container lose its
// own SIGTERM (signalled ~4 ms after its start) more often than without
// jobharvest, and wait out the grace period. So the sidecar, once its latch
// and marker are in, leaves the CPU to the Job's containers for this long
// before it loads the rest. Nothing is lost: it reads every file from byte 0.
// A signal ends the pause at once (a drain never waits for it). 100 ms covers
// the main container's start; 250 ms moved the load onto pods deleted ~0.5 s
// after their start, which then took 0.4 s longer to end (early-delete test).
export const START_PAUSE_MS = 100;

const argv = process.argv.slice(2);
if (argv.length === 1 && argv[0] === '--wait-started') {
  const { waitStarted } = await import('./started.ts');
  if (!(await waitStarted(process.env))) {
    const { log } = await import('./log.ts');
    log.warn('the sidecar did not report started in time; letting the kubelet go on');
  }
} else {
  const handlerAtMs = argv.length === 0 ? catchSignals() : undefined;
  if (handlerAtMs !== undefined) {
    // The marker before the pause: the preStop hook's wait ends with the latch, not with the pipeline's load.
    const { markStarted } = await import('./started.ts');
    markStarted(process.env);
    await pauseUnlessSignalled(START_PAUSE_MS);
  }
  const { main } = await import('./run.ts');
  await main(argv, handlerAtMs);
}
