// Wires the stages: source (discover + tail + parse) -> batcher -> delivery
// (sink) -> checkpoint, and runs the SIGTERM drain against its deadline. It
// knows nothing of the process around it: the sidecar's run.ts adds the
// termination message, the metrics server and the exit code.
import { Batcher } from './delivery/batcher.ts';
import { CheckpointStore, type CheckpointBackend } from './delivery/checkpoint.ts';
import { ConfigError, type EngineOptions } from './config.ts';
import { DeadLetter, type DeadLetterSink } from './delivery/deadletter.ts';
import { Delivery } from './delivery/delivery.ts';
import { log, redactUrl } from './log.ts';
import type { LogRecord } from './records/record.ts';
import { SINK_MODULES } from './sinks/registry.ts';
import type { Sink } from './delivery/sink.ts';
import type { SinkContext } from './sinks/types.ts';
import type { LogSource, SourceOptions } from './sources/source.ts';
import { NodeSource, type NodeSourceOptions } from './sources/node/node-source.ts';
import { drainOutcomeOf, type DrainLosses, type DrainOutcome } from './outcome.ts';
import { newStats, type Stats } from './stats.ts';
import { shapingOn } from './shaping-settings.ts';
import type { Shaper } from './shape/shaper.ts';
import { HttpClient, type HttpClientEvents } from './sinks/http/client.ts';
import type { CheckpointEntry } from './delivery/checkpoint.ts';

export const CHECKPOINT_INTERVAL_MS = 1000;

/** The summary line's counts; those that decide the outcome are `DrainLosses`. */
export interface Summary extends DrainLosses {
  readonly outcome: DrainOutcome;
  readonly lines_read: number;
  readonly lines_shipped: number;
  readonly bytes_shipped: number;
  readonly requests: number;
  readonly retries: number;
  readonly dead_letter_overflow_lines: number;
  readonly dead_letter_overflow_bytes: number;
  readonly unreadable_bytes: number;
  readonly malformed_lines: number;
  readonly truncated_records: number;
  readonly files: number;
  readonly symlinks_skipped: number;
  /** Shaping: records joined from several lines, JSON lines that became fields, JSON lines too wide for fields, mask matches. */
  readonly multiline_records?: number;
  readonly json_records?: number;
  readonly json_too_wide?: number;
  readonly masked?: number;
  readonly drain_ms: number;
}

export async function loadSink(cfg: EngineOptions, events?: HttpClientEvents): Promise<{ sink: Sink; http?: HttpClient }> {
  const load = SINK_MODULES[cfg.sink];
  if (!load) throw new ConfigError([`sink '${cfg.sink}' is not available in this sidecar build`]);
  let client: HttpClient | undefined;
  const ctx: SinkContext = {
    config: cfg,
    http: () => (client ??= new HttpClient(cfg, events)),
  };
  const mod = await load();
  const sink = await mod.createSink(ctx);
  return { sink, http: client };
}

export interface PipelineOptions {
  /** Injected in tests, or built by a program that uses the engine; otherwise loaded from the registry. */
  readonly sink?: Sink;
  /** Where progress is kept; default: the checkpoint file in the state directory. */
  readonly checkpoint?: CheckpointBackend;
  /** What happens to undeliverable records; default: the dead-letter file in the state directory. */
  readonly deadLetter?: DeadLetterSink;
  /** Ends a drain at once, as its deadline would (the harvester on losing leadership). */
  readonly signal?: AbortSignal;
  /**
   * Called with the positions just saved: 'running' after every checkpoint
   * save, the outcome once at the end of the drain. The sidecar writes them
   * into its termination message.
   */
  readonly onCheckpoint?: (state: 'running' | DrainOutcome, entries: ReadonlyMap<string, CheckpointEntry>, stats: Readonly<Stats>) => void;
  /** More fields for the start line (the sidecar's metrics port). */
  readonly describe?: Readonly<Record<string, unknown>>;
}

/** The state directory, which the default checkpoint and dead-letter backends need. */
function stateDirOf(config: EngineOptions, what: string): string {
  if (config.stateDir === undefined) throw new ConfigError([`${what} needs a state directory (stateDir) or a backend of its own`]);
  return config.stateDir;
}

export class Pipeline {
  readonly stats: Stats = newStats();
  private readonly store: CheckpointBackend;
  private readonly deadLetter: DeadLetterSink;
  private source!: LogSource;
  private batcher!: Batcher;
  private shaper: Shaper | undefined;
  private delivery!: Delivery;
  private sink!: Sink;
  private http: HttpClient | undefined;
  private checkpointTimer: NodeJS.Timeout | undefined;
  private dirty = false;
  private saving: Promise<void> | undefined;
  private draining: Promise<Summary> | undefined;
  private idleCheck = false;
  private flushOnIdle = false;

