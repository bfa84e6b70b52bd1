/**
 * What every log receiver of the tests and benchmarks is built on, so that
 * each receiver file holds only what its protocol needs:
 *
 * - in-process servers (test/support/ndjson-receiver.ts,
 *   test/support/counting-receiver.ts, bench/sidecar/otlp-receiver.ts):
 *   listening on loopback, the address, closing with keep-alive connections
 *   cut, a request body with its codec undone, and waiting for a count;
 * - real servers run as child processes that write what they received to a
 *   file (test/harness/servers/forward-receiver.ts, otlp-file-receiver.ts,
 *   rsyslog-receiver.ts): their folder, their log, start, restart on the same
 *   port, reading the file back, stop.
 */
import type { ChildProcess } from 'node:child_process';
import { createWriteStream, existsSync, mkdtempSync, readFileSync, rmSync, type WriteStream } from 'node:fs';
import type { Server as HttpServer } from 'node:http';
import type { Server as TcpServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import zlib, { gunzipSync } from 'node:zlib';
import { exited, spawnLogged, tailFile, terminate, waitStarted } from '../support/process.ts';

/** Listens on 127.0.0.1 (port 0: any free one); resolves once listening. */
export function listenLocal(server: HttpServer | TcpServer, port = 0): Promise<void> {
  return new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
}

/** The port a listening server was given. */
export function localPort(server: HttpServer | TcpServer): number {
  const a = server.address();
  if (!a || typeof a === 'string') throw new Error('not listening');
  return a.port;
}

/** Closes an HTTP server at once: a sender's idle keep-alive connections would hold it open. */
export function closeServer(server: HttpServer): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

/** Node's zstd (experimental in Node 24, so looked up rather than imported by name). */
function zstdDecompressSync(b: Buffer): Buffer {
  const f = (zlib as unknown as { zstdDecompressSync?: (b: Buffer) => Buffer }).zstdDecompressSync;
  if (!f) throw new Error('this Node.js has no zlib.zstdDecompressSync');
  return f(b);
}

/** A whole request body with its content-encoding (gzip or zstd) undone. */
export function decodeBody(wire: Buffer, contentEncoding: string | undefined): Buffer {
  const encoding = contentEncoding ?? '';
  return /gzip/i.test(encoding) ? gunzipSync(wire) : /zstd/i.test(encoding) ? zstdDecompressSync(wire) : wire;
}

/**
 * The callers waiting for a count (lines, records) to reach their target.
 * The receiver calls `update()` after each addition; `failure`, when it
 * returns an error, fails every wait from then on.
 */
export class CountWaiters {
  private waiters: { target: number; resolve: () => void }[] = [];

  constructor(
    private readonly count: () => number,
    private readonly unit: string,
    private readonly failure: () => Error | undefined = () => undefined,
  ) {}

  update(): void {
    this.waiters = this.waiters.filter((w) => {
      if (this.count() < w.target) return true;
      w.resolve();
      return false;
    });
  }

  /** Resolves once the count reaches `target`; rejects after `timeoutMs`. */
  wait(target: number, timeoutMs: number): Promise<void> {
    const failed = this.failure();
    if (failed) return Promise.reject(failed);
    if (this.count() >= target) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(this.failure() ?? new Error(`received ${this.count()} of ${target} ${this.unit} after ${timeoutMs} ms`)), timeoutMs);
      this.waiters.push({ target, resolve: () => (clearTimeout(timer), resolve()) });
    });
  }
}

/** How a receiver process is run: its program, its arguments, and how to tell it is ready. */
export interface ReceiverProgram {
  /** For messages: `otelcol`, `rsyslogd`. */
  readonly name: string;
  /** Its own log, in the receiver's folder. */
  readonly logName: string;
  readonly startTimeoutMs: number;
}

/**
 * A real server run as a child process in a folder of its own, writing what
 * it received to a file there. A restart stops it with SIGTERM (the server
 * flushes and drains first) and starts it again on the same port, its log
 * appended to.
 */
export abstract class ReceiverProcess {
  private child: ChildProcess | undefined;
  private logStream: WriteStream | undefined;
  readonly dir: string;

  protected constructor(
    private readonly bin: string,
    readonly port: number,
    dirPrefix: string,
    private readonly program: ReceiverProgram,
  ) {
    this.dir = mkdtempSync(join(tmpdir(), dirPrefix));
  }

  /** The arguments of one run. */
  protected abstract args(): string[];
  /** True once the server accepts what it is to receive. */
  protected abstract ready(): Promise<boolean>;

  get logFile(): string {
    return join(this.dir, this.program.logName);
  }

  protected async run(): Promise<void> {
    this.logStream ??= createWriteStream(this.logFile, { flags: 'a' });
    this.child = spawnLogged(this.bin, this.args(), this.logStream);
    await waitStarted(this.child, this.program.name, () => this.ready(), this.program.startTimeoutMs, this.logFile);
  }

  /** SIGTERM, then the same configuration again on the same port after `downMs`. */
  async restart(downMs = 0): Promise<void> {
    if (this.child) {
      const done = exited(this.child);
      this.child.kill('SIGTERM');
      await done;
    }
    if (downMs > 0) await new Promise((r) => setTimeout(r, downMs));
    await this.run();
  }

  /**
   * The non-empty lines of an output file written so far; `completeOnly`
   * leaves out a last line still being written (a writer that may flush a
   * line in two parts).
   */
  protected outputLines(file: string, completeOnly: boolean): string[] {
    if (!existsSync(file)) return [];
    const text = readFileSync(file, 'utf8');
    return (completeOnly ? text.slice(0, text.lastIndexOf('\n') + 1) : text).split('\n').filter((line) => line !== '');
  }

  logTail(lines = 40): string {
    return tailFile(this.logFile, lines);
  }

  async dispose(): Promise<void> {
    if (this.child) await terminate(this.child);
    this.child = undefined;
    this.logStream?.end();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
