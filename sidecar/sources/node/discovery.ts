// node mode's discovery: finds the pod's container directories and log files
// (file system events plus a poll) and opens every file as soon as it appears,
// so that rotation and deletion cannot take it away. What to do with a file
// (follow it, or let it go as handled already) is the reader's
// (node-source.ts): discovery hands it each new file, opened.
import { watch, type FSWatcher, type Stats as FileStats } from 'node:fs';
import { lstat, open, readdir, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import { log } from '../../log.ts';
import type { Stats } from '../../stats.ts';
import { OPEN_LOG_FLAGS, SkippedSymlinks } from './symlinks.ts';
import { UnreadableFiles } from './unreadable.ts';

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

/** A container run: its files are one stream, rotated. */
export const runOf = (t: { readonly container: string; readonly restart: number }): string => `${t.container}/${t.restart}`;

/** How old a file of a run is, as its name and the run's live file tell. */
export interface Age {
  readonly rank: number;
  readonly time: string;
}

export function compareAge(a: Age, b: Age): number {
  if (a.rank !== b.rank) return a.rank - b.rank;
  return a.time < b.time ? -1 : a.time > b.time ? 1 : 0;
}

/** A log file found: where, whose, and its identity across renames. */
export interface FoundFile {
  readonly path: string;
  readonly container: string;
  readonly name: LogFileName;
  /** `device:inode`. */
  readonly id: string;
  readonly ino: number;
}

/** What the reader made of a file: its checkpoint key when known, and whether it was handled already and let go. */
export interface Taken {
  readonly key: string | undefined;
  readonly handled?: boolean;
}

export interface DiscoveryOptions {
  readonly logDir: string;
  /** The sidecar's own container directory, never read. */
  readonly selfContainer: string;
  readonly pollMs: number;
  readonly stats: Stats;
  /** A file found again that the reader follows already (perhaps under a new name); undefined when it does not. */
  followed(f: FoundFile): Taken | undefined;
  /** A file met for the first time, opened: the reader follows it, or closes it. */
  take(f: FoundFile, fh: FileHandle): Promise<Taken>;
  /** Every file of one container's directory has been offered. */
  containerDone(container: string): void;
  /** A pass through the whole tree: the checkpoint keys of the files present. */
  passed(present: ReadonlySet<string>): void;
  /** A pass ended, whether it got through or not: what it found is known now. */
  passEnded(): void;
  /** Something may have changed on disk: look at the files again. */
  poke(): void;
}

export class LogDiscovery {
  private readonly watchers = new Map<string, FSWatcher>();
  private readonly symlinks: SkippedSymlinks;
  private readonly unreadable: UnreadableFiles;
  /** Files looked at and found to be handled already: signature -> checkpoint key. */
  private readonly ignored = new Map<string, string>();
  /** Per run (`container/restart`), the (device:inode) id of `<restart>.log` when last seen. */
  private readonly live = new Map<string, string>();
  private pollTimer: NodeJS.Timeout | undefined;
  private scanning: Promise<void> | undefined;
  private rescan = false;
  /** No new directory watches: the last pass has begun, or discovery has halted. */
  private watchesClosed = false;
  private halted = false;

  constructor(private readonly o: DiscoveryOptions) {
    this.symlinks = new SkippedSymlinks(o.stats);
    this.unreadable = new UnreadableFiles(o.stats);
  }

  /** Watches the log directory and polls it, each change a pass and a poke. */
  watch(): void {
    this.watchDir(this.o.logDir);
    this.pollTimer = setInterval(() => {
      void this.scan();
      this.o.poke();
    }, this.o.pollMs);
  }

  /** The drain's pass: no directory watched from now on. */
  lastScan(): Promise<void> {
    this.watchesClosed = true;
    return this.scan();
  }

  /** The drain deadline: stop a pass wherever it is. */
  halt(): void {
    this.halted = true;
    this.watchesClosed = true;
    this.stopWatching();
  }

  stopWatching(): void {
    if (this.pollTimer) clearInterval(this.pollTimer);
    this.pollTimer = undefined;
    for (const w of this.watchers.values()) w.close();
    this.watchers.clear();
  }

  /** The age of a file of a run: rotations by their time, then a renamed file whose new name is not known yet, then the live file. */
  age(t: { readonly path: string; readonly id: string; readonly container: string; readonly restart: number }): Age {
    const base = path.basename(t.path);
    const name = parseLogName(base);
    if (name && name.kind !== 'live') return { rank: 0, time: base.slice(base.indexOf('.log.') + 5, base.indexOf('.log.') + 20) };
    return { rank: this.live.get(runOf(t)) === t.id ? 2 : 1, time: '' };
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
          this.o.passEnded();
        }
      } while (this.rescan && !this.halted);
    })().finally(() => {
      this.scanning = undefined;
    });
    return this.scanning;
  }

  private watchDir(dir: string): void {
    if (this.watchers.has(dir) || this.watchesClosed) return;
    try {
      const w = watch(dir, { persistent: false }, () => {
        void this.scan();
        this.o.poke();
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

  private async scanOnce(): Promise<void> {
    const { logDir, selfContainer } = this.o;
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
      if (!(await this.scanContainer(container, present))) return;
    }
    this.o.passed(present);
    this.o.poke();
  }

  /** Offers every log file of one container's directory; false when halted midway. */
  private async scanContainer(container: string, present: Set<string>): Promise<boolean> {
    const dir = path.join(this.o.logDir, container);
    this.watchDir(dir);
    let names: string[];
    try {
      names = await readdir(dir);
      this.unreadable.readable(dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') await this.unreadable.note(dir, err);
      return true;
    }
    const parsed = names.map((n) => ({ n, p: parseLogName(n) })).filter((x): x is { n: string; p: LogFileName } => x.p !== undefined);
    // Plain files first: a rotation present both plain and gzipped is read from the plain one.
    // Code-unit order, not localeCompare: the names are ASCII, and collation would load ICU data.
    parsed.sort((a, b) => Number(a.p.kind === 'gz') - Number(b.p.kind === 'gz') || (a.n < b.n ? -1 : a.n > b.n ? 1 : 0));
    for (const { n, p } of parsed) {
      if (this.halted) return false;
      const file = path.join(dir, n);
      try {
        const key = await this.consider(file, container, p);
        if (key) present.add(key);
        this.unreadable.readable(file);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === 'ELOOP') this.symlinks.skip(file);
        else if (code !== 'ENOENT') await this.unreadable.note(file, err);
      }
    }
    this.o.containerDone(container);
    return true;
  }

  /** Offers a file unless it is followed or handled already; returns its checkpoint key when known. */
  private async consider(file: string, container: string, name: LogFileName): Promise<string | undefined> {
    const st = await lstat(file);
    if (st.isSymbolicLink()) this.symlinks.skip(file);
    if (!st.isFile()) return undefined;
    const found: FoundFile = { path: file, container, name, id: `${st.dev}:${st.ino}`, ino: st.ino };
    if (name.kind === 'live') this.live.set(`${container}/${name.restart}`, found.id);
    const known = this.o.followed(found);
    if (known) return known.key;
    const sig = signature(found, st);
    const ignoredKey = this.ignored.get(sig);
    if (ignoredKey !== undefined) return ignoredKey;
    const fh = await open(file, OPEN_LOG_FLAGS);
    const fst = await fh.stat();
    if (fst.ino !== st.ino || fst.dev !== st.dev) {
      await fh.close();
      return undefined;
    }
    const taken = await this.o.take(found, fh);
    if (taken.handled) this.ignored.set(sig, taken.key ?? '');
    return taken.key;
  }
}

/** A file as it was when looked at: the same signature later means nothing has changed. */
function signature(f: FoundFile, st: FileStats): string {
  return `${f.id}:${st.size}:${st.mtimeMs}`;
}
