// RELP (rsyslog's Reliable Event Logging Protocol) client: every message is
// a numbered `syslog` command the receiver answers with `rsp 200`, so a batch
// is acknowledged only once the receiver has taken every message in it.
// The protocol is a handful of commands over one TCP (or TLS) connection:
//   frame = TXNR SP COMMAND SP DATALEN [SP DATA] LF
// A batch's messages are pipelined; a broken connection fails every
// unanswered message, and the delivery stage resends the batch.
import { PendingAnswers, writeAndAwait, type Answer } from '../stream/acks.ts';
import { Connector, Link, openStream, untilAborted, type StreamEndpoint } from '../stream/client.ts';
import type { SyslogTransport } from './octet.ts';
import type { SendResult } from '../../delivery/sink.ts';

const MAX_TXNR = 999_999_999;
const LF = 0x0a;
const SP = 0x20;

export interface RelpFrame {
  readonly txnr: number;
  readonly command: string;
  readonly data: Buffer;
}

export function relpFrame(txnr: number, command: string, data?: Buffer): Buffer {
  const len = data?.length ?? 0;
  const head = Buffer.from(len > 0 ? `${txnr} ${command} ${len} ` : `${txnr} ${command} 0`, 'latin1');
  return Buffer.concat(len > 0 ? [head, data!, Buffer.from([LF])] : [head, Buffer.from([LF])]);
}

/** Splits the receiver's byte stream into frames; throws on anything that is not RELP. */
export class RelpParser {
  private buf: Buffer = Buffer.alloc(0);

  push(chunk: Buffer): RelpFrame[] {
    this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    const out: RelpFrame[] = [];
    for (;;) {
      const f = this.next();
      if (!f) return out;
      out.push(f);
    }
  }

  private next(): RelpFrame | undefined {
    const b = this.buf;
    const sp1 = b.indexOf(SP);
    if (sp1 < 0) return this.incomplete(b.length);
    const sp2 = b.indexOf(SP, sp1 + 1);
    if (sp2 < 0) return this.incomplete(b.length);
    // DATALEN ends at SP (data follows) or LF (no data).
    let end = sp2 + 1;
    while (end < b.length && b[end]! >= 0x30 && b[end]! <= 0x39) end++;
    if (end === b.length) return this.incomplete(end);
    const txnr = Number(b.toString('latin1', 0, sp1));
    const command = b.toString('latin1', sp1 + 1, sp2);
    const len = Number(b.toString('latin1', sp2 + 1, end));
    if (!Number.isSafeInteger(txnr) || !/^[a-z]{1,32}$/.test(command) || end === sp2 + 1) throw new Error('malformed RELP frame from the receiver');
    let dataStart = end;
    if (len > 0) {
      if (b[end] !== SP) throw new Error('malformed RELP frame from the receiver');
      dataStart = end + 1;
    }
    const trailer = dataStart + len;
    if (trailer >= b.length) return undefined;
    if (b[trailer] !== LF) throw new Error('RELP frame without its trailer');
    const data = Buffer.from(b.subarray(dataStart, trailer));
    this.buf = b.subarray(trailer + 1);
    return { txnr, command, data };
  }

  private incomplete(scanned: number): undefined {
    if (scanned > 64) throw new Error('malformed RELP frame header from the receiver');
    return undefined;
  }
}

class RelpSession {
  private nextTxnr = 1;
  private readonly waiting = new PendingAnswers<number>();
  private readonly parser = new RelpParser();

  constructor(readonly link: Link) {
    link.sock.on('data', (chunk: Buffer) => {
      let frames: RelpFrame[];
      try {
        frames = this.parser.push(chunk);
      } catch (err) {
        link.destroy((err as Error).message);
        return;
      }
      for (const f of frames) this.onFrame(f);
    });
    void link.closed.then((why) => this.failAll(why));
  }

  get alive(): boolean {
    return this.link.alive;
  }

  destroy(why: string): void {
    this.link.destroy(why);
    this.failAll(why);
  }

  private onFrame(f: RelpFrame): void {
    if (f.command === 'serverclose') {
      this.destroy('the receiver closed the RELP session');
      return;
    }
    if (f.command !== 'rsp') return;
    this.waiting.settle(f.txnr, () => {
      const text = f.data.toString('utf8');
      return text.startsWith('200') ? { ok: true } : { ok: false, reason: `RELP answered ${text.split('\n')[0]!.slice(0, 200)}` };
    });
  }

  private failAll(why: string): void {
    this.waiting.failAll(why);
  }

  private take(): number {
    const t = this.nextTxnr;
    this.nextTxnr = t >= MAX_TXNR ? 1 : t + 1;
    return t;
  }

  /** Sends the commands pipelined; resolves with the first failure, or ok once every one is answered 200. */
  async exchange(command: string, payloads: readonly Buffer[], timeoutMs: number): Promise<Answer> {
    const frames: Buffer[] = [];
    const answers: Promise<Answer>[] = [];
    for (const p of payloads) {
      const txnr = this.take();
      answers.push(this.waiting.expect(txnr));
      frames.push(relpFrame(txnr, command, p));
    }
    const r = await writeAndAwait(this.link, Buffer.concat(frames), answers, timeoutMs, `no RELP answer within ${timeoutMs} ms`, (why) => this.destroy(why));
    // An unanswered message leaves the session in an unknown state: start over.
    if (!r.ok && r.reason.startsWith('no RELP answer')) this.destroy(r.reason);
    return r;
  }

  async close(timeoutMs: number): Promise<void> {
    if (this.alive) await this.exchange('close', [Buffer.alloc(0)], timeoutMs);
    this.link.destroy('closed');
  }
}

const OFFERS = Buffer.from('relp_version=0\nrelp_software=jobharvest\ncommands=syslog', 'latin1');

export class RelpTransport implements SyslogTransport {
  private readonly sessions: Connector<RelpSession>;

  constructor(
    private readonly ep: StreamEndpoint,
    private readonly timeoutMs: number,
  ) {
    this.sessions = new Connector(async (signal) => {
      const session = new RelpSession(new Link(await openStream(ep, timeoutMs, signal)));
      const opened = await session.exchange('open', [OFFERS], timeoutMs);
      if (!opened.ok) {
        session.destroy(opened.reason);
        throw new Error(`RELP open refused: ${opened.reason}`);
      }
      return session;
    });
  }

  async send(messages: readonly Buffer[], signal: AbortSignal): Promise<SendResult> {
    let session: RelpSession;
    try {
      session = await this.sessions.get(signal);
    } catch (err) {
      return { kind: 'retry', reason: `relp ${this.ep.label}: ${(err as Error).message}` };
    }
    const work = session.exchange('syslog', messages, this.timeoutMs).then((r): SendResult => (r.ok ? { kind: 'ok' } : { kind: 'retry', reason: `relp ${this.ep.label}: ${r.reason}` }));
    return untilAborted(signal, work, () => this.sessions.reset(session, 'drain deadline'));
  }

  async close(): Promise<void> {
    const s = await this.sessions.close();
    await s?.close(Math.min(this.timeoutMs, 2000));
  }
}
