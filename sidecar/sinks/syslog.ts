// syslog sink: one RFC 5424 message per record, to tcp://host:port or
// tls://host:port, framed by octet counting (RFC 6587) or carried by RELP
// (JOBHARVEST_SYSLOG_PROTOCOL). See syslog/octet.ts for what plain TCP can
// and cannot guarantee; RELP acknowledges every message.
import { ENV } from '../../src/contract/env.ts';
import { ConfigError } from '../config.ts';
import { isValidSdId, parseFacility, parseSeverityMap, SyslogEncoder } from './syslog/format.ts';
import { OctetCountingTransport, type SyslogTransport } from './syslog/octet.ts';
import { RelpTransport } from './syslog/relp.ts';
import { streamEndpoint } from './stream/client.ts';
import type { Sink } from '../delivery/sink.ts';
import type { SinkContext } from './types.ts';

export const SYSLOG_PROTOCOLS = ['octet-counting', 'relp'] as const;
export type SyslogProtocol = (typeof SYSLOG_PROTOCOLS)[number];

/** How long a plain TCP connection must stay up after a write before the batch counts as delivered. */
export const OCTET_SETTLE_MS = 200;

type Env = Readonly<Record<string, string | undefined>>;

export interface SyslogSettings {
  readonly protocol: SyslogProtocol;
  readonly facility: number;
  readonly severity: Record<'stdout' | 'stderr' | 'unknown', number>;
  readonly sdId: string;
  readonly maxBytes: number;
}

function setting(env: Env, key: 'SYSLOG_PROTOCOL' | 'SYSLOG_FACILITY' | 'SYSLOG_SD_ID' | 'SYSLOG_SEVERITY' | 'SYSLOG_MAX_MESSAGE_BYTES'): string {
  const v = env[ENV[key].name]?.trim();
  return v ? v : ENV[key].default;
}

/** The syslog-only settings, validated together so a bad pod spec fails with one line. */
export function loadSyslogSettings(env: Env): SyslogSettings {
  const problems: string[] = [];
  const protocol = setting(env, 'SYSLOG_PROTOCOL') as SyslogProtocol;
  if (!SYSLOG_PROTOCOLS.includes(protocol)) problems.push(`${ENV.SYSLOG_PROTOCOL.name} must be one of ${SYSLOG_PROTOCOLS.join(', ')}, got '${protocol}'`);
  const facility = parseFacility(setting(env, 'SYSLOG_FACILITY'));
  if (facility === undefined) problems.push(`${ENV.SYSLOG_FACILITY.name}: unknown facility '${setting(env, 'SYSLOG_FACILITY')}'`);
  const sev = parseSeverityMap(setting(env, 'SYSLOG_SEVERITY'));
  if (sev.problem) problems.push(`${ENV.SYSLOG_SEVERITY.name}: ${sev.problem}`);
  const sdId = setting(env, 'SYSLOG_SD_ID');
  if (!isValidSdId(sdId)) problems.push(`${ENV.SYSLOG_SD_ID.name} must be 1-32 printable ASCII characters without '=', ']', '"' or spaces, got '${sdId}'`);
  const maxText = setting(env, 'SYSLOG_MAX_MESSAGE_BYTES');
  const maxBytes = /^\d+$/.test(maxText) ? Number(maxText) : NaN;
  // 480 is the least every RFC 5424 receiver must take.
  if (!(maxBytes >= 480 && maxBytes <= 64 * 1024 * 1024)) problems.push(`${ENV.SYSLOG_MAX_MESSAGE_BYTES.name} must be an integer from 480 to 67108864, got '${maxText}'`);
  if (problems.length > 0) throw new ConfigError(problems);
  return { protocol, facility: facility!, severity: sev.map!, sdId, maxBytes };
}

export function createSink(ctx: SinkContext, env: Env = process.env): Sink {
  const s = loadSyslogSettings(env);
  const ep = streamEndpoint(ctx.config, s.protocol === 'relp' ? 2514 : ctx.config.endpoint?.protocol === 'tls:' ? 6514 : 514, 'syslog');
  const encoder = new SyslogEncoder({ identity: ctx.config.identity, facility: s.facility, severity: s.severity, sdId: s.sdId, maxBytes: s.maxBytes });
  const timeout = ctx.config.requestTimeoutMs;
  const transport: SyslogTransport = s.protocol === 'relp' ? new RelpTransport(ep, timeout) : new OctetCountingTransport(ep, timeout, OCTET_SETTLE_MS);
  return {
    send(records, signal) {
      const messages = new Array<Buffer>(records.length);
      for (let i = 0; i < records.length; i++) messages[i] = encoder.encode(records[i]!);
      return transport.send(messages, signal);
    },
    close: () => transport.close(),
  };
}
