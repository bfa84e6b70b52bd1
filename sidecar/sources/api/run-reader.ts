// Reads one run (container + restart count) of a container through pods/log
// and turns its lines into records, the api-mode counterpart of a file tail.
//
// Position: the run's lines are numbered from 0 in the order the API returns
// them; the number is the record's offset, so ids (pod uid + container +
// restart + line number) are the same whenever a line is sent again. The
// API can only be asked to start at a whole second (sinceTime), so every
// (re)connection asks from the second of the last line it has and skips
// what it has already: lines before that timestamp, and as many lines with
// exactly that timestamp as it has counted. A broken connection resumes from
// the last line read (those lines are in the pipeline already); a restarted
// sidecar resumes from the checkpoint, i.e. the last acknowledged line.
//
// End: a stream that was asked for after the pod status showed the run
// terminated, and that ended cleanly, holds the whole run. A followed stream
// that ends is not trusted on its own: the status is read again and, once it
// shows the run terminated, one more (unfollowed) request fetches whatever
// the followed one may have missed.
import { setTimeout as sleep } from 'node:timers/promises';
import { retryDelay, type BackoffOptions } from '../../delivery/backoff.ts';
import { FileProgress } from '../../records/progress.ts';
import type { CheckpointEntry } from '../../delivery/checkpoint.ts';
import type { EngineOptions } from '../../config.ts';
import { log } from '../../log.ts';
import { fileKey, FLAG_INCOMPLETE, FLAG_MALFORMED, FLAG_TRUNCATED, idPrefix, type FileMeta, type LogRecord } from '../../records/record.ts';
import type { Stats } from '../../stats.ts';
import { isTimestamp, parseTimestamp } from '../../records/timestamp.ts';
import { ApiError, podLogPath, type KubeClient } from './kube-client.ts';
import { LineSplitter, truncated, type LineHandler } from '../lines.ts';
import type { RunView } from './pod.ts';

/** Stands in for a file fingerprint in checkpoint keys and ids. */
export const API_FINGERPRINT = 'api';

/** Room for the timestamp in front of a capped message. */
const HEADER_ROOM = 64;
const SP = 32;
const EMPTY = Buffer.alloc(0);

export interface RunHost {
  readonly client: KubeClient;
  readonly config: EngineOptions;
  readonly stats: Stats;
  readonly signal: AbortSignal;
  /** SIGTERM received: back off for at most a second. */
  readonly final: boolean;
  readonly podGone: boolean;
  view(container: string, restart: number): RunView;
  /** Reads the pod now (coalesced with other callers). */
  refresh(): Promise<void>;
  /** Resolves at the next pod update, or after ms. */
  podUpdate(ms: number): Promise<void>;
  emit(records: LogRecord[]): Promise<void>;
  /** No more lines of this run will be emitted. */
  endFile?(file: FileMeta): Promise<void>;
  onProgress(): void;
}

interface Skip {
  readonly sec: number;
  readonly nanos: number;
  /** Lines with exactly this timestamp already had. */
  readonly n: number;
  seen: number;
  /** No timestamp known (the run began with lines without one): skip this many lines. */
  readonly count: number;
}

interface Mark {
  /** Unknown while the run has shown no timestamp yet: resume by counting lines. */
  readonly ts: string | undefined;
  readonly n: number;
}

const cmp = (s1: number, n1: number, s2: number, n2: number): number => (s1 !== s2 ? s1 - s2 : n1 - n2);

