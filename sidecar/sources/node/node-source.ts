// node mode: reads the log files discovery finds and opens (discovery.ts) in
// one loop, a chunk at a time, pausing whenever delivery is saturated; the
// files of a container run in the order they were written, a rotated file's
// last fragments handed to the next; and the drain.
import type { FileHandle } from 'node:fs/promises';
import { lstat } from 'node:fs/promises';
import type { CheckpointEntry } from '../../delivery/checkpoint.ts';
import type { EngineOptions } from '../../config.ts';
import type { LogSource, SourceOptions } from '../source.ts';
import { gzipFingerprint } from './fingerprint.ts';
import { log } from '../../log.ts';
import { fileKey, type LogRecord } from '../../records/record.ts';
import { FileStates } from './file-states.ts';
import { compareAge, LogDiscovery, runOf, type Age, type FoundFile, type Taken } from './discovery.ts';
import { DONE, GzTail, IDLE, PlainTail, ReadBuffer, type FileState, type Release, type Step, type Tail, type TailOptions } from './tail.ts';
import type { CriDecoder } from './cri.ts';

/** How long every file must have gone unwritten before a drain reads to EOF and stops (see settle()). */
export const DRAIN_QUIET_MS = 500;
/** The longest a drain follows files that keep being written: the kubelet's SIGKILL window for the main containers (2 s) and a margin. */
export const DRAIN_SETTLE_MAX_MS = 3000;
/** A rotated file that ended in the middle of a line: its decoder holds the P fragments. */
interface Carry {
  readonly state: FileState;
  readonly decoder: CriDecoder;
  /** The rotated file's age (see NodeSource.age): only a newer file takes the fragments. */
  readonly age: Age;
}

/**
 * A rotated file whose last fragments the next file of the run took: the
 * rotated file counts as delivered to its end only once those lines are
 * acknowledged (the next file's checkpoint has passed `after`) and so is
 * everything of its own.
 */
interface Link {
  readonly from: FileState;
  readonly to: FileState;
  readonly after: number;
}

/** Node mode reads files: the log directory and the poll interval, optional in the engine's options, are set. */
export interface NodeSourceOptions extends SourceOptions {
  readonly config: EngineOptions & { readonly logDir: string; readonly pollMs: number };
}

export class NodeSource implements LogSource {
  private readonly tails: Tail[] = [];
  private readonly byInode = new Map<string, Tail>();
  private readonly files: FileStates;
  private readonly discovery: LogDiscovery;
  private readonly tailOptions: TailOptions;
  private wakeUp: (() => void) | undefined;
  private kicked = false;
  private finalScanned = false;
  private final = false;
  private stopped = false;
  private loopDone: Promise<void> | undefined;
  /** Per run, the fragments of a rotated file that the run's next file has not taken yet. */
  private readonly carries = new Map<string, Carry>();
  private readonly links: Link[] = [];
  /** Tails added by a scan that has not finished their directory: the files of a run are read in order, so all must be known. */
  private readonly unready = new Set<Tail>();

  constructor(private readonly opts: NodeSourceOptions) {
    const cfg = opts.config;
    this.discovery = new LogDiscovery({
      logDir: cfg.logDir,
      selfContainer: cfg.selfContainer,
      pollMs: cfg.pollMs,
      stats: opts.stats,
      followed: (f) => this.followed(f),
      take: (f, fh) => this.take(f, fh),
      containerDone: (container) => {
        for (const t of this.unready) if (t.container === container) this.unready.delete(t);
      },
      passed: (present) => this.files.prune(present),
      passEnded: () => this.unready.clear(),
      poke: () => this.kick(),
    });
    this.files = new FileStates(opts.checkpoint, cfg.identity.podUid, () => this.advanced());
    this.tailOptions = { maxRecordBytes: cfg.maxRecordBytes, pollMs: cfg.pollMs, stats: opts.stats, reads: new ReadBuffer() };
  }

  async start(): Promise<void> {
    await this.discovery.scan();
    this.discovery.watch();
    this.loopDone = this.loop();
  }

  /**
   * SIGTERM: wait until no container is still writing, look once more for new
   * files, then read everything to EOF and let go.
   */
  async flush(): Promise<void> {
    await this.settle();
    this.final = true;
    await this.discovery.lastScan();
    // Only now may the loop finish: until this last scan is through, a file it
    // is about to add would otherwise be left unread.
    this.finalScanned = true;
    this.discovery.stopWatching();
    this.kick();
    await this.loopDone;
  }

