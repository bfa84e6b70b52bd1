// forward sink: the Fluentd forward protocol v1 over tcp:// or tls://, every
// message sent with a chunk id and require-ack semantics: a batch is
// acknowledged only once {"ack": chunk} came back for each of its messages.
// When an ack does not come within JOBHARVEST_REQUEST_TIMEOUT_MS the
// connection is dropped and the same messages, with the same chunk ids, are
// sent again on a new one, so duplicates stay within one chunk. With
// JOBHARVEST_SHARED_KEY set, each connection first passes the shared-key
// handshake (HELO, PING, PONG), and the receiver's PONG digest is checked too.
import { hostname } from 'node:os';
import { decodeMultiStream, Encoder } from '@msgpack/msgpack';
import { ENV } from '../../src/contract/env.ts';
import { forwardTagProblem } from '../../src/contract/values.ts';
import { ConfigError } from '../config.ts';
import { log } from '../log.ts';
import { ackOf, buildPing, checkPong, FORWARD_MODES, ForwardEncoder, parseHelo, TagTemplate, type Credentials, type ForwardMessage, type ForwardMode } from './forward/protocol.ts';
import { PendingAnswers, writeAndAwait, type Answer } from './stream/acks.ts';
import { Connector, Link, openStream, streamEndpoint, untilAborted, type StreamEndpoint } from './stream/client.ts';
import type { SendResult, Sink } from '../delivery/sink.ts';
import type { SinkContext } from './types.ts';

type Env = Readonly<Record<string, string | undefined>>;

export interface ForwardSettings {
  readonly mode: ForwardMode;
  readonly tag: string;
  readonly sharedKey?: string;
}

export function loadForwardSettings(env: Env): ForwardSettings {
  const problems: string[] = [];
  const mode = (env[ENV.FORWARD_MODE.name]?.trim() || ENV.FORWARD_MODE.default) as ForwardMode;
  if (!FORWARD_MODES.includes(mode)) problems.push(`${ENV.FORWARD_MODE.name} must be one of ${FORWARD_MODES.join(', ')}, got '${mode}'`);
  const tag = env[ENV.FORWARD_TAG.name]?.trim() || ENV.FORWARD_TAG.default;
  const tagProblem = forwardTagProblem(tag);
  if (tagProblem !== undefined) problems.push(`${ENV.FORWARD_TAG.name}: ${tagProblem}`);
  const sharedKey = env[ENV.SHARED_KEY.name]?.trim() || undefined;
  if (problems.length > 0) throw new ConfigError(problems);
  return { mode, tag, sharedKey };
}

/** One connection: its inbound msgpack objects go to the handshake first, then to the ack waiters. */
class ForwardSession {
  private readonly acks = new PendingAnswers<string>();
  private inbox: Array<(msg: unknown) => void> = [];
  private authenticated = false;

  constructor(
    readonly link: Link,
    private readonly expectHandshake: boolean,
  ) {
    void this.read();
    void link.closed.then((why) => this.failAll(why));
  }

  get alive(): boolean {
    return this.link.alive;
  }

  destroy(why: string): void {
    this.link.destroy(why);
    this.failAll(why);
  }

  private async read(): Promise<void> {
    try {
      for await (const msg of decodeMultiStream(this.link.sock)) this.onMessage(msg);
    } catch (err) {
      this.destroy(`unreadable answer from the receiver: ${(err as Error).message}`);
    }
  }

  private onMessage(msg: unknown): void {
    const waiter = this.inbox.shift();
    if (waiter) return waiter(msg);
    const chunk = ackOf(msg);
    if (chunk !== undefined) {
      this.acks.settle(chunk, () => ({ ok: true }));
      return;
    }
    if (parseHelo(msg) && !this.expectHandshake) {
      this.destroy(`the receiver requires shared-key authentication; set ${ENV.SHARED_KEY.name}`);
    }
  }