  constructor(
    readonly config: EngineOptions,
    private readonly options: PipelineOptions = {},
  ) {
    this.store = options.checkpoint ?? new CheckpointStore(stateDirOf(config, 'the checkpoint'), config.identity.podUid);
    this.deadLetter = options.deadLetter ?? new DeadLetter(stateDirOf(config, 'the dead-letter file'), config.identity, this.stats, config.deadLetterMaxBytes ?? 0);
  }

  /** Batches being delivered; 0 before the start. */
  get inFlight(): number {
    return this.delivery === undefined ? 0 : this.delivery.inFlightCount;
  }

  /** Log files being followed; 0 before the start. */
  get openFiles(): number {
    return this.source === undefined ? 0 : this.source.openFiles;
  }

  async start(): Promise<void> {
    const cfg = this.config;
    try {
      await this.store.init();
    } catch (err) {
      throw new ConfigError([`state directory ${cfg.stateDir} is not usable: ${(err as Error).message}`]);
    }
    if (this.options.sink) this.sink = this.options.sink;
    else ({ sink: this.sink, http: this.http } = await loadSink(cfg, { codecFallback: () => void this.stats.codecFallbacks++ }));
    const checkpoint = await this.store.load();
    this.delivery = new Delivery(this.sink, this.deadLetter, this.stats, { maxInFlight: cfg.maxInFlight });
    this.batcher = new Batcher({ maxBytes: cfg.batchMaxBytes, maxRecords: cfg.batchMaxRecords, maxWaitMs: cfg.batchMaxWaitMs }, (b) => this.delivery.submit(b));
    let sourceOptions: SourceOptions = {
      config: cfg,
      stats: this.stats,
      checkpoint,
      emit: (records) => this.emit(records),
      onProgress: () => this.markProgress(),
    };
    if (shapingOn(cfg.shaping)) {
      // Only pods that turn shaping on parse it (and re2js).
      const { Shaper } = await import('./shape/shaper.ts');
      const shaper = new Shaper(cfg.shaping, this.stats, (records) => this.emitShaped(records), undefined, { jsonPreparer: this.sink.jsonPreparer });
      this.shaper = shaper;
      sourceOptions = { ...sourceOptions, emit: shaper.push, endFile: (file) => shaper.endFile(file) };
    }
    if (cfg.mode === 'api') {
      // Only api-mode pods parse the API client.
      const { ApiSource } = await import('./sources/api/api-source.ts');
      this.source = new ApiSource(sourceOptions);
    } else {
      const { logDir, pollMs } = cfg;
      if (logDir === undefined || pollMs === undefined) throw new ConfigError(['node mode needs the log directory (logDir) and the poll interval (pollMs)']);
      const nodeOptions: NodeSourceOptions = { ...sourceOptions, config: { ...cfg, logDir, pollMs } };
      this.source = new NodeSource(nodeOptions);
    }
    await this.source.start();
    if (cfg.compressionNote) log.warn(cfg.compressionNote);
    this.checkpointTimer = setInterval(() => void this.saveCheckpoint(), CHECKPOINT_INTERVAL_MS);
    log.info('sidecar started', {
      sink: cfg.sink,
      endpoint: redactUrl(cfg.endpoint),
      compression: cfg.compression,
      ...this.source.describe,
      stateDir: cfg.stateDir,
      resumedFiles: checkpoint.size,
      ...this.options.describe,
    });
  }

  private async emit(records: LogRecord[]): Promise<void> {
    this.stats.linesRead += records.length;
    for (const r of records) this.batcher.add(r);
    if (!this.idleCheck) {
      this.idleCheck = true;
      setImmediate(this.sendIfIdle);
    }
    if (this.delivery.saturated) await this.delivery.waitForCapacity();
  }

  /**
   * emit() for records out of the shaping stage, which counts the lines it was
   * given itself. A copy rather than a call from emit(): the default path stays
   * one async call per read.
   */
  private async emitShaped(records: LogRecord[]): Promise<void> {
    for (const r of records) this.batcher.add(r);
    if (!this.idleCheck) {
      this.idleCheck = true;
      setImmediate(this.sendIfIdle);
    }
    if (this.delivery.saturated) await this.delivery.waitForCapacity();
  }

  /**
   * Runs once the reads that were ready have been handled. With nothing in
   * flight, waiting for BATCH_MAX_WAIT_MS would only add latency (the first
   * request of a pod above all): send what there is now. While requests are
   * in flight, records keep accumulating into full batches, as TCP's Nagle
   * algorithm does with segments.
   */
  private readonly sendIfIdle = (): void => {
    this.idleCheck = false;
    if (this.delivery.inFlightCount === 0 && !this.delivery.saturated) this.batcher.flush();
    else if (!this.flushOnIdle) {
      // Like Nagle once the last segment is acknowledged: when the pipe empties,
      // what gathered meanwhile goes at once. Otherwise the tail of a burst (the
      // end of a file above all) would sit out BATCH_MAX_WAIT_MS.
      this.flushOnIdle = true;
      void this.delivery.flush().then(() => {
        this.flushOnIdle = false;
        this.batcher.flush();
      });
    }
  };

