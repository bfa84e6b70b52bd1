// The Fluentd forward protocol v1, as pure functions: records to Forward or
// PackedForward messages with EventTime (ext type 0) and a chunk id, the
// tag template, and the shared-key handshake (HELO / PING / PONG).
import { createHash, randomBytes } from 'node:crypto';
import { gzipBody } from '../../encode/compress.ts';
import { Encoder, ExtData } from '@msgpack/msgpack';
import type { Identity } from '../../config.ts';
import { FLAG_INCOMPLETE, FLAG_MALFORMED, FLAG_TRUNCATED, type LogRecord } from '../../records/record.ts';
import { parseTimestamp } from '../../records/timestamp.ts';
import { metadataFields } from '../../encode/document.ts';
import { FORWARD_TAG_VARIABLES } from '../../../src/contract/values.ts';
import { SHAPED_FIELDS } from '../../../src/contract/record.ts';

export const FORWARD_MODES = ['packed-forward', 'forward'] as const;
export type ForwardMode = (typeof FORWARD_MODES)[number];

type TagVariable = (typeof FORWARD_TAG_VARIABLES)[number];

/** Builds tags from the template; empty values become '_' so a tag never has an empty part. */
export class TagTemplate {
  private readonly cache = new Map<string, string>();
  constructor(
    private readonly template: string,
    private readonly identity: Identity,
  ) {}

  tag(r: LogRecord): string {
    const k = `${r.file.container}\0${r.stream}`;
    let t = this.cache.get(k);
    if (t === undefined) {
      const vars: Record<TagVariable, string> = {
        namespace: this.identity.namespace,
        pod: this.identity.pod,
        container: r.file.container,
        job: this.identity.job,
        stream: r.stream,
        node: this.identity.node,
      };
      t = this.template.replace(/\$\{([a-z]+)\}/g, (_, name: TagVariable) => vars[name] || '_');
      this.cache.set(k, t);
    }
    return t;
  }
}

/** EventTime: ext type 0, seconds and nanoseconds as two big-endian uint32. */
export function eventTime(sec: number, nanos: number): ExtData {
  const b = new Uint8Array(8);
  const v = new DataView(b.buffer);
  v.setUint32(0, sec >>> 0);
  v.setUint32(4, nanos >>> 0);
  return new ExtData(0, b);
}

export interface ForwardMessage {
  readonly tag: string;
  readonly chunk: string;
  readonly records: readonly LogRecord[];
  readonly bytes: Uint8Array;
}

/**
 * The chunk id is derived from the records it carries, so the same batch
 * resent (after an ack timeout, a reconnect, even a sidecar restart that cut
 * the same batch) carries the same id, and a receiver that de-duplicates by
 * chunk can drop the copy. 128 bits, base64, as the spec asks.
 */
export function chunkId(tag: string, records: readonly LogRecord[]): string {
  const first = records[0]!;
  const last = records[records.length - 1]!;
  return createHash('sha256')
    .update(`${tag}\0${first.file.idPrefix}${first.offset}\0${last.file.idPrefix}${last.offset}\0${records.length}`)
    .digest()
    .subarray(0, 16)
    .toString('base64');
}

export class ForwardEncoder {
  private readonly enc = new Encoder();
  private readonly meta = new Map<string, Record<string, string | number>>();

  constructor(
    private readonly identity: Identity,
    private readonly tags: TagTemplate,
    private readonly mode: ForwardMode,
    /** gzip level for CompressedPackedForward, or 0 for none. */
    private readonly gzipLevel: number,
  ) {}

  private entry(r: LogRecord): [ExtData, Record<string, unknown>] {
    const k = `${r.file.container}\0${r.file.restart}`;
    let m = this.meta.get(k);
    if (!m) {
      m = metadataFields(this.identity, r.file);
      this.meta.set(k, m);
    }
    const t = parseTimestamp(r.ts);
    const now = Date.now();
    const time = t ? eventTime(t.sec, t.nanos) : eventTime(Math.floor(now / 1000), (now % 1000) * 1e6);
    const record: Record<string, unknown> = { message: r.message, stream: r.stream, 'jobharvest.id': r.file.idPrefix + r.offset, ...m };
    if (r.flags & FLAG_TRUNCATED) record['jobharvest.truncated'] = true;
    if (r.flags & FLAG_MALFORMED) record['jobharvest.malformed'] = true;
    if (r.flags & FLAG_INCOMPLETE) record['jobharvest.incomplete'] = true;
    if (r.lines !== undefined && r.lines > 1) record[SHAPED_FIELDS.forward.lines] = r.lines;
    // A map under one key: Fluentd's record_transformer or Fluent Bit's nest filter can lift it, and no tenant key lands beside jobharvest's.
    if (r.fields !== undefined) record[SHAPED_FIELDS.forward.json] = r.fields;
    return [time, record];
  }