  private next(timeoutMs: number): Promise<unknown> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no handshake message within ${timeoutMs} ms`)), timeoutMs);
      const onClose = (why: string): void => reject(new Error(why));
      void this.link.closed.then(onClose);
      this.inbox.push((msg) => {
        clearTimeout(timer);
        resolve(msg);
      });
    });
  }

  async handshake(c: Credentials, timeoutMs: number, encode: (v: unknown) => Uint8Array): Promise<void> {
    const helo = parseHelo(await this.next(timeoutMs));
    if (!helo) throw new Error('the receiver did not start with HELO');
    const ping = buildPing(helo, c);
    const pong = this.next(timeoutMs);
    const failed = await this.link.write(Buffer.from(encode(ping.message)), timeoutMs);
    if (failed !== undefined) throw new Error(failed);
    const problem = checkPong(await pong, helo, ping, c.sharedKey);
    if (problem) throw new Error(problem);
    this.authenticated = true;
  }

  private failAll(why: string): void {
    this.acks.failAll(why);
    // Pending handshake readers learn about the close through link.closed.
  }

  async deliver(messages: readonly ForwardMessage[], timeoutMs: number): Promise<Answer> {
    if (this.expectHandshake && !this.authenticated) return { ok: false, reason: 'not authenticated' };
    const answers = messages.map((m) => this.acks.expect(m.chunk));
    const r = await writeAndAwait(this.link, Buffer.concat(messages.map((m) => m.bytes)), answers, timeoutMs, `no ack within ${timeoutMs} ms`, (why) => this.destroy(why));
    // The receiver may still be working on the chunk; a late ack on this
    // connection would be ambiguous, so resend on a fresh one.
    if (!r.ok) this.destroy(r.reason);
    return r;
  }
}

export class ForwardClient {
  private readonly sessions: Connector<ForwardSession>;

  constructor(
    private readonly ep: StreamEndpoint,
    private readonly timeoutMs: number,
    credentials: Credentials | undefined,
    encode: (v: unknown) => Uint8Array,
  ) {
    this.sessions = new Connector(async (signal) => {
      const session = new ForwardSession(new Link(await openStream(ep, timeoutMs, signal)), credentials !== undefined);
      if (credentials) {
        try {
          await session.handshake(credentials, timeoutMs, encode);
        } catch (err) {
          session.destroy((err as Error).message);
          throw new Error(`forward handshake: ${(err as Error).message}`, { cause: err });
        }
      }
      return session;
    });
  }

  async send(messages: readonly ForwardMessage[], signal: AbortSignal): Promise<SendResult> {
    let session: ForwardSession;
    try {
      session = await this.sessions.get(signal);
    } catch (err) {
      return { kind: 'retry', reason: `forward ${this.ep.label}: ${(err as Error).message}` };
    }
    const work = session.deliver(messages, this.timeoutMs).then((r): SendResult => {
      if (r.ok) return { kind: 'ok' };
      log.debug('forward batch not acknowledged', { endpoint: this.ep.label, chunks: messages.map((m) => m.chunk), reason: r.reason });
      return { kind: 'retry', reason: `forward ${this.ep.label}: ${r.reason}` };
    });
    return untilAborted(signal, work, () => this.sessions.reset(session, 'drain deadline'));
  }

  async close(): Promise<void> {
    const s = await this.sessions.close();
    if (s?.alive) s.link.sock.end();
  }
}

export function createSink(ctx: SinkContext, env: Env = process.env): Sink {
  const cfg = ctx.config;
  const s = loadForwardSettings(env);
  const ep = streamEndpoint(cfg, 24224, 'forward');
  const enc = new Encoder();
  const credentials: Credentials | undefined = s.sharedKey
    ? { sharedKey: s.sharedKey, hostname: cfg.identity.node || hostname(), username: cfg.auth.username, password: cfg.auth.password }
    : undefined;
  const encoder = new ForwardEncoder(cfg.identity, new TagTemplate(s.tag, cfg.identity), s.mode, cfg.compression === 'gzip' ? cfg.gzipLevel : 0);
  const client = new ForwardClient(ep, cfg.requestTimeoutMs, credentials, (v) => enc.encode(v));
  return {
    send: (records, signal) => client.send(encoder.encode(records), signal),
    close: () => client.close(),
  };
}