  /**
   * An acknowledgement moved a committed offset: persist it at once rather
   * than on the next timer tick, so a SIGKILL re-sends at most the batches
   * that were in flight. Saves coalesce: progress during a write triggers one
   * more write after it, never a queue of them.
   */
  private markProgress(): void {
    this.dirty = true;
    if (this.saving) return;
    this.saving = (async () => {
      while (this.dirty) if (!(await this.saveCheckpoint())) break;
    })().finally(() => {
      this.saving = undefined;
    });
  }

  private async saveCheckpoint(): Promise<boolean> {
    if (!this.dirty) return true;
    this.dirty = false;
    try {
      const entries = this.source.entries();
      await this.store.save(entries);
      this.stats.checkpointWrites++;
      // A sidecar killed from here on leaves these positions in its container status.
      this.options.onCheckpoint?.('running', entries, this.stats);
      return true;
    } catch (err) {
      this.dirty = true;
      log.error('writing the checkpoint failed', { error: err });
      return false;
    }
  }

  /**
   * SIGTERM: read all files to EOF, flush, wait for acknowledgements, write
   * the final checkpoint. Everything not acknowledged when the budget runs
   * out goes to the dead-letter file and is reported as unsent.
   */
  drain(): Promise<Summary> {
    this.draining ??= this.runDrain();
    return this.draining;
  }

  private async runDrain(): Promise<Summary> {
    const started = Date.now();
    // Keep a slice of the budget for the dead-letter and checkpoint writes.
    const budget = this.config.drainMs - Math.min(2000, Math.floor(this.config.drainMs / 5));
    let deadlineHit = false;
    let onDeadline!: () => void;
    const deadline = new Promise<void>((resolve) => {
      onDeadline = resolve;
    });
    const hit = (): void => {
      deadlineHit = true;
      onDeadline();
    };
    // setTimeout fires at once past 2^31-1 ms (24.8 days); longer budgets wait that long.
    const timer = setTimeout(hit, Math.min(budget, 2 ** 31 - 1));
    if (this.options.signal?.aborted) hit();
    else this.options.signal?.addEventListener('abort', hit, { once: true });
    log.info('draining', { budgetMs: budget });

    // Open multiline events go out after the source's last lines and before the final batch.
    const read = this.source
      .flush()
      .then(() => this.shaper?.flush())
      .then(() => this.batcher.flush());
    await Promise.race([read, deadline]);
    if (!deadlineHit) await Promise.race([this.delivery.flush(), deadline]);
    clearTimeout(timer);
    this.options.signal?.removeEventListener('abort', hit);
    if (deadlineHit) {
      if (this.deadLetter.file) log.warn('drain deadline reached; what is not acknowledged goes to the dead-letter file', { deadLetterFile: this.deadLetter.file });
      else log.warn('drain deadline reached; what is not acknowledged is counted as unsent');
      // Delivery first: that also wakes a source waiting for capacity, so it can see its own shutdown.
      await this.delivery.shutdown();
      await this.source.shutdown();
      await this.shaper?.flush();
      // The records read meanwhile go straight to the dead-letter file; wait for that write.
      this.batcher.flush();
      await this.delivery.flush();
    }
    if (this.checkpointTimer) clearInterval(this.checkpointTimer);
    this.shaper?.stop();
    this.dirty = true;
    await this.saveCheckpoint();
    const unread = await this.source.unreadBytes();
    const entries = this.source.entries();
    await this.source.close();
    await this.deadLetter.close();
    await this.sink.close?.();
    this.http?.close();
    const s = this.stats;
    const counts = {
      lines_read: s.linesRead,
      lines_shipped: s.linesShipped,
      bytes_shipped: s.bytesShipped,
      requests: s.requests,
      retries: s.retries,
      lines_dead_lettered: s.linesDeadLettered,
      lines_unsent: s.linesUnsent,
      dead_letter_overflow_lines: s.deadLetterOverflowLines,
      dead_letter_overflow_bytes: s.deadLetterOverflowBytes,
      unread_bytes: unread,
      unreadable_files: s.unreadableFiles,
      unreadable_bytes: s.unreadableBytes,
      malformed_lines: s.malformed,
      truncated_records: s.truncated,
      files: s.filesOpened,
      symlinks_skipped: s.symlinksSkipped,
      resume_gaps: s.resumeGaps,
      // Only when shaping is on, so a default sidecar's summary line stays as it was.
      ...(this.shaper ? { multiline_records: s.multilineRecords, json_records: s.jsonRecords, json_too_wide: s.jsonTooWide, masked: s.masked } : {}),
      drain_ms: Date.now() - started,
      deadline_hit: deadlineHit,
    };
    const outcome = drainOutcomeOf(counts);
    this.options.onCheckpoint?.(outcome, entries, this.stats);
    // First in the line: the one word to look for.
    return { outcome, ...counts };
  }
}
