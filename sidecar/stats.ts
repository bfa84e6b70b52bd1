// Counters for the exit summary and the metrics endpoint. Plain numbers: the
// hot path only does additions, metrics read them when scraped.

export interface Stats {
  linesRead: number;
  bytesRead: number;
  linesShipped: number;
  bytesShipped: number;
  requests: number;
  retries: number;
  linesDeadLettered: number;
  linesUnsent: number;
  malformed: number;
  truncated: number;
  filesOpened: number;
  filesReleased: number;
  checkpointWrites: number;
  symlinksSkipped: number;
  /** Files and directories that exist but cannot be opened, and the bytes of those files. */
  unreadableFiles: number;
  unreadableBytes: number;
  /** Dead-lettered or unsent records that did not fit under the dead-letter file's cap, and their log bytes. */
  deadLetterOverflowLines: number;
  deadLetterOverflowBytes: number;
  /**
   * api mode: streams resumed past a rotation, whose rotated lines pods/log
   * no longer serves (the number of those lines is not known).
   */
  resumeGaps: number;
  /** Shaping (all 0 when it is off): records made of several lines, */
  multilineRecords: number;
  /** records whose JSON object became fields, */
  jsonRecords: number;
  /** JSON objects left a plain message for holding more than JOBHARVEST_JSON_MAX_FIELDS fields, */
  jsonTooWide: number;
  /** and matches replaced by a mask (never their values). */
  masked: number;
  /** The server refused the configured codec (zstd) and the client went on with gzip: 0 or 1. */
  codecFallbacks: number;
}

export function newStats(): Stats {
  return {
    linesRead: 0,
    bytesRead: 0,
    linesShipped: 0,
    bytesShipped: 0,
    requests: 0,
    retries: 0,
    linesDeadLettered: 0,
    linesUnsent: 0,
    malformed: 0,
    truncated: 0,
    filesOpened: 0,
    filesReleased: 0,
    checkpointWrites: 0,
    symlinksSkipped: 0,
    unreadableFiles: 0,
    unreadableBytes: 0,
    deadLetterOverflowLines: 0,
    deadLetterOverflowBytes: 0,
    resumeGaps: 0,
    codecFallbacks: 0,
    multilineRecords: 0,
    jsonRecords: 0,
    jsonTooWide: 0,
    masked: 0,
  };
}