  /** One message per tag in the batch (a forward message has one tag), each with its own chunk id. */
  encode(records: readonly LogRecord[]): ForwardMessage[] {
    const byTag = new Map<string, LogRecord[]>();
    for (const r of records) {
      const tag = this.tags.tag(r);
      let list = byTag.get(tag);
      if (!list) byTag.set(tag, (list = []));
      list.push(r);
    }
    const out: ForwardMessage[] = [];
    for (const [tag, list] of byTag) {
      const chunk = chunkId(tag, list);
      const options: Record<string, unknown> = { chunk, size: list.length };
      let bytes: Uint8Array;
      if (this.mode === 'forward') {
        bytes = this.enc.encode([tag, list.map((r) => this.entry(r)), options]);
      } else {
        // PackedForward: the entries are one concatenated msgpack stream, sent as bin.
        const parts = list.map((r) => this.enc.encode(this.entry(r)));
        let stream: Uint8Array = Buffer.concat(parts);
        if (this.gzipLevel > 0) {
          stream = gzipBody(stream, this.gzipLevel);
          options.compressed = 'gzip';
        }
        bytes = this.enc.encode([tag, stream, options]);
      }
      out.push({ tag, chunk, records: list, bytes });
    }
    return out;
  }
}

export function sha512Hex(...parts: Array<string | Uint8Array>): string {
  const h = createHash('sha512');
  for (const p of parts) h.update(p);
  return h.digest('hex');
}

export interface Helo {
  readonly nonce: Uint8Array;
  /** Salt for user authentication; empty when the server wants none. */
  readonly authSalt: Uint8Array;
}

function bytesOf(v: unknown): Uint8Array | undefined {
  if (typeof v === 'string') return Buffer.from(v, 'utf8');
  if (v instanceof Uint8Array) return v;
  return undefined;
}

/** ['HELO', {nonce, auth, keepalive}] or undefined if this is not a HELO. */
export function parseHelo(msg: unknown): Helo | undefined {
  if (!Array.isArray(msg) || msg[0] !== 'HELO' || typeof msg[1] !== 'object' || msg[1] === null) return undefined;
  const opts = msg[1] as Record<string, unknown>;
  const nonce = bytesOf(opts.nonce);
  if (!nonce) return undefined;
  return { nonce, authSalt: bytesOf(opts.auth) ?? new Uint8Array(0) };
}

export interface Credentials {
  readonly sharedKey: string;
  readonly hostname: string;
  readonly username?: string;
  readonly password?: string;
}

export interface Ping {
  readonly message: unknown[];
  readonly salt: string;
}

export function buildPing(helo: Helo, c: Credentials, salt: string = randomBytes(16).toString('hex')): Ping {
  const digest = sha512Hex(salt, c.hostname, helo.nonce, c.sharedKey);
  let user = '';
  let pass = '';
  if (helo.authSalt.length > 0) {
    user = c.username ?? '';
    pass = sha512Hex(helo.authSalt, user, c.password ?? '');
  }
  return { message: ['PING', c.hostname, salt, digest, user, pass], salt };
}

/** Checks ['PONG', ok, reason, server_hostname, digest]; returns a problem or undefined. */
export function checkPong(msg: unknown, helo: Helo, ping: Ping, sharedKey: string): string | undefined {
  if (!Array.isArray(msg) || msg[0] !== 'PONG') return 'the receiver did not answer PING with PONG';
  if (msg[1] !== true) return `the receiver refused authentication: ${String(msg[2] ?? '')}`;
  const host = typeof msg[3] === 'string' ? msg[3] : '';
  if (msg[4] !== sha512Hex(ping.salt, host, helo.nonce, sharedKey)) return 'the receiver does not know the shared key (PONG digest mismatch)';
  return undefined;
}

/** {"ack": chunk} from the receiver, or undefined. */
export function ackOf(msg: unknown): string | undefined {
  if (typeof msg !== 'object' || msg === null || Array.isArray(msg)) return undefined;
  const ack = (msg as Record<string, unknown>).ack;
  return typeof ack === 'string' ? ack : undefined;
}
