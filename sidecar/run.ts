// The sidecar's run, loaded by the entry point (main.ts) once the SIGTERM latch
// and the started marker are in place and the start pause is over: `--help`, configuration from the env contract, then the
// pipeline until SIGTERM, then the drain and one summary line. The engine
// (pipeline.ts) knows no process: the termination message, the metrics server
// and the exit code are the sidecar's, added here.
import { ConfigError, loadConfig, usage, type Config } from './config.ts';
import { log } from './log.ts';
import { ENV } from '../src/contract/env.ts';
import { startMetrics } from './metrics.ts';
import { exitCodeOf, forcedExitCode } from './outcome.ts';
import { Pipeline, type Summary } from './pipeline.ts';
import { whenSignalled } from './signals.ts';
import type { Stats } from './stats.ts';
import { TerminationReport } from './termination.ts';

// A Job whose podFailurePolicy could match the sidecar's exit code gets one from
// the webhook that none of its rules matches: every non-zero exit uses it then,
// crashes included, and the reason stays in the log line.
const forced = forcedExitCode(process.env, ENV.FAILURE_EXIT_CODE.name);
/** The sidecar's own diagnostics, bounded: the webhook's ephemeral-storage share for it (src/core/resources.ts) covers this with room. */
const OWN_LOG_BYTES = 4 * 1024 * 1024;
const exitWith = (code: number): never => process.exit(code === 0 || forced === undefined ? code : forced);

function fail(message: string, code = 2): never {
  log.error(message);
  return exitWith(code);
}

/**
 * The engine as the sidecar runs it, from its env settings: the termination
 * message follows every checkpoint save and ends with the outcome, and the
 * metrics server (JOBHARVEST_METRICS_PORT) serves the pipeline's counters
 * from before the start to the end of the drain.
 */
export class SidecarPipeline {
  readonly pipeline: Pipeline;
  private readonly termination: TerminationReport;
  private metrics: { close(): Promise<void> } | undefined;
  private draining: Promise<Summary> | undefined;

  constructor(readonly config: Config) {
    this.termination = new TerminationReport(config.terminationLog, config.mode, config.sink);
    this.pipeline = new Pipeline(config, {
      onCheckpoint: (state, entries, stats) => this.termination.write(state, entries, stats),
      describe: { metricsPort: config.metricsPort || undefined },
    });
  }

  get stats(): Stats {
    return this.pipeline.stats;
  }

  async start(): Promise<void> {
    const p = this.pipeline;
    if (this.config.metricsPort > 0) this.metrics = await startMetrics(this.config.metricsPort, p.stats, { inFlight: () => p.inFlight, openFiles: () => p.openFiles });
    await p.start();
  }

  drain(): Promise<Summary> {
    this.draining ??= this.pipeline.drain().then(async (summary) => {
      this.termination.close();
      await this.metrics?.close();
      return summary;
    });
    return this.draining;
  }
}

/** `handlerAtMs`: when main.ts installed the signal latch, in ms since the process started (unset for `--help`). */
export async function main(argv: readonly string[], handlerAtMs?: number): Promise<void> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(usage());
    return;
  }
  if (argv.length > 0) fail(`unknown argument '${argv[0]}'; all settings come from the environment, see --help`);
  log.setBudget(OWN_LOG_BYTES);
  // The latch went in before this module loaded: a SIGTERM that arrives while
  // the sidecar is still starting must drain too, not kill it mid-way.
  let pipeline: SidecarPipeline | undefined;
  let signalled = false;
  const drainAndExit = (p: SidecarPipeline): void => {
    p.drain().then(
      (summary) => {
        log.last('summary', { ...summary });
        process.exit(exitCodeOf(summary.outcome, p.config.failureExitCode));
      },
      (err: unknown) => {
        log.error('drain failed', { error: err });
        exitWith(1);
      },
    );
  };
  if (forced !== undefined) {
    process.on('uncaughtException', (err) => fail(`uncaught error: ${err.stack ?? err.message}`, 1));
    process.on('unhandledRejection', (err) => fail(`unhandled rejection: ${String(err)}`, 1));
  }
  // How close a SIGTERM came to the process's start, against when the handler
  // was there to catch it: the preStop hook (started.ts) keeps the first after the second.
  whenSignalled((signal, atMs) => {
    signalled = true;
    log.info('signal received, draining', { signal, sinceStartMs: Math.round(atMs), handlerSinceStartMs: handlerAtMs === undefined ? undefined : Math.round(handlerAtMs) });
    if (pipeline) drainAndExit(pipeline);
  });
  try {
    const cfg = loadConfig(process.env);
    log.setLevel(cfg.logLevel);
    const p = new SidecarPipeline(cfg);
    await p.start();
    pipeline = p;
  } catch (err) {
    if (err instanceof ConfigError) fail(err.message);
    fail(`start-up failed: ${(err as Error).message}`, 1);
  }
  if (signalled) drainAndExit(pipeline);
}
