// The contract between the delivery stage and whatever sends a batch: a sink
// only encodes and sends one batch and says what happened; retries,
// splitting, dead-lettering and checkpoints live in the delivery stage, so a
// new sink is one module plus one registry line (sinks/registry.ts).
import type { JsonScan } from '../encode/json-anyvalue.ts';
import type { CriRecord, LogRecord } from '../records/record.ts';

export type SendResult =
  /** Every record is stored. */
  | { readonly kind: 'ok' }
  /** Nothing (reliably) stored; try the same records again, not before afterMs if given. */
  | { readonly kind: 'retry'; readonly reason: string; readonly afterMs?: number; readonly status?: number }
  /** Permanent rejection of the whole batch: dead-letter it. */
  | { readonly kind: 'fail'; readonly reason: string; readonly status?: number }
  /** The batch is too large for the server (413): send it in halves. */
  | { readonly kind: 'split'; readonly reason: string }
  /** Some records stored, some to retry, some rejected for good. */
  | {
      readonly kind: 'partial';
      readonly retry: readonly LogRecord[];
      readonly failed: ReadonlyArray<{ readonly record: LogRecord; readonly reason: string; readonly status?: number }>;
      /** Also retry after this long (e.g. 429 items), if given. */
      readonly afterMs?: number;
    };

export interface Sink {
  send(records: readonly LogRecord[], signal: AbortSignal): Promise<SendResult>;
  close?(): Promise<void>;
  /** The sink's encoder reads JSON lines in the shaping stage's pass that decides them (see JsonPreparer). */
  readonly jsonPreparer?: JsonPreparer;
}

/**
 * A sink's encoder reading a JSON line in the pass that decides it: the
 * shaping stage's JSON detector hands it the line instead of only scanning
 * it, so the line is read once, and the encoder keeps what it wrote in the
 * record's `prepared` (ShapedRecord), which only it reads.
 */
export interface JsonPreparer {
  /** scanJson's verdict on the line's bytes, with `scan` set as scanJson sets it. */
  prepare(scan: JsonScan, line: CriRecord, maxFields: number, maxDepth: number): number;
  /** After prepare() said JSON_OK: what it wrote, for the line's record. */
  readonly prepared: unknown;
}
