import { closeSync, existsSync, fstatSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, writeSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';

/**
 * Writes a pod log directory exactly as the kubelet and a CRI runtime
 * (containerd) lay it out, so the sidecar can be tested against the real
 * format without a node:
 *
 *   <root>/<ns>_<pod>_<uid>/<container>/<restartCount>.log
 *   <RFC3339Nano> <stdout|stderr> <P|F> <text>\n
 *
 * - the runtime splits a line longer than 16 KiB into `P` fragments and a final `F`;
 * - rotation renames the live file to `<N>.log.<YYYYMMDD-hhmmss>`, gzips every
 *   older rotation (`.gz`, through a `.gz.tmp` and a rename) and deletes
 *   rotations beyond `maxFiles` (the live file counts), in the kubelet's order:
 *   delete excess, compress, rename the live file, reopen;
 * - a container restart starts `<N+1>.log` and leaves the previous file in place.
 */

export type Stream = 'stdout' | 'stderr';

export interface PodLogWriterOptions {
  /** The folder that plays /var/log/pods. */
  root: string;
  namespace: string;
  pod: string;
  uid: string;
  /** Rotate once the live file reaches this size (kubelet containerLogMaxSize; default 10 MiB). */
  maxSizeBytes?: number;
  /** Files kept per container log, live file included (kubelet containerLogMaxFiles; default 5). */
  maxFiles?: number;
  /** Runtime line split (containerd max_container_log_line_size; default 16 KiB). */
  maxLineBytes?: number;
  /** Wall clock for line timestamps and rotation names. */
  now?: () => Date;
  /**
   * Collect writes in memory and write them in large chunks (for generating big
   * files quickly). Unbuffered, every CRI line is one write(2), as the runtime does.
   */
  bufferBytes?: number;
}

export interface WriteCounts {
  /** Logical lines written (what a reader should reassemble into records). */
  lines: number;
  /** CRI lines (P and F fragments). */
  criLines: number;
  /** Message bytes, without CRI framing and newlines. */
  messageBytes: number;
  /** Bytes appended to log files, CRI framing included. */
  fileBytes: number;
}

const DEFAULT_MAX_SIZE = 10 * 1024 * 1024;
const DEFAULT_MAX_FILES = 5;
const DEFAULT_MAX_LINE = 16 * 1024;

/**
 * Go's time.RFC3339Nano in UTC, as containerd writes it: nanoseconds with the
 * trailing zeros dropped (and no fraction at all when it is zero).
 */
export function rfc3339Nano(epochNs: bigint): string {
  const ms = Number(epochNs / 1_000_000n);
  const base = new Date(ms).toISOString().slice(0, 19);
  const frac = (epochNs % 1_000_000_000n).toString().padStart(9, '0').replace(/0+$/, '');
  return frac.length > 0 ? `${base}.${frac}Z` : `${base}Z`;
}

/** The kubelet's rotation suffix (Go layout 20060102-150405), in UTC. */
export function rotationStamp(d: Date): string {
  const p = (n: number) => String(n).padStart(2, '0');
  return `${d.getUTCFullYear()}${p(d.getUTCMonth() + 1)}${p(d.getUTCDate())}-${p(d.getUTCHours())}${p(d.getUTCMinutes())}${p(d.getUTCSeconds())}`;
}

export class PodLogWriter {
  readonly podDir: string;
  private readonly containers = new Map<string, ContainerLogWriter>();

  constructor(readonly opts: PodLogWriterOptions) {
    this.podDir = join(opts.root, `${opts.namespace}_${opts.pod}_${opts.uid}`);
    // The kubelet creates the pod directory before any container starts.
    mkdirSync(this.podDir, { recursive: true });
  }

  /** The writer of a container's current instance; creates its folder and `<restart>.log`. */
  container(name: string, restartCount = 0): ContainerLogWriter {
    let c = this.containers.get(name);
    if (!c) {
      c = new ContainerLogWriter(join(this.podDir, name), restartCount, this.opts);
      this.containers.set(name, c);
    }
    return c;
  }

  /** Totals over every container written through this writer. */
  totals(): WriteCounts {
    const t: WriteCounts = { lines: 0, criLines: 0, messageBytes: 0, fileBytes: 0 };
    for (const c of this.containers.values()) {
      const s = c.counts;
      t.lines += s.lines;
      t.criLines += s.criLines;
      t.messageBytes += s.messageBytes;
      t.fileBytes += s.fileBytes;
    }
    return t;
  }

  close(): void {
    for (const c of this.containers.values()) c.close();
  }
}

export class ContainerLogWriter {
  readonly counts: WriteCounts = { lines: 0, criLines: 0, messageBytes: 0, fileBytes: 0 };
  /** Lines written per stream. */
  readonly perStream: Record<Stream, number> = { stdout: 0, stderr: 0 };
  rotations = 0;
  /** Message bytes of P fragments waiting for their F. */
  private partialBytes = 0;
  private fd: number | undefined;
  private size = 0;
  private lastNs = 0n;
  private lastRotationSec = 0;
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private readonly maxSize: number;
  private readonly maxFiles: number;
  private readonly maxLine: number;
  private readonly now: () => Date;
  private readonly bufferBytes: number;

  constructor(readonly dir: string, public restartCount: number, opts: PodLogWriterOptions) {
    this.maxSize = opts.maxSizeBytes ?? DEFAULT_MAX_SIZE;
    this.maxFiles = opts.maxFiles ?? DEFAULT_MAX_FILES;
    this.maxLine = opts.maxLineBytes ?? DEFAULT_MAX_LINE;
    this.now = opts.now ?? (() => new Date());
    this.bufferBytes = opts.bufferBytes ?? 0;
    if (this.maxFiles < 2) throw new Error('maxFiles must be at least 2, as the kubelet requires');
    mkdirSync(dir, { recursive: true });
    this.open();
  }

  /** Path of the live file, `<restartCount>.log`. */
  get path(): string {
    return join(this.dir, `${this.restartCount}.log`);
  }

  private open(): void {
    this.fd = openSync(this.path, 'a');
    this.size = fstatSync(this.fd).size;
  }

  /**
   * Timestamps strictly increase, as they would for one writer: nanoseconds
   * from the wall clock, nudged forward by 1 ns when two lines share one.
   */
  private timestamp(): string {
    let ns = BigInt(this.now().getTime()) * 1_000_000n;
    if (ns <= this.lastNs) ns = this.lastNs + 1n;
    this.lastNs = ns;
    return rfc3339Nano(ns);
  }

  /**
   * Writes what the container printed on a stream. Each `\n`-separated line
   * becomes one logical line, split into P/F fragments at the runtime's limit.
   * A trailing newline is implied, as the runtime only frames complete lines.
   * Returns the CRI timestamp of the last line written.
   */
  write(stream: Stream, text: string | Buffer): string {
    const buf = typeof text === 'string' ? Buffer.from(text, 'utf8') : text;
    let start = 0;
    for (;;) {
      const nl = buf.indexOf(0x0a, start);
      const end = nl === -1 ? buf.length : nl;
      const ts = this.writeLine(stream, buf.subarray(start, end));
      if (nl === -1) return ts;
      start = nl + 1;
    }
  }

  private writeLine(stream: Stream, msg: Buffer): string {
    const ts = this.timestamp();
    let off = 0;
    do {
      // containerd cuts at a byte count, even inside a UTF-8 sequence.
      const chunk = msg.subarray(off, off + this.maxLine);
      off += chunk.length;
      this.fragment(ts, stream, off < msg.length ? 'P' : 'F', chunk);
    } while (off < msg.length);
    return ts;
  }

  private fragment(ts: string, stream: Stream, tag: 'P' | 'F', chunk: Buffer): void {
    this.append(Buffer.concat([Buffer.from(`${ts} ${stream} ${tag} `), chunk, Buffer.from('\n')]));
    this.counts.criLines++;
    this.partialBytes += chunk.length;
    if (tag === 'F') {
      this.counts.lines++;
      this.perStream[stream]++;
      this.counts.messageBytes += this.partialBytes;
      this.partialBytes = 0;
    }
  }

  /**
   * A sink for a container's raw output on one stream, as the runtime reads
   * it from the pipe: arbitrary chunks, lines framed at each newline, a line
   * that outgrows the limit flushed as P fragments before its end arrives,
   * and an unterminated last line written as F at end().
   */
  pipe(stream: Stream): { write: (chunk: Buffer | string) => void; end: () => void } {
    let pending = Buffer.alloc(0);
    return {
      write: (chunk) => {
        pending = Buffer.concat([pending, typeof chunk === 'string' ? Buffer.from(chunk) : chunk]);
        for (;;) {
          const nl = pending.indexOf(0x0a);
          if (nl !== -1 && nl <= this.maxLine) {
            this.fragment(this.timestamp(), stream, 'F', pending.subarray(0, nl));
            pending = pending.subarray(nl + 1);
          } else if (pending.length > this.maxLine || (nl !== -1 && nl > this.maxLine)) {
            this.fragment(this.timestamp(), stream, 'P', pending.subarray(0, this.maxLine));
            pending = pending.subarray(this.maxLine);
          } else {
            break;
          }
        }
      },
      end: () => {
        if (pending.length > 0) this.fragment(this.timestamp(), stream, 'F', pending);
        pending = Buffer.alloc(0);
      },
    };
  }

  private append(b: Buffer): void {
    if (this.fd === undefined) throw new Error(`${this.path}: writer is closed`);
    if (this.bufferBytes > 0) {
      this.pending.push(b);
      this.pendingBytes += b.length;
      if (this.pendingBytes >= this.bufferBytes) this.flush();
    } else {
      writeFully(this.fd, b);
    }
    this.size += b.length;
    this.counts.fileBytes += b.length;
    if (this.size >= this.maxSize) this.rotate();
  }

  /** Writes out what bufferBytes held back. */
  flush(): void {
    if (this.pending.length === 0 || this.fd === undefined) return;
    writeFully(this.fd, Buffer.concat(this.pending, this.pendingBytes));
    this.pending = [];
    this.pendingBytes = 0;
  }

  /** Rotated files of the live log, oldest first (the kubelet sorts by name). */
  rotatedFiles(): string[] {
    const prefix = `${this.restartCount}.log.`;
    return readdirSync(this.dir)
      .filter((f) => f.startsWith(prefix) && !f.endsWith('.tmp'))
      .sort();
  }

  /** One kubelet rotation of the live file, whatever its size. */
  rotate(): void {
    this.flush();
    // 1. Delete rotations beyond maxFiles-2: after this rotation there are
    //    maxFiles-1 rotated files plus the new live one.
    const rotated = this.rotatedFiles();
    const keep = this.maxFiles - 2;
    for (const f of rotated.slice(0, Math.max(0, rotated.length - keep))) rmSync(join(this.dir, f));
    // 2. Compress all remaining rotations but the newest, which the runtime may
    //    still be writing to in the real kubelet.
    const left = this.rotatedFiles().filter((f) => !f.endsWith('.gz'));
    for (const f of left.slice(0, -1)) {
      const src = join(this.dir, f);
      const tmp = `${src}.gz.tmp`;
      writeFileSync(tmp, gzipSync(readFileSync(src)));
      renameSync(tmp, `${src}.gz`);
      rmSync(src);
    }
    // 3. Rename the live file and reopen. The kubelet checks sizes every 10 s, so
    //    its stamps never collide; here rotations can come faster, so a taken
    //    second is bumped to the next one rather than overwriting a rotation.
    let sec = Math.floor(this.now().getTime() / 1000);
    if (sec <= this.lastRotationSec) sec = this.lastRotationSec + 1;
    let target = `${this.path}.${rotationStamp(new Date(sec * 1000))}`;
    while (existsSync(target) || existsSync(`${target}.gz`)) {
      sec++;
      target = `${this.path}.${rotationStamp(new Date(sec * 1000))}`;
    }
    this.lastRotationSec = sec;
    renameSync(this.path, target);
    if (this.fd !== undefined) closeSync(this.fd);
    this.open();
    this.rotations++;
  }

  /** The container restarted: later writes go to `<N+1>.log`; `<N>.log` stays. */
  restart(): void {
    this.flush();
    if (this.fd !== undefined) closeSync(this.fd);
    this.restartCount++;
    this.lastRotationSec = 0;
    this.open();
  }

  /** Container garbage collection removes the logs of a dead instance. */
  removeInstanceLogs(restartCount: number): void {
    for (const f of readdirSync(this.dir)) {
      if (f === `${restartCount}.log` || f.startsWith(`${restartCount}.log.`)) rmSync(join(this.dir, f));
    }
  }

  close(): void {
    this.flush();
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}

function writeFully(fd: number, b: Buffer): void {
  let off = 0;
  while (off < b.length) off += writeSync(fd, b, off, b.length - off);
}