export function sinceTimeOf(sec: number): string {
  return new Date(sec * 1000).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

export class RunReader implements LineHandler<LogRecord> {
  readonly meta: FileMeta;
  readonly done: Promise<void>;
  /** Read to the end, or given up because the API no longer serves it. */
  finished = false;
  private readonly splitter: LineSplitter<LogRecord>;
  /** Lines read so far: the number of the next line. */
  private index: number;
  private lastTs: string | undefined;
  private lastSec = -Infinity;
  private lastNanos = 0;
  private lastN = 0;
  /** Timestamp of the previous line on this connection, for lines without one. */
  private connSec = -Infinity;
  private connNanos = 0;
  private skip: Skip | undefined;
  /**
   * The last followed stream that returned lines began at the resume point
   * (or at the run's start) and ended cleanly: the kubelet followed the run,
   * across its rotations, until it stopped following. A closing request that
   * then finds an empty current file means a rotation after the last line,
   * not lines skipped.
   */
  private followedToEnd = false;
  /** Lines the current connection returned, skipped ones included. */
  private connLines = 0;
  /** Positions of lines whose timestamp is shared with lines before them, by line number. */
  private readonly marks = new Map<number, Mark>();
  private readonly start: { readonly index: number; readonly ts?: string; readonly n: number };

  constructor(
    private readonly host: RunHost,
    readonly container: string,
    readonly restart: number,
    resume: CheckpointEntry | undefined,
  ) {
    const cfg = host.config;
    this.meta = {
      container,
      restart,
      fingerprint: API_FINGERPRINT,
      key: fileKey(container, restart, API_FINGERPRINT),
      idPrefix: idPrefix(cfg.identity.podUid, container, restart, API_FINGERPRINT),
      progress: new FileProgress(resume?.offset ?? 0, () => host.onProgress()),
    };
    this.index = resume?.offset ?? 0;
    this.start = { index: this.index, ts: resume?.ts, n: resume?.n ?? 0 };
    const t = resume?.ts !== undefined ? parseTimestamp(resume.ts) : undefined;
    if (t && resume?.ts) {
      this.lastTs = resume.ts;
      this.lastSec = t.sec;
      this.lastNanos = t.nanos;
      this.lastN = resume.n ?? 0;
    }
    this.splitter = new LineSplitter<LogRecord>(this, cfg.maxRecordBytes + HEADER_ROOM);
    host.stats.filesOpened++;
    if (this.index > 0) log.info('resuming container log from checkpoint', { container, restart, line: this.index, since: this.lastTs });
    // A shaping stage may hold the run's last lines in an open event: they go out before the run counts as read.
    this.done = this.run().then(() => host.endFile?.(this.meta));
  }

  /** The checkpoint entry: acknowledged lines and the timestamp to resume after. */
  entry(): CheckpointEntry {
    const p = this.meta.progress;
    const c = p.committed;
    const done = this.finished && c >= this.index && p.outstanding === 0;
    const pos = this.positionAt(c);
    return pos.ts !== undefined ? { offset: c, done, ts: pos.ts, n: pos.n } : { offset: c, done };
  }

  private positionAt(committed: number): Mark {
    const r = this.meta.progress.committedMark;
    if (!r || r.offset !== committed - 1) return { ts: this.start.ts, n: this.start.n };
    for (const k of this.marks.keys()) {
      if (k >= committed - 1) break;
      this.marks.delete(k);
    }
    return this.marks.get(committed - 1) ?? { ts: r.ts, n: 1 };
  }

  private backoff(): BackoffOptions {
    return { baseMs: 250, maxMs: this.host.final ? 1000 : 5000, maxRetryAfterMs: 0 };
  }

  private async pause(attempt: number): Promise<void> {
    try {
      await sleep(retryDelay(attempt, undefined, this.backoff()), undefined, { signal: this.host.signal });
    } catch {
      // stopped
    }
  }

  private async run(): Promise<void> {
    const h = this.host;
    const cfg = h.config;
    let failures = 0;
    while (!h.signal.aborted) {
      if (h.podGone) return this.finish(false, 'the pod is gone');
      const view = h.view(this.container, this.restart);
      if (view.reach === 'gone') return this.finish(false, 'the API no longer serves this run');
      if (view.reach === 'pending') {
        await h.podUpdate(1000);
        continue;
      }
      const follow = !view.terminated;
      this.beginSkip();
      const path = podLogPath(cfg.identity.namespace, cfg.identity.pod, {
        container: this.container,
        follow,
        previous: view.reach === 'previous',
        sinceTime: this.lastTs !== undefined ? sinceTimeOf(this.lastSec) : undefined,
      });
      try {
        const res = await h.client.stream(path, h.signal);
        for await (const chunk of res) {
          await this.consume(chunk as Buffer);
          failures = 0;
        }
      } catch (err) {
        if (h.signal.aborted) return;
        this.splitter.reset();
        if (follow) this.followedToEnd = false;
        failures++;
        if (failures === 1 || failures % 10 === 0) {
          log.warn('container log stream failed; reconnecting', { container: this.container, restart: this.restart, attempt: failures, error: err });
        }
        if (err instanceof ApiError && err.status === 404) await h.refresh().catch(() => {});
        await this.pause(failures);
        await h.refresh().catch(() => {});
        continue;
      }
      if (!follow) {
        const out: LogRecord[] = [];
        this.splitter.end(out);
        if (out.length > 0) await h.emit(out);
        // The whole of what the API still has, and the resume point was not in
        // it. Unless a followed stream already read the run to its end: then
        // the file was rotated after the last line, and nothing is missing.
        const skip = this.skip;
        if (skip && skip.count === 0 && skip.seen < skip.n && !this.followedToEnd) this.gap(skip, undefined);
        this.skip = undefined;
        return this.finish(true);
      }
      // A fragment still waiting for its end is read again, whole, next time.
      this.splitter.reset();
      // A stream that returned nothing (the run had stopped, its file rotated
      // after the last line) tells nothing new about the one before it.
      if (this.connLines > 0) this.followedToEnd = this.resumePointFound();
      if (!h.view(this.container, this.restart).terminated) {
        await h.refresh().catch(() => {});
        if (!h.view(this.container, this.restart).terminated) await this.pause(++failures);
      }
    }
  }

  private finish(complete: boolean, reason?: string): void {
    if (!complete) log.warn('container log can no longer be read; what was not read is lost', { container: this.container, restart: this.restart, linesRead: this.index, reason });
    this.finished = true;
    this.host.stats.filesReleased++;
    this.host.onProgress();
  }

  /**
   * A resumed stream did not hold the resume point: asked from the second of
   * the last line read, it would have started with that line (and the lines
   * sharing its timestamp) had the kubelet still served the file holding it.
   * The kubelet rotated that file away while no stream was open, and pods/log
   * serves only the current file, so whatever followed the last line in the
   * rotated files cannot be read. How many lines that was is not known: none,
   * if the rotation came right after the last line read.
   */
  private gap(skip: Skip, next: string | undefined): void {
    this.host.stats.resumeGaps++;
    log.warn('resumed a container log past a rotation: the lines written after the last one read and before the current file began are lost', {
      container: this.container,
      restart: this.restart,
      lastRead: this.lastTs,
      lastReadLine: this.index,
      linesWithThatTimestampFound: skip.seen,
      nextLine: next ?? null,
    });
  }

  /** The current connection returned the line to resume after, or had none to look for. */
  private resumePointFound(): boolean {
    const skip = this.skip;
    if (!skip) return true;
    return skip.count > 0 ? skip.seen >= skip.count : skip.seen >= skip.n;
  }

  private beginSkip(): void {
    this.connLines = 0;
    this.connSec = -Infinity;
    this.connNanos = 0;
    if (this.index === 0) this.skip = undefined;
    else if (this.lastTs === undefined) this.skip = { sec: -Infinity, nanos: 0, n: 0, seen: 0, count: this.index };
    else this.skip = { sec: this.lastSec, nanos: this.lastNanos, n: this.lastN, seen: 0, count: 0 };
  }

  private async consume(chunk: Buffer): Promise<void> {
    this.host.stats.bytesRead += chunk.length;
    const out: LogRecord[] = [];
    this.splitter.push(chunk, out);
    if (out.length > 0) await this.host.emit(out);
  }

  /** One line of the response; `start` is not used: a run's lines are numbered, not placed by byte. */
  line(b: Buffer, s: number, e: number, _start: number, size: number, dropped: number, out: LogRecord[]): void {
    const sp = b.indexOf(SP, s);
    let ts: string | undefined;
    if (sp > s && sp < e && isTimestamp(b, s, sp)) {
      ts = b.toString('latin1', s, sp);
      const t = parseTimestamp(ts);
      if (t) {
        this.connSec = t.sec;
        this.connNanos = t.nanos;
      } else ts = undefined;
    }
    this.connLines++;
    const sec = this.connSec;
    const nanos = this.connNanos;
    const skip = this.skip;
    if (skip) {
      if (skip.count > 0) {
        skip.seen++;
        if (skip.seen <= skip.count) return;
      } else {
        const c = cmp(sec, nanos, skip.sec, skip.nanos);
        if (c < 0) return;
        if (c === 0 && skip.seen < skip.n) {
          skip.seen++;
          return;
        }
        if (skip.seen < skip.n) this.gap(skip, ts);
      }
      this.skip = undefined;
    }
    // A line without a timestamp keeps the position of the line before it.
    if (ts !== undefined && (sec !== this.lastSec || nanos !== this.lastNanos)) {
      this.lastTs = ts;
      this.lastSec = sec;
      this.lastNanos = nanos;
      this.lastN = 1;
    } else this.lastN++;

    const msgStart = ts !== undefined ? sp + 1 : s;
    const len = e - msgStart;
    // Without its newline the line was the last of a complete stream, cut off.
    let flags = size === e - s + dropped ? FLAG_INCOMPLETE : 0;
    let message: string;
    const max = this.host.config.maxRecordBytes;
    if (len > max || dropped > 0) {
      message = truncated(EMPTY, b.subarray(msgStart, e), max, dropped).toString('utf8');
      flags |= FLAG_TRUNCATED;
      this.host.stats.truncated++;
    } else message = b.toString('utf8', msgStart, e);
    if (ts === undefined) {
      flags |= FLAG_MALFORMED;
      this.host.stats.malformed++;
    }
    const offset = this.index++;
    if (this.lastN > 1 || ts === undefined) this.marks.set(offset, { ts: this.lastTs, n: this.lastN });
    out.push({ file: this.meta, offset, ts: ts ?? new Date().toISOString(), stream: 'unknown', message, size, safe: offset + 1, flags });
  }
}
