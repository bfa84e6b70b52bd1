// node mode: discovers the pod's container directories and log files (file
// system events plus a poll), opens every file as soon as it appears so that
// rotation and deletion cannot take it away, and reads them in one loop, a
// chunk at a time, pausing whenever delivery is saturated.
import { watch, type FSWatcher } from 'node:fs';
import { lstat, open, readdir } from 'node:fs/promises';
import path from 'node:path';
import { FileProgress } from '../../records/progress.ts';
import type { CheckpointEntry } from '../../delivery/checkpoint.ts';
import type { EngineOptions } from '../../config.ts';
import type { LogSource, SourceOptions } from '../source.ts';
import { gzipFingerprint } from './fingerprint.ts';
import { log } from '../../log.ts';
import { fileKey, idPrefix, type LogRecord } from '../../records/record.ts';
import { OPEN_LOG_FLAGS, SkippedSymlinks } from './symlinks.ts';
import { UnreadableFiles } from './unreadable.ts';
import { DONE, GzTail, IDLE, PlainTail, ReadBuffer, type FileState, type Release, type Step, type Tail, type TailOptions } from './tail.ts';
import type { CriDecoder } from './cri.ts';

/** How long every file must have gone unwritten before a drain reads to EOF and stops (see settle()). */
export const DRAIN_QUIET_MS = 500;
/** The longest a drain follows files that keep being written: the kubelet's SIGKILL window for the main containers (2 s) and a margin. */
export const DRAIN_SETTLE_MAX_MS = 3000;
/** Scans in a row a finished file must be absent before its checkpoint entry is dropped. */
const PRUNE_AFTER_SCANS = 3;

/** A file identity met for the first time, and where to start reading it; 'skip' when it is handled already. */
type Identified = { readonly state: FileState; readonly start: number } | 'skip';

/** A rotated file that ended in the middle of a line: its decoder holds the P fragments. */
interface Carry {
  readonly state: FileState;
  readonly decoder: CriDecoder;
  /** The rotated file's age (see NodeSource.age): only a newer file takes the fragments. */
  readonly age: Age;
}

interface Age {
  readonly rank: number;
  readonly time: string;
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

const runOf = (t: { readonly container: string; readonly restart: number }): string => `${t.container}/${t.restart}`;

function compareAge(a: Age, b: Age): number {
  if (a.rank !== b.rank) return a.rank - b.rank;
  return a.time < b.time ? -1 : a.time > b.time ? 1 : 0;
}

export type LogFileKind = 'live' | 'rotated' | 'gz';

export interface LogFileName {
  readonly restart: number;
  readonly kind: LogFileKind;
}

/** `<restart>.log`, `<restart>.log.<YYYYMMDD-hhmmss>`, `<restart>.log.<YYYYMMDD-hhmmss>.gz`; anything else (e.g. `.gz.tmp`) is not ours. */
export function parseLogName(name: string): LogFileName | undefined {
  const m = /^(\d+)\.log(?:\.(\d{8}-\d{6})(\.gz)?)?$/.exec(name);
  if (!m) return undefined;
  const restart = Number(m[1]);
  if (!Number.isSafeInteger(restart)) return undefined;
  return { restart, kind: m[3] ? 'gz' : m[2] ? 'rotated' : 'live' };
}

/** Node mode reads files: the log directory and the poll interval, optional in the engine's options, are set. */
export interface NodeSourceOptions extends SourceOptions {
  readonly config: EngineOptions & { readonly logDir: string; readonly pollMs: number };
}

export class NodeSource implements LogSource {
  private readonly tails: Tail[] = [];
  private readonly byInode = new Map<string, Tail>();
  private readonly states = new Map<string, FileState>();
  /** Files looked at and found to be handled already: signature -> checkpoint key. */
  private readonly ignored = new Map<string, string>();
  private readonly watchers = new Map<string, FSWatcher>();
  private readonly tailOptions: TailOptions;
  private pollTimer: NodeJS.Timeout | undefined;
  private wakeUp: (() => void) | undefined;
  private kicked = false;
  private scanning: Promise<void> | undefined;
  private rescan = false;
  private finalScanned = false;
  private final = false;
  private stopped = false;
  private loopDone: Promise<void> | undefined;
  private scans = 0;
  private readonly symlinks: SkippedSymlinks;
  private readonly unreadable: UnreadableFiles;
  /** Per run (`container/restart`), the (device:inode) id of `<restart>.log` when last seen. */
  private readonly live = new Map<string, string>();
  /** Per run, the fragments of a rotated file that the run's next file has not taken yet. */
  private readonly carries = new Map<string, Carry>();
  private readonly links: Link[] = [];
  /** Tails added by a scan that has not finished their directory: the files of a run are read in order, so all must be known. */
  private readonly unready = new Set<Tail>();

