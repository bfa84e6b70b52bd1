// Sidecar entry point: `--help`, configuration from the env contract, then the
// pipeline until SIGTERM, then the drain and one summary line.
import { ConfigError, loadConfig, usage } from './config.ts';
import { log } from './log.ts';
import { Pipeline } from './pipeline.ts';

function fail(message: string, code = 2): never {
  log.error(message);
  process.exit(code);
}

async function main(argv: readonly string[]): Promise<void> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(usage());
    return;
  }
  if (argv.length > 0) fail(`unknown argument '${argv[0]}'; all settings come from the environment, see --help`);
  let pipeline: Pipeline;
  try {
    const cfg = loadConfig(process.env);
    log.setLevel(cfg.logLevel);
    pipeline = new Pipeline(cfg);
    await pipeline.start();
  } catch (err) {
    if (err instanceof ConfigError) fail(err.message);
    fail(`start-up failed: ${(err as Error).message}`, 1);
  }
  const onSignal = (signal: NodeJS.Signals): void => {
    log.info('signal received, draining', { signal });
    // The kubelet kills us at the end of the grace period anyway; a second signal changes nothing.
    pipeline.drain().then(
      (summary) => {
        log.info('summary', { ...summary });
        process.exit(0);
      },
      (err: unknown) => {
        log.error('drain failed', { error: err });
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
}

await main(process.argv.slice(2));
