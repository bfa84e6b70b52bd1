// RFC 5424 message text for one record: what the syslog sink frames and
// sends. The header fields carry the container (APP-NAME), pod (PROCID) and
// stream (MSGID); one structured-data element carries the full Kubernetes
// metadata under OpenTelemetry attribute names, because the header fields
// have length limits a pod name can exceed.
import { SHAPED_FIELDS } from '../../../src/contract/record.ts';
import type { Identity } from '../../config.ts';
import { FLAG_INCOMPLETE, FLAG_MALFORMED, FLAG_TRUNCATED, type Fields, type LogRecord } from '../../records/record.ts';
import { metadataFields } from '../../encode/document.ts';

export const NILVALUE = '-';

/** Appended to a message cut to fit the receiver's limit. */
export const SYSLOG_TRUNCATION_MARKER = ' [jobharvest: truncated to the syslog message limit]';

export interface SyslogFormat {
  readonly identity: Identity;
  /** 0-23. */
  readonly facility: number;
  /** Severity (0-7) per stream. */
  readonly severity: Readonly<Record<LogRecord['stream'], number>>;
  readonly sdId: string;
  /** Largest message the receiver takes, header included (rsyslog's maxMessageSize). */
  readonly maxBytes: number;
}

/** RFC 5424 header fields are PRINTUSASCII (33-126) with a length cap; anything else becomes '_'. */
export function headerField(value: string, max: number): string {
  if (value === '') return NILVALUE;
  let out = '';
  for (let i = 0; i < value.length && out.length < max; i++) {
    const c = value.charCodeAt(i);
    out += c >= 33 && c <= 126 ? value[i] : '_';
  }
  return out;
}

