// What the pipeline needs from a source stage, whichever mode feeds it: node
// mode tails the pod's log files, api mode streams pods/log. Both turn lines
// into records, pass them to emit() (which blocks under backpressure) and
// report acknowledged progress as checkpoint entries.
import type { CheckpointEntry } from '../delivery/checkpoint.ts';
import type { EngineOptions } from '../config.ts';
import type { FileMeta, LogRecord } from '../records/record.ts';
import type { Stats } from '../stats.ts';

/** What the pipeline gives either source. */
export interface SourceOptions {
  readonly config: EngineOptions;
  readonly stats: Stats;
  /** Loaded checkpoint; entries are consumed and kept up to date by the source. */
  readonly checkpoint: Map<string, CheckpointEntry>;
  emit(records: LogRecord[]): Promise<void>;
  /**
   * The source will emit no more lines of this file (it ended, rotated away,
   * or the drain let go of it). Set when a shaping stage holds lines back:
   * those go out now, so the file's checkpoint can reach its end.
   */
  endFile?(file: FileMeta): Promise<void>;
  onProgress(): void;
}

/**
 * The lifecycle words are the same across the stages (source, batcher,
 * delivery): `flush` hands on everything pending and resolves once it has
 * gone through; `shutdown` is the drain deadline: stop wherever the stage is.
 * A source also has `close`, which lets go of its files and connections once
 * the summary has been taken.
 */
export interface LogSource {
  start(): Promise<void>;
  /** SIGTERM: read what is finished to its end, then resolve. */
  flush(): Promise<void>;
  /** Drain deadline: stop reading wherever we are. */
  shutdown(): Promise<void>;
  close(): Promise<void>;
  /** Checkpoint view: loaded entries not met yet plus everything followed. */
  entries(): Map<string, CheckpointEntry>;
  /** Bytes known to exist but not read (node mode); 0 where it cannot be known. */
  unreadBytes(): Promise<number>;
  /** Files (node mode) or log streams (api mode) being followed. */
  readonly openFiles: number;
  /** What the start-up log line says about where logs come from. */
  readonly describe: Record<string, unknown>;
}