  /**
   * The kubelet sends the sidecar SIGTERM once the main containers have
   * exited, or once the pod's grace period has run out while they still run:
   * then they get their SIGKILL only with the kubelet's minimum window (2 s),
   * and a main container that ignores SIGTERM writes on meanwhile. Reading to
   * the EOF of that moment would report a complete delivery and leave out
   * what follows, so the drain first keeps tailing until every file has gone
   * unwritten for DRAIN_QUIET_MS. A node-mode sidecar cannot see other
   * containers' states; a file's modification time is what it has. A pod
   * whose containers ended before the SIGTERM waits at most that long once.
   */
  private async settle(): Promise<void> {
    const until = Date.now() + DRAIN_SETTLE_MAX_MS;
    for (;;) {
      let newest = 0;
      for (const t of this.tails) {
        try {
          newest = Math.max(newest, (await lstat(t.path)).mtimeMs);
        } catch {
          // rotated or removed meanwhile: its successor is in the list
        }
      }
      const wait = newest + DRAIN_QUIET_MS - Date.now();
      if (wait <= 0 || Date.now() >= until || this.stopped) return;
      await new Promise((r) => setTimeout(r, Math.min(wait, until - Date.now(), 100)));
    }
  }

  /** Drain deadline: stop reading wherever we are. */
  async shutdown(): Promise<void> {
    this.stopped = true;
    this.discovery.halt();
    this.kick();
    await this.loopDone;
  }

  async close(): Promise<void> {
    this.discovery.stopWatching();
    for (const t of this.tails.splice(0)) await t.close();
    this.byInode.clear();
  }

  /** Checkpoint view: loaded entries not seen yet, plus every file identity met. */
  entries(): Map<string, CheckpointEntry> {
    return this.files.entries();
  }

  async unreadBytes(): Promise<number> {
    let n = 0;
    for (const t of this.tails) n += await t.unread();
    return n;
  }

  get openFiles(): number {
    return this.tails.length;
  }

  get describe(): Record<string, unknown> {
    return { mode: 'node', logDir: this.opts.config.logDir };
  }

  /** Fingerprints a plain file and starts it where the checkpoint says; false while its head is too short to tell. */
  private async begin(t: PlainTail): Promise<boolean | 'skip'> {
    const fp = await t.fingerprint(this.final);
    if (!fp) return false;
    const r = this.files.identify(t.container, t.restart, fp);
    if (r === 'skip') return 'skip';
    await t.begin(r.state, r.start);
    return true;
  }

  private async step(t: Tail): Promise<Step> {
    if (this.waiting(t)) return IDLE;
    if (t instanceof PlainTail && !t.started) {
      const r = await this.begin(t);
      if (r === 'skip') return DONE;
      if (!r) return this.final ? DONE : IDLE;
    }
    const carry = this.carries.get(runOf(t));
    if (carry && t.state && compareAge(carry.age, this.age(t)) < 0) await this.handOver(carry, t);
    const step = await t.step(this.final);
    if (step.records.length > 0 || step.bytes > 0) {
      this.opts.stats.bytesRead += step.bytes;
      await this.opts.emit(step.records);
    }
    if (step.released) await this.release(step.released, t);
    return step;
  }

  private async release({ state, end, complete, fragments }: Release, t: Tail): Promise<void> {
    state.released = true;
    state.complete = complete;
    state.end = end;
    this.opts.stats.filesReleased++;
    // Before onProgress: the file's last lines, if a shaping stage holds them, get their tickets first.
    await this.opts.endFile?.(state.meta);
    if (fragments) {
      // Only the file read right before could have left one, and the run's next file takes it first.
      const run = runOf(t);
      const before = this.carries.get(run);
      if (before) await this.endCarry(run, before);
      this.carries.set(run, { state, decoder: fragments, age: this.age(t) });
    }
    this.opts.onProgress();
  }

  /**
   * The runtime reopened the log in the middle of a line: the rotated file
   * ends with P fragments, and the line goes on in the run's next file. That
   * file takes them, so the line is shipped once and whole.
   */
  private async handOver(carry: Carry, t: Tail): Promise<void> {
    const run = runOf(t);
    const r = t.adopt(carry.decoder);
    if (r === 'late') {
      // Not expected (the files of a run are read in order); as before, the fragments go out on their own.
      await this.endCarry(run, carry);
      return;
    }
    this.carries.delete(run);
    // `resumed`: the lines went out with the next file's first records before a restart.
    this.links.push({ from: carry.state, to: t.state!, after: r === 'adopted' ? 0 : -1 });
    this.settleLinks();
  }

  /** No next file took them: the fragments are shipped as they are, as incomplete lines. */
  private async endCarry(run: string, carry: Carry): Promise<void> {
    this.carries.delete(run);
    const records: LogRecord[] = [];
    carry.decoder.end(records);
    if (records.length > 0) await this.opts.emit(records);
    await this.opts.endFile?.(carry.state.meta);
  }

