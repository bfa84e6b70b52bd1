// RFC 6587 octet-counting over TCP or TLS (RFC 5425): `<length> <message>`
// per message, nothing ever comes back. Without an application-level ack the
// best evidence of delivery is: the bytes were written, the socket drained,
// and the connection was still up a moment later (settleMs). A receiver that
// stops and closes the connection inside that window makes the batch retry
// on a new connection, so a graceful receiver restart loses nothing (it may
// duplicate). Bytes the receiver's kernel accepted but the receiver never
// read, on a connection that stays up past the window, cannot be detected.
import { setTimeout as sleep } from 'node:timers/promises';
import { Connector, Link, openStream, untilAborted, type StreamEndpoint } from '../stream/client.ts';
import type { SendResult } from '../../delivery/sink.ts';

export interface SyslogTransport {
  send(messages: readonly Buffer[], signal: AbortSignal): Promise<SendResult>;
  close(): Promise<void>;
}

export function octetFrames(messages: readonly Buffer[]): Buffer {
  const parts: Buffer[] = [];
  for (const m of messages) parts.push(Buffer.from(`${m.length} `, 'latin1'), m);
  return Buffer.concat(parts);
}

export class OctetCountingTransport implements SyslogTransport {
  private readonly links: Connector<Link>;

  constructor(
    private readonly ep: StreamEndpoint,
    private readonly timeoutMs: number,
    private readonly settleMs: number,
  ) {
    this.links = new Connector(async (signal) => {
      const sock = await openStream(ep, timeoutMs, signal);
      // Nothing is expected back; read it anyway so the socket notices a close.
      sock.resume();
      return new Link(sock);
    });
  }

  async send(messages: readonly Buffer[], signal: AbortSignal): Promise<SendResult> {
    let link: Link;
    try {
      link = await this.links.get(signal);
    } catch (err) {
      return { kind: 'retry', reason: `syslog ${this.ep.label}: ${(err as Error).message}` };
    }
    return untilAborted(signal, this.deliver(link, messages), () => this.links.reset(link, 'drain deadline'));
  }

  private async deliver(link: Link, messages: readonly Buffer[]): Promise<SendResult> {
    const failed = await link.write(octetFrames(messages), this.timeoutMs);
    if (failed !== undefined) {
      this.links.reset(link, failed);
      return { kind: 'retry', reason: `syslog ${this.ep.label}: ${failed}` };
    }
    const closedEarly = await Promise.race([sleep(this.settleMs, undefined), link.closed]);
    if (closedEarly !== undefined) {
      this.links.reset(link, closedEarly);
      return { kind: 'retry', reason: `syslog ${this.ep.label}: ${closedEarly} right after the write; resending` };
    }
    return { kind: 'ok' };
  }

  async close(): Promise<void> {
    const link = await this.links.close();
    if (!link?.alive) return;
    // A FIN after the last byte: the receiver reads everything before it sees the end.
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        link.destroy('closing');
        resolve();
      }, 2000);
      link.sock.end(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}