  constructor(private readonly opts: NodeSourceOptions) {
    const cfg = opts.config;
    this.symlinks = new SkippedSymlinks(opts.stats);
    this.unreadable = new UnreadableFiles(opts.stats);
    this.tailOptions = { maxRecordBytes: cfg.maxRecordBytes, pollMs: cfg.pollMs, stats: opts.stats, reads: new ReadBuffer() };
  }

  async start(): Promise<void> {
    await this.scan();
    this.watchDir(this.opts.config.logDir);
    this.pollTimer = setInterval(() => {
      void this.scan();
      this.kick();
    }, this.opts.config.pollMs);
    this.loopDone = this.loop();
  }

  /**
   * SIGTERM: wait until no container is still writing, look once more for new
   * files, then read everything to EOF and let go.
   */
  async flush(): Promise<void> {
    await this.settle();
    this.final = true;
    await this.scan();
    // Only now may the loop finish: until this last scan is through, a file it
    // is about to add would otherwise be left unread.
    this.finalScanned = true;
    this.stopWatching();
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
    this.stopWatching();
    this.kick();
    await this.loopDone;
  }

  async close(): Promise<void> {
    this.stopWatching();
    for (const t of this.tails.splice(0)) await t.close();
    this.byInode.clear();
  }

  /** Checkpoint view: loaded entries not seen yet, plus every file identity met. */
  entries(): Map<string, CheckpointEntry> {
    const out = new Map(this.opts.checkpoint);
    for (const [key, s] of this.states) {
      const committed = s.meta.progress.committed;
      const done = s.complete && committed >= s.end && s.meta.progress.outstanding === 0;
      // The timestamp lets a reader of pods/log resume after this file's last
      // acknowledged line (the termination message); node mode itself needs only the offset.
      const ts = s.meta.progress.committedMark?.ts ?? s.resumeTs;
      out.set(key, ts !== undefined ? { offset: committed, done, ts, n: 1 } : { offset: committed, done });
    }
    return out;
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

  private identify(container: string, restart: number, fp: string): Identified {
    const key = fileKey(container, restart, fp);
    if (this.states.has(key)) return 'skip';
    const entry = this.opts.checkpoint.get(key);
    this.opts.checkpoint.delete(key);
    const meta = {
      container,
      restart,
      fingerprint: fp,
      key,
      idPrefix: idPrefix(this.opts.config.identity.podUid, container, restart, fp),
      progress: new FileProgress<LogRecord>(entry?.offset ?? 0, () => this.advanced()),
    };
    const state: FileState = { meta, released: entry?.done ?? false, complete: entry?.done ?? false, end: entry?.offset ?? 0, missing: 0, ...(entry?.ts !== undefined ? { resumeTs: entry.ts } : {}) };
    this.states.set(key, state);
    if (entry?.done) return 'skip';
    if (entry) log.info('resuming file from checkpoint', { container, restart, offset: entry.offset });
    return { state, start: entry?.offset ?? 0 };
  }

  /** Fingerprints a plain file and starts it where the checkpoint says; false while its head is too short to tell. */
  private async begin(t: PlainTail): Promise<boolean | 'skip'> {
    const fp = await t.fingerprint(this.final);
    if (!fp) return false;
    const r = this.identify(t.container, t.restart, fp);
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
    const base = path.basename(t.path);
    const name = parseLogName(base);
    if (name && name.kind !== 'live') return { rank: 0, time: base.slice(base.indexOf('.log.') + 5, base.indexOf('.log.') + 20) };
    return { rank: this.live.get(runOf(t)) === t.id ? 2 : 1, time: '' };
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

  private stopWatching(): void {
    if (this.pollTimer) clearInterval(this.pollTimer);
    this.pollTimer = undefined;
    for (const w of this.watchers.values()) w.close();
    this.watchers.clear();
  }

  private watchDir(dir: string): void {
    if (this.watchers.has(dir) || this.final || this.stopped) return;
    try {
      const w = watch(dir, { persistent: false }, () => {
        void this.scan();
        this.kick();
      });
      w.on('error', () => {
        w.close();
        this.watchers.delete(dir);
      });
      this.watchers.set(dir, w);
    } catch {
      // Not there yet or not watchable: the poll covers it.
    }
  }

  /** One pass over the directory tree; concurrent requests coalesce into one extra pass. */
  scan(): Promise<void> {
    if (this.scanning) {
      this.rescan = true;
      return this.scanning;
    }
    this.scanning = (async () => {
      do {
        this.rescan = false;
        try {
          await this.scanOnce();
        } catch (err) {
          log.warn('scanning the log directory failed', { error: err });
        } finally {
          // Whatever this pass found is known now (scans never overlap).
          this.unready.clear();
        }
      } while (this.rescan && !this.stopped);
    })().finally(() => {
      this.scanning = undefined;
    });
    return this.scanning;
  }

  private async scanOnce(): Promise<void> {
    const { logDir, selfContainer } = this.opts.config;
    let dirs: string[];
    try {
      const entries = await readdir(logDir, { withFileTypes: true });
      for (const d of entries) if (d.isSymbolicLink()) this.symlinks.skip(path.join(logDir, d.name));
      dirs = entries.filter((d) => d.isDirectory() && d.name !== selfContainer).map((d) => d.name);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') await this.unreadable.note(logDir, err);
      return;
    }
    this.unreadable.readable(logDir);
    const present = new Set<string>();
    for (const container of dirs) {
      const dir = path.join(logDir, container);
      this.watchDir(dir);
      let names: string[];
      try {
        names = await readdir(dir);
        this.unreadable.readable(dir);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') await this.unreadable.note(dir, err);
        continue;
      }
      const parsed = names.map((n) => ({ n, p: parseLogName(n) })).filter((x): x is { n: string; p: LogFileName } => x.p !== undefined);
      // Plain files first: a rotation present both plain and gzipped is read from the plain one.
      // Code-unit order, not localeCompare: the names are ASCII, and collation would load ICU data.
      parsed.sort((a, b) => Number(a.p.kind === 'gz') - Number(b.p.kind === 'gz') || (a.n < b.n ? -1 : a.n > b.n ? 1 : 0));
      for (const { n, p } of parsed) {
        if (this.stopped) return;
        try {
          const key = await this.consider(path.join(dir, n), container, p);
          if (key) present.add(key);
          this.unreadable.readable(path.join(dir, n));
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code;
          if (code === 'ELOOP') this.symlinks.skip(path.join(dir, n));
          else if (code !== 'ENOENT') await this.unreadable.note(path.join(dir, n), err);
        }
      }
      for (const t of this.unready) if (t.container === container) this.unready.delete(t);
    }
    this.prune(present);
    this.kick();
  }

  /** Starts following a file unless it is followed or handled already; returns its checkpoint key when known. */
  private async consider(file: string, container: string, name: LogFileName): Promise<string | undefined> {
    const st = await lstat(file);
    if (st.isSymbolicLink()) this.symlinks.skip(file);
    if (!st.isFile()) return undefined;
    const id = `${st.dev}:${st.ino}`;
    if (name.kind === 'live') this.live.set(`${container}/${name.restart}`, id);
    const known = this.byInode.get(id);
    if (known) {
      known.path = file;
      return known.state?.meta.key;
    }
    const sig = `${id}:${st.size}:${st.mtimeMs}`;
    const ignoredKey = this.ignored.get(sig);
    if (ignoredKey !== undefined) return ignoredKey;
    const fh = await open(file, OPEN_LOG_FLAGS);
    const fst = await fh.stat();
    if (fst.ino !== st.ino || fst.dev !== st.dev) {
      await fh.close();
      return undefined;
    }
    if (name.kind === 'gz') {
      let fp: string | undefined;
      try {
        fp = await gzipFingerprint(fh);
      } catch (err) {
        log.warn('cannot read compressed log', { path: file, error: err });
      }
      if (!fp) {
        await fh.close();
        return undefined;
      }
      const r = this.identify(container, name.restart, fp);
      const key = fileKey(container, name.restart, fp);
      if (r === 'skip') {
        await fh.close();
        this.ignored.set(sig, key);
        return key;
      }
      log.info('reading compressed rotation that was never seen uncompressed', { path: file, offset: r.start });
      this.addTail(new GzTail(fh, id, file, container, name.restart, r.state, r.start, this.tailOptions));
      return key;
    }
    const tail = new PlainTail(fh, id, fst.ino, file, container, name.restart, this.tailOptions);
    const r = await this.begin(tail);
    if (r === 'skip') {
      await tail.close();
      this.ignored.set(sig, tail.key ?? '');
      return tail.key;
    }
    this.addTail(tail);
    return tail.key;
  }

  private addTail(t: Tail): void {
    this.tails.push(t);
    this.unready.add(t);
    this.byInode.set(t.id, t);
    this.opts.stats.filesOpened++;
  }

  /** Forget finished files that are gone from disk, so the checkpoint does not grow forever. */
  private prune(present: ReadonlySet<string>): void {
    if (++this.scans >= PRUNE_AFTER_SCANS) {
      for (const key of this.opts.checkpoint.keys()) if (!present.has(key)) this.opts.checkpoint.delete(key);
    }
    for (const [key, s] of this.states) {
      if (present.has(key)) {
        s.missing = 0;
        continue;
      }
      const done = s.complete && s.meta.progress.committed >= s.end && s.meta.progress.outstanding === 0;
      if (done && ++s.missing >= PRUNE_AFTER_SCANS) this.states.delete(key);
    }
  }
}
