// Plain TCP or TLS client connections for the stream sinks (syslog and
// forward): tcp://host:port or tls://host:port, with the sidecar's TLS
// material (custom CA, client certificate) read once at start-up.
import { isIP, Socket, connect as netConnect, type LookupFunction } from 'node:net';
import { connect as tlsConnect, type ConnectionOptions } from 'node:tls';
import { ENV } from '../../../src/contract/env.ts';
import { ConfigError, type EngineOptions } from '../../config.ts';
import { readTlsFiles } from '../tls-files.ts';

export interface StreamEndpoint {
  readonly host: string;
  readonly port: number;
  /** Options for tls.connect, or undefined for plain TCP. */
  readonly tls?: ConnectionOptions;
  /** For log lines: scheme://host:port, never credentials. */
  readonly label: string;
  /** Resolves `host` when it is dialled (EngineOptions.lookup); absent: the system resolver. */
  readonly lookup?: LookupFunction;
}

export function streamEndpoint(cfg: EngineOptions, defaultPort: number, sinkName: string): StreamEndpoint {
  const url = cfg.endpoint;
  if (!url || (url.protocol !== 'tcp:' && url.protocol !== 'tls:')) {
    throw new ConfigError([`${ENV.ENDPOINT.name} must be tcp://host:port or tls://host:port for the ${sinkName} sink`]);
  }
  // URL keeps IPv6 literals in brackets; net.connect wants them bare.
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  const port = url.port ? Number(url.port) : defaultPort;
  const label = `${url.protocol}//${url.host || host}${url.port ? '' : `:${port}`}`;
  const lookup = cfg.lookup ? { lookup: cfg.lookup } : {};
  if (url.protocol === 'tcp:') return { host, port, label, ...lookup };
  const tls: ConnectionOptions = {
    host,
    port,
    // SNI takes names only.
    servername: isIP(host) ? undefined : host,
    ...readTlsFiles(cfg.tls),
  };
  return { host, port, tls, label, ...lookup };
}

/**
 * Resolves with a connected (and, for TLS, verified) socket; rejects on
 * error, after timeoutMs, or when the signal aborts.
 */
export function openStream(ep: StreamEndpoint, timeoutMs: number, signal?: AbortSignal): Promise<Socket> {
  return new Promise<Socket>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason as Error);
    const lookup = ep.lookup ? { lookup: ep.lookup } : {};
    const sock: Socket = ep.tls ? tlsConnect({ ...ep.tls, ...lookup }) : netConnect({ host: ep.host, port: ep.port, ...lookup });
    const done = (err?: Error): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      sock.off('error', done);
      sock.off(ep.tls ? 'secureConnect' : 'connect', onReady);
      if (err) {
        sock.destroy();
        reject(err);
      } else resolve(sock);
    };
    const onReady = (): void => done();
    const onAbort = (): void => done(signal!.reason as Error);
    const timer = setTimeout(() => done(new Error(`connect to ${ep.label} timed out after ${timeoutMs} ms`)), timeoutMs);
    sock.once('error', done);
    sock.once(ep.tls ? 'secureConnect' : 'connect', onReady);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * One open connection and how it ended. A write resolves only once Node has
 * handed the bytes to the kernel (the socket drained), or with the reason the
 * connection broke first.
 */
export class Link {
  closedReason: string | undefined;
  readonly closed: Promise<string>;

  constructor(readonly sock: Socket) {
    this.closed = new Promise<string>((resolve) => {
      const end = (why: string): void => {
        if (this.closedReason !== undefined) return;
        this.closedReason = why;
        resolve(why);
      };
      sock.on('error', (err) => end(err.message));
      // The receiver closing (FIN) means anything written after it is lost.
      sock.once('end', () => end('closed by the receiver'));
      sock.once('close', () => end('connection closed'));
    });
    sock.setNoDelay(true);
  }

  get alive(): boolean {
    return this.closedReason === undefined && !this.sock.destroyed;
  }

  /** Resolves undefined once drained; a reason if the connection broke or timeoutMs passed. */
  write(data: Buffer, timeoutMs: number): Promise<string | undefined> {
    if (!this.alive) return Promise.resolve(this.closedReason ?? 'connection closed');
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<string>((resolve) => {
      timer = setTimeout(() => resolve(`write not drained within ${timeoutMs} ms`), timeoutMs);
    });
    const written = new Promise<string | undefined>((resolve) => this.sock.write(data, (err) => resolve(err ? err.message : undefined)));
    return Promise.race([written, this.closed, timeout]).finally(() => clearTimeout(timer));
  }

  destroy(why: string): void {
    if (this.closedReason === undefined) this.closedReason = why;
    this.sock.destroy();
  }
}

/** Keeps at most one live link, opening a new one on demand after the last one broke. */
export class Connector<L extends { readonly alive: boolean; destroy(why: string): void }> {
  private current: Promise<L> | undefined;
  private last: L | undefined;

  constructor(private readonly open: (signal: AbortSignal) => Promise<L>) {}

  get(signal: AbortSignal): Promise<L> {
    if (this.last && !this.last.alive) {
      this.current = undefined;
      this.last = undefined;
    }
    if (!this.current) {
      const p = this.open(signal).then(
        (l) => {
          this.last = l;
          return l;
        },
        (err: unknown) => {
          if (this.current === p) this.current = undefined;
          throw err;
        },
      );
      this.current = p;
    }
    return this.current;
  }

  /** Drops this link (if it is still the current one) so the next get() reconnects. */
  reset(l: L, why: string): void {
    l.destroy(why);
    if (this.last === l) {
      this.current = undefined;
      this.last = undefined;
    }
  }

  async close(): Promise<L | undefined> {
    const l = this.last;
    this.current = undefined;
    this.last = undefined;
    return l;
  }
}

/**
 * The drain deadline aborts delivery; a write or an ack wait must not hold the
 * sidecar past it, so the result becomes a retry (the batch is then reported
 * unsent) and onAbort tears the connection down.
 */
export function untilAborted<T extends { readonly kind: string }>(signal: AbortSignal, work: Promise<T>, onAbort: () => void): Promise<T | { kind: 'retry'; reason: string }> {
  if (signal.aborted) {
    onAbort();
    return Promise.resolve({ kind: 'retry', reason: 'aborted at the drain deadline' });
  }
  let listener: (() => void) | undefined;
  const aborted = new Promise<{ kind: 'retry'; reason: string }>((resolve) => {
    listener = () => {
      onAbort();
      resolve({ kind: 'retry', reason: 'aborted at the drain deadline' });
    };
    signal.addEventListener('abort', listener, { once: true });
  });
  return Promise.race([work, aborted]).finally(() => signal.removeEventListener('abort', listener!));
}