/** PARAM-VALUE: '"', '\' and ']' must be escaped. */
export function paramValue(value: string): string {
  return value.replace(/["\\\]]/g, '\\$&');
}

/**
 * PARAM-NAME (SD-NAME): 1-32 PRINTUSASCII except '=', ' ', ']' and '"'. A
 * carried label key or a tenant's JSON key may be anything, so what does
 * not fit is replaced with '_' and cut at 32.
 */
export function paramName(name: string): string {
  const out = name.slice(0, 32).replace(/[^!#-<>-\\^-~]/g, '_');
  return out === '' ? '_' : out;
}

/** The SD-ID of one of jobharvest's other elements: `name@` and the enterprise number of the configured one, so all are under the same owner. */
export function sdIdLike(name: string, sdId: string): string {
  const at = sdId.lastIndexOf('@');
  return `${name}@${at >= 0 ? sdId.slice(at + 1) : '32473'}`;
}

/** The JSON fields' element: one PARAM per top-level field, nested values as JSON text. */
export function jsonElement(id: string, fields: Fields): string {
  let s = '[' + id;
  for (const [k, v] of Object.entries(fields)) s += ` ${paramName(k)}="${paramValue(typeof v === 'string' ? v : JSON.stringify(v))}"`;
  return s + ']';
}

/** The carried labels' and annotations' elements, the same for every record of the pod. */
function carriedElements(identity: Identity, sdId: string): string {
  let s = '';
  if (identity.labels) s += jsonElement(sdIdLike(SHAPED_FIELDS.syslog.labelSdName, sdId), identity.labels);
  if (identity.annotations) s += jsonElement(sdIdLike(SHAPED_FIELDS.syslog.annotationSdName, sdId), identity.annotations);
  return s;
}

/**
 * RFC 5424 allows at most 6 fraction digits; the CRI runtime writes up to 9.
 * rsyslog misreads more than 6, so the extra digits are dropped (the exact
 * time stays in the structured data). Text that is not RFC 3339 becomes NILVALUE.
 */
export function syslogTimestamp(ts: string): string {
  const m = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$/.exec(ts);
  if (!m) return NILVALUE;
  const frac = m[2] ? '.' + m[2].slice(0, 6) : '';
  return m[1] + frac + m[3];
}

/** SD-ID is `name@pen` or a registered name: 1-32 PRINTUSASCII except '=', ' ', ']' and '"'. */
export function isValidSdId(id: string): boolean {
  return /^[!#-\\^-~]{1,32}$/.test(id) && !id.includes('=');
}

export class SyslogEncoder {
  private readonly host: string;
  private readonly procId: string;
  private readonly sdTails = new Map<string, string>();
  private readonly jsonId: string;
  private readonly carried: string;

  constructor(private readonly f: SyslogFormat) {
    this.jsonId = sdIdLike(SHAPED_FIELDS.syslog.sdName, f.sdId);
    this.carried = carriedElements(f.identity, f.sdId);
    // The node is where the line was produced; the pod (PROCID) says which process.
    this.host = headerField(f.identity.node, 255);
    this.procId = headerField(f.identity.pod, 128);
  }

  /** The static part of the SD element for one container instance, built once. */
  private sdFor(r: LogRecord): string {
    const k = `${r.file.container}\0${r.file.restart}`;
    let s = this.sdTails.get(k);
    if (s === undefined) {
      s = '';
      for (const [name, v] of Object.entries(metadataFields(this.f.identity, r.file, false))) s += ` ${paramName(name)}="${paramValue(String(v))}"`;
      this.sdTails.set(k, s);
    }
    return s;
  }

  /** One RFC 5424 message (no framing), at most maxBytes long. */
  encode(r: LogRecord): Buffer {
    const pri = this.f.facility * 8 + this.f.severity[r.stream];
    let sd = `[${this.f.sdId} jobharvest.id="${r.file.idPrefix}${r.offset}" time="${paramValue(r.ts)}"${this.sdFor(r)}`;
    if (r.flags & FLAG_MALFORMED) sd += ' jobharvest.malformed="true"';
    if (r.flags & FLAG_INCOMPLETE) sd += ' jobharvest.incomplete="true"';
    if (r.lines !== undefined && r.lines > 1) sd += ` ${SHAPED_FIELDS.syslog.lines}="${r.lines}"`;
    // The message's newlines (a joined record) go as they are: octet counting and RELP both frame by length, not by line.
    let more = r.fields !== undefined ? this.carried + jsonElement(this.jsonId, r.fields) : this.carried;
    const head = `<${pri}>1 ${syslogTimestamp(r.ts)} ${this.host} ${headerField(r.file.container, 48)} ${this.procId} ${headerField(r.stream, 32)} `;
    const msg = Buffer.from(r.message, 'utf8');
    const whole = Buffer.byteLength(head) + Buffer.byteLength(sd) + Buffer.byteLength(more) + 2 + msg.length;
    if (whole <= this.f.maxBytes && !(r.flags & FLAG_TRUNCATED)) return Buffer.from(head + sd + ']' + more + ' ' + r.message, 'utf8');
    if (whole <= this.f.maxBytes) return Buffer.from(head + sd + ' jobharvest.truncated="true"]' + more + ' ' + r.message, 'utf8');
    // The fields are a copy of what the line says: when they would pass the limit, the line goes without them (the carried labels too, if they alone do).
    if (more !== this.carried && Buffer.byteLength(head + sd + more) + 64 + SYSLOG_TRUNCATION_MARKER.length > this.f.maxBytes) more = this.carried;
    if (more !== '' && Buffer.byteLength(head + sd + more) + 64 + SYSLOG_TRUNCATION_MARKER.length > this.f.maxBytes) more = '';
    const prefix = Buffer.from(head + sd + ' jobharvest.truncated="true"]' + more + ' ', 'utf8');
    const marker = Buffer.from(SYSLOG_TRUNCATION_MARKER, 'utf8');
    const room = Math.max(0, this.f.maxBytes - prefix.length - marker.length);
    return Buffer.concat([prefix, msg.subarray(0, utf8Boundary(msg, room)), marker]);
  }
}

/** The largest cut <= n that does not split a UTF-8 sequence. */
export function utf8Boundary(b: Buffer, n: number): number {
  if (n >= b.length) return b.length;
  let i = n;
  // Step back over continuation bytes (10xxxxxx) to the start of the sequence at n.
  while (i > 0 && (b[i]! & 0xc0) === 0x80) i--;
  return i;
}

const FACILITIES = ['kern', 'user', 'mail', 'daemon', 'auth', 'syslog', 'lpr', 'news', 'uucp', 'cron', 'authpriv', 'ftp', 'ntp', 'audit', 'alert', 'clock', 'local0', 'local1', 'local2', 'local3', 'local4', 'local5', 'local6', 'local7'];
const SEVERITIES = ['emerg', 'alert', 'crit', 'err', 'warning', 'notice', 'info', 'debug'];
const SEVERITY_ALIASES: Record<string, number> = { emergency: 0, critical: 2, error: 3, warn: 4, informational: 6 };

export function parseFacility(text: string): number | undefined {
  const t = text.trim().toLowerCase();
  if (/^\d+$/.test(t)) return Number(t) <= 23 ? Number(t) : undefined;
  const i = FACILITIES.indexOf(t);
  return i >= 0 ? i : undefined;
}

export function parseSeverity(text: string): number | undefined {
  const t = text.trim().toLowerCase();
  if (/^\d+$/.test(t)) return Number(t) <= 7 ? Number(t) : undefined;
  const i = SEVERITIES.indexOf(t);
  return i >= 0 ? i : Object.hasOwn(SEVERITY_ALIASES, t) ? SEVERITY_ALIASES[t] : undefined;
}

/**
 * `stdout=info,stderr=err`, or one severity for every stream. Malformed
 * (non-CRI) lines have stream `unknown`; they take the stdout severity
 * unless `unknown=` is given.
 */
export function parseSeverityMap(text: string): { map?: Record<LogRecord['stream'], number>; problem?: string } {
  const map: Record<LogRecord['stream'], number> = { stdout: 6, stderr: 3, unknown: -1 };
  const parts = text.split(',').map((p) => p.trim()).filter((p) => p !== '');
  if (parts.length === 1 && !parts[0]!.includes('=')) {
    const s = parseSeverity(parts[0]!);
    if (s === undefined) return { problem: `unknown severity '${parts[0]}'` };
    return { map: { stdout: s, stderr: s, unknown: s } };
  }
  for (const p of parts) {
    const eq = p.indexOf('=');
    const stream = p.slice(0, eq).trim();
    const s = parseSeverity(p.slice(eq + 1));
    if (eq < 0 || !['stdout', 'stderr', 'unknown'].includes(stream)) return { problem: `'${p}' is not stream=severity (streams: stdout, stderr, unknown)` };
    if (s === undefined) return { problem: `unknown severity in '${p}'` };
    map[stream as LogRecord['stream']] = s;
  }
  if (map.unknown < 0) map.unknown = map.stdout;
  return { map };
}