  private advanced(): void {
    if (this.links.length > 0) this.settleLinks();
    this.opts.onProgress();
  }

  private settleLinks(): void {
    for (let i = this.links.length - 1; i >= 0; i--) {
      const { from, to, after } = this.links[i]!;
      const x = from.meta.progress;
      if (to.meta.progress.committed > after && x.outstanding === 0) {
        // Everything of the rotated file before its fragments is acknowledged, and the fragments went with the next file's lines.
        if (x.committed < from.end) x.committed = from.end;
        this.links.splice(i, 1);
      }
    }
  }

  /**
   * A tail waits while an older file of its run is still being read: the
   * line a rotation split must be taken up by the next file before that file
   * decodes anything. Also while the scan that found it has not finished
   * its directory, which may hold older files still.
   */
  private waiting(t: Tail): boolean {
    if (this.unready.has(t)) return true;
    for (const u of this.tails) {
      if (u === t || u.restart !== t.restart || u.container !== t.container || !u.state || u.state.released) continue;
      if (this.older(u, t)) return true;
    }
    return false;
  }

  /** Whether `a` was written before `b` (same run): rotations by their time, then a renamed file whose new name is not known yet, then the live file. */
  private older(a: Tail, b: Tail): boolean {
    const c = compareAge(this.age(a), this.age(b));
    return c !== 0 ? c < 0 : this.tails.indexOf(a) < this.tails.indexOf(b);
  }

  private age(t: Tail): Age {
    return this.discovery.age(t);
  }

  private kick(): void {
    this.kicked = true;
    const w = this.wakeUp;
    this.wakeUp = undefined;
    w?.();
  }

  private waitForWork(): Promise<void> {
    if (this.kicked) {
      this.kicked = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      this.wakeUp = () => {
        this.kicked = false;
        resolve();
      };
    });
  }

  private async loop(): Promise<void> {
    for (;;) {
      if (this.stopped) return;
      if (this.finalScanned && this.tails.length === 0) {
        // The drain, and no next file came for a rotated file's last fragments.
        for (const [run, carry] of [...this.carries]) await this.endCarry(run, carry);
        return;
      }
      let progressed = false;
      for (const t of [...this.tails]) {
        if (this.stopped) return;
        let r: Step['result'];
        try {
          r = (await this.step(t)).result;
        } catch (err) {
          log.warn('reading a log file failed', { path: t.path, error: err });
          r = this.final ? 'done' : 'idle';
        }
        if (r === 'progress') progressed = true;
        else if (r === 'done') {
          progressed = true;
          this.drop(t);
        }
      }
      if (!progressed && !this.finalScanned) await this.waitForWork();
    }
  }

  private drop(t: Tail): void {
    const i = this.tails.indexOf(t);
    if (i >= 0) this.tails.splice(i, 1);
    this.byInode.delete(t.id);
    this.unready.delete(t);
    void t.close();
  }

  /** A file discovery found again: followed already when a tail has its identity, which takes its new name. */
  private followed(f: FoundFile): Taken | undefined {
    const known = this.byInode.get(f.id);
    if (!known) return undefined;
    known.path = f.path;
    return { key: known.state?.meta.key };
  }

  /** Starts following a file discovery opened, unless it is handled already. */
  private async take(f: FoundFile, fh: FileHandle): Promise<Taken> {
    if (f.name.kind === 'gz') return this.takeGz(f, fh);
    const tail = new PlainTail(fh, f.id, f.ino, f.path, f.container, f.name.restart, this.tailOptions);
    const r = await this.begin(tail);
    if (r === 'skip') {
      await tail.close();
      return { key: tail.key, handled: true };
    }
    this.addTail(tail);
    return { key: tail.key };
  }

  private async takeGz(f: FoundFile, fh: FileHandle): Promise<Taken> {
    let fp: string | undefined;
    try {
      fp = await gzipFingerprint(fh);
    } catch (err) {
      log.warn('cannot read compressed log', { path: f.path, error: err });
    }
    if (!fp) {
      await fh.close();
      return { key: undefined };
    }
    const r = this.files.identify(f.container, f.name.restart, fp);
    const key = fileKey(f.container, f.name.restart, fp);
    if (r === 'skip') {
      await fh.close();
      return { key, handled: true };
    }
    log.info('reading compressed rotation that was never seen uncompressed', { path: f.path, offset: r.start });
    this.addTail(new GzTail(fh, f.id, f.path, f.container, f.name.restart, r.state, r.start, this.tailOptions));
    return { key };
  }

  private addTail(t: Tail): void {
    this.tails.push(t);
    this.unready.add(t);
    this.byInode.set(t.id, t);
    this.opts.stats.filesOpened++;
  }
}
