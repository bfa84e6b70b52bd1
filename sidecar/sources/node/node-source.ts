// node mode: discovers the pod's container directories and log files (file
// system events plus a poll), opens every file as soon as it appears so that
// rotation and deletion cannot take it away, and reads them in one loop, a
// chunk at a time, pausing whenever delivery is saturated.
import { watch, type FSWatcher } from 'node:fs';
import { lstat, open, readdir } from 'node:fs/promises';
import path from 'node:path';
import { FileProgress } from '../../records/progress.ts';
import type { CheckpointEntry } from '../../delivery/checkpoint.ts';
import type { LogSource, SourceOptions } from '../source.ts';
import { gzipFingerprint } from './fingerprint.ts';
import { log } from '../../log.ts';
import { fileKey, idPrefix, type LogRecord } from '../../records/record.ts';
import { OPEN_LOG_FLAGS, SkippedSymlinks } from './symlinks.ts';
import { UnreadableFiles } from './unreadable.ts';
import { DONE, GzTail, IDLE, PlainTail, ReadBuffer, type FileState, type Release, type Step, type Tail, type TailOptions } from './tail.ts';

/** Scans in a row a finished file must be absent before its checkpoint entry is dropped. */
const PRUNE_AFTER_SCANS = 3;

/** A file identity met for the first time, and where to start reading it; 'skip' when it is handled already. */
type Identified = { readonly state: FileState; readonly start: number } | 'skip';

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

  constructor(private readonly opts: SourceOptions) {
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

  /** SIGTERM: look once more for new files, then read everything to EOF and let go. */
  async flush(): Promise<void> {
    this.final = true;
    await this.scan();
    // Only now may the loop finish: until this last scan is through, a file it
    // is about to add would otherwise be left unread.
    this.finalScanned = true;
    this.stopWatching();
    this.kick();
    await this.loopDone;
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
      progress: new FileProgress<LogRecord>(entry?.offset ?? 0, () => this.opts.onProgress()),
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
    if (t instanceof PlainTail && !t.started) {
      const r = await this.begin(t);
      if (r === 'skip') return DONE;
      if (!r) return this.final ? DONE : IDLE;
    }
    const step = await t.step(this.final);
    if (step.records.length > 0 || step.bytes > 0) {
      this.opts.stats.bytesRead += step.bytes;
      await this.opts.emit(step.records);
    }
    if (step.released) this.release(step.released);
    return step;
  }

  private release({ state, end, complete }: Release): void {
    state.released = true;
    state.complete = complete;
    state.end = end;
    this.opts.stats.filesReleased++;
    this.opts.onProgress();
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
      if (this.stopped || (this.finalScanned && this.tails.length === 0)) return;
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
