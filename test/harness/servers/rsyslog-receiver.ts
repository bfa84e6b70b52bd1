import { execFileSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { canConnect, freePort } from '../../support/ports.ts';
import { ReceiverProcess } from '../receiver.ts';
import { ensureRsyslog } from './rsyslog.ts';

/** Debian packages holding the TLS (gtls) netstream driver and the RELP input. */
const EXTRA_PACKAGES: ReadonlyArray<[string, string]> = [
  ['rsyslog-gnutls', 'lmnsd_gtls.so'],
  ['rsyslog-relp', 'imrelp.so'],
];

/** Where Debian puts rsyslog's loadable modules (the multiarch folder). */
function moduleDir(): string {
  return `/usr/lib/${process.arch === 'arm64' ? 'aarch64' : 'x86_64'}-linux-gnu/rsyslog`;
}

/**
 * rsyslog plus its TLS driver and RELP input, from the distribution,
 * installed only when missing (idempotent; needs root the first time).
 */
export function ensureRsyslogReceiver(log: (msg: string) => void = () => {}): string {
  const bin = ensureRsyslog(log);
  const missing = EXTRA_PACKAGES.filter(([, so]) => !existsSync(join(moduleDir(), so))).map(([pkg]) => pkg);
  if (missing.length === 0) return bin;
  if (process.getuid?.() !== 0) throw new Error(`rsyslog modules missing; install ${missing.join(' ')} (needs root)`);
  log(`installing ${missing.join(', ')} from the distribution`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const install = () => execFileSync('apt-get', ['install', '-y', '--no-install-recommends', ...missing], { stdio: 'inherit', env });
  try {
    install();
  } catch {
    // A fresh machine may have no package lists yet.
    execFileSync('apt-get', ['update'], { stdio: 'inherit', env });
    install();
  }
  for (const [pkg, so] of EXTRA_PACKAGES) if (!existsSync(join(moduleDir(), so))) throw new Error(`${pkg} installed but ${so} is still missing`);
  return bin;
}

export type RsyslogInput =
  | { kind: 'tcp' }
  /** imtcp over TLS (gtls), requiring a client certificate signed by the CA. */
  | { kind: 'tls'; caFile: string; certFile: string; keyFile: string }
  | { kind: 'relp' };

export interface RsyslogOptions {
  input: RsyslogInput;
  /** rsyslog's maxMessageSize, in bytes. */
  maxMessageSize?: number;
  /**
   * false: a received newline stays a newline. rsyslog's default turns
   * control characters into `#012` as they arrive, which hides whether the
   * sender kept them.
   */
  escapeControlCharacters?: boolean;
}

/** One message as rsyslog parsed it (RFC 5424 fields), read back from its output file. */
export interface ReceivedSyslog {
  pri: number;
  severity: number;
  facility: number;
  timestamp: string;
  hostname: string;
  app: string;
  procid: string;
  msgid: string;
  /** The structured data, parsed: SD-ID -> param -> value. */
  sd: Record<string, Record<string, string>>;
  msg: string;
}

/** Parses RFC 5424 STRUCTURED-DATA text ("-" or [id k="v" ...]...). */
export function parseStructuredData(text: string): Record<string, Record<string, string>> {
  const out: Record<string, Record<string, string>> = {};
  if (text === '-' || text === '') return out;
  let i = 0;
  while (i < text.length && text[i] === '[') {
    i++;
    let id = '';
    while (text[i] !== ' ' && text[i] !== ']') id += text[i++];
    const params: Record<string, string> = {};
    while (text[i] === ' ') {
      i++;
      let name = '';
      while (text[i] !== '=') name += text[i++];
      i += 2; // ="
      let value = '';
      while (text[i] !== '"') {
        if (text[i] === '\\' && ['"', '\\', ']'].includes(text[i + 1]!)) i++;
        value += text[i++];
      }
      i++;
      params[name] = value;
    }
    if (text[i] !== ']') throw new Error(`bad structured data at ${i}: ${text.slice(0, 200)}`);
    i++;
    out[id] = params;
  }
  return out;
}

/**
 * A real rsyslogd (the distribution's), run in the foreground with its own
 * configuration: one input (imtcp, imtcp over TLS, or imrelp) on 127.0.0.1
 * and every message written as one JSON line to a file the test reads back.
 * restart() stops it with SIGTERM and starts it again on the same port.
 */
export class RsyslogReceiver extends ReceiverProcess {
  private constructor(
    bin: string,
    port: number,
    private readonly opts: RsyslogOptions,
  ) {
    super(bin, port, 'jh-rsyslog-', { name: 'rsyslogd', logName: 'rsyslogd.log', startTimeoutMs: 20_000 });
  }

  static async start(opts: RsyslogOptions): Promise<RsyslogReceiver> {
    const r = new RsyslogReceiver(ensureRsyslogReceiver(), await freePort(), opts);
    r.writeConfig();
    await r.run();
    return r;
  }

  get outFile(): string {
    return join(this.dir, 'messages.jsonl');
  }
  get endpoint(): string {
    return `${this.opts.input.kind === 'tls' ? 'tls' : 'tcp'}://127.0.0.1:${this.port}`;
  }

  private writeConfig(): void {
    const inp = this.opts.input;
    const g = [`workDirectory="${this.dir}"`, `maxMessageSize="${this.opts.maxMessageSize ?? 65536}"`];
    if (this.opts.escapeControlCharacters === false) g.push('parser.escapeControlCharactersOnReceive="off"');
    let input: string;
    if (inp.kind === 'tls') {
      g.push(`defaultNetstreamDriverCAFile="${inp.caFile}"`, `defaultNetstreamDriverCertFile="${inp.certFile}"`, `defaultNetstreamDriverKeyFile="${inp.keyFile}"`);
      input = `module(load="imtcp" streamDriver.name="gtls" streamDriver.mode="1" streamDriver.authMode="x509/certvalid")\ninput(type="imtcp" port="${this.port}" address="127.0.0.1" ruleset="out")`;
    } else if (inp.kind === 'relp') {
      input = `module(load="imrelp")\ninput(type="imrelp" port="${this.port}" address="127.0.0.1" ruleset="out")`;
    } else {
      input = `module(load="imtcp")\ninput(type="imtcp" port="${this.port}" address="127.0.0.1" ruleset="out")`;
    }
    const props: Array<[string, string, string?]> = [
      ['pri', 'pri'],
      ['severity', 'syslogseverity'],
      ['facility', 'syslogfacility'],
      ['timestamp', 'timereported', 'rfc3339'],
      ['hostname', 'hostname'],
      ['app', 'app-name'],
      ['procid', 'procid'],
      ['msgid', 'msgid'],
      ['sd', 'structured-data'],
      ['msg', 'msg'],
    ];
    const template = props.map(([out, name, date]) => `  property(outname="${out}" name="${name}" format="jsonf"${date ? ` dateFormat="${date}"` : ''})`).join('\n');
    writeFileSync(
      join(this.dir, 'rsyslog.conf'),
      [
        `global(${g.join(' ')})`,
        // Drain what was received before exiting on SIGTERM.
        'main_queue(queue.timeoutShutdown="20000")',
        input,
        `template(name="json" type="list" option.jsonf="on") {\n${template}\n}`,
        `ruleset(name="out") { action(type="omfile" file="${this.outFile}" template="json") }`,
        '',
      ].join('\n'),
    );
  }

  protected args(): string[] {
    return ['-n', '-f', join(this.dir, 'rsyslog.conf'), '-i', join(this.dir, 'rsyslogd.pid')];
  }

  protected ready(): Promise<boolean> {
    return canConnect(this.port);
  }

  /** Every message written so far. */
  received(): ReceivedSyslog[] {
    const out: ReceivedSyslog[] = [];
    for (const line of this.outputLines(this.outFile, false)) {
      const j = JSON.parse(line) as Record<string, string>;
      out.push({
        pri: Number(j.pri),
        severity: Number(j.severity),
        facility: Number(j.facility),
        timestamp: j.timestamp!,
        hostname: j.hostname!,
        app: j.app!,
        procid: j.procid!,
        msgid: j.msgid!,
        sd: parseStructuredData(j.sd!),
        msg: j.msg!,
      });
    }
    return out;
  }
}
