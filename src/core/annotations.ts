import { credentialQueryParameter, isEndpointScheme } from '../contract/endpoint.ts';
import { esIndexProblem, forwardTagProblem, lokiTenantProblem } from '../contract/values.ts';
import { SINKS, type SinkType } from '../contract/env.ts';
import { STATUS_ANNOTATION } from '../contract/harvest.ts';
import { MULTILINE_RULES, PARSE_FORMATS, startPatternProblem, type MultilineRule, type ParseFormat } from '../contract/shaping-settings.ts';

/** Every annotation jobharvest reads or writes. The docs test compares this list with the configuration reference. */
export const ANNOTATIONS = {
  inject: 'jobharvest.io/inject',
  mode: 'jobharvest.io/mode',
  sink: 'jobharvest.io/sink',
  endpoint: 'jobharvest.io/endpoint',
  ttlSecondsAfterFinished: 'jobharvest.io/ttl-seconds-after-finished',
  drainSeconds: 'jobharvest.io/drain-seconds',
  authSecret: 'jobharvest.io/auth-secret',
  tlsSecret: 'jobharvest.io/tls-secret',
  esIndex: 'jobharvest.io/es-index',
  otlpEncoding: 'jobharvest.io/otlp-encoding',
  lokiTenant: 'jobharvest.io/loki-tenant',
  forwardTag: 'jobharvest.io/forward-tag',
  multiline: 'jobharvest.io/multiline',
  multilineStart: 'jobharvest.io/multiline-start',
  parse: 'jobharvest.io/parse',
  status: STATUS_ANNOTATION,
  /** Written at admission from the configured template: where the Job's logs can be read. */
  logsUrl: 'jobharvest.io/logs-url',
  /** Read by `jobharvest logs`: a query API when the sink endpoint is not one. */
  queryEndpoint: 'jobharvest.io/query-endpoint',
  queryType: 'jobharvest.io/query-type',
} as const;

/** The query APIs `jobharvest logs` speaks. */
export const QUERY_TYPES = ['victorialogs', 'loki', 'elasticsearch'] as const;
export type QueryType = (typeof QUERY_TYPES)[number];

export const INJECT_LABEL = 'jobharvest.io/inject';
export const DEFAULT_CONTAINER_ANNOTATION = 'kubectl.kubernetes.io/default-container';
export const PSA_ENFORCE_LABEL = 'pod-security.kubernetes.io/enforce';
export const JOB_NAME_LABEL = 'batch.kubernetes.io/job-name';
/** The Job controller's label with the Job's uid, on every pod it creates. */
export const JOB_UID_LABEL = 'batch.kubernetes.io/controller-uid';

export type ModeSetting = 'node' | 'api' | 'auto';

export type ParseResult<T> = { ok: true; value: T } | { ok: false; why: string };

const ok = <T>(value: T): ParseResult<T> => ({ ok: true, value });
const bad = (why: string): ParseResult<never> => ({ ok: false, why });

// Kubernetes object names (DNS-1123 subdomain), the shape a Secret name must have.
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

export const parse = {
  /** Opt-in/opt-out switch. Both words people actually write are accepted. */
  toggle(v: string): ParseResult<boolean> {
    const s = v.trim().toLowerCase();
    if (s === 'enabled' || s === 'true' || s === 'yes' || s === 'on') return ok(true);
    if (s === 'disabled' || s === 'false' || s === 'no' || s === 'off') return ok(false);
    return bad('expected enabled or disabled');
  },
  mode(v: string): ParseResult<ModeSetting> {
    const s = v.trim();
    return s === 'node' || s === 'api' || s === 'auto' ? ok(s) : bad('expected node, api or auto');
  },
  sink(v: string): ParseResult<SinkType> {
    const s = v.trim();
    return (SINKS as readonly string[]).includes(s) ? ok(s as SinkType) : bad(`expected one of ${SINKS.join(', ')}`);
  },
  endpoint(v: string): ParseResult<string> {
    const s = v.trim();
    let u: URL;
    try {
      u = new URL(s);
    } catch {
      return bad('not a URL');
    }
    if (!isEndpointScheme(u.protocol)) return bad('scheme must be http, https, tcp or tls');
    if (u.username || u.password) return bad('credentials in the URL are not allowed; use auth-secret');
    const param = credentialQueryParameter(u);
    if (param !== undefined) return bad(`query parameter ${JSON.stringify(param.slice(0, 40))} looks like a credential, which would sit in plain pod env; use auth-secret`);
    return ok(s);
  },
  seconds(min: number, max: number) {
    return (v: string): ParseResult<number> => {
      const s = v.trim();
      if (!/^\d{1,10}$/.test(s)) return bad('not a non-negative integer');
      const n = Number(s);
      if (n < min || n > max) return bad(`must be between ${min} and ${max}`);
      return ok(n);
    };
  },
  secretName(v: string): ParseResult<string> {
    const s = v.trim();
    return s.length <= 253 && DNS1123_SUBDOMAIN.test(s) ? ok(s) : bad('not a valid Secret name');
  },
  otlpEncoding(v: string): ParseResult<'protobuf' | 'json'> {
    const s = v.trim();
    return s === 'protobuf' || s === 'json' ? ok(s) : bad('expected protobuf or json');
  },
  /** Free text that ends up in one env var: printable, bounded, single line. */
  text(v: string): ParseResult<string> {
    const s = v.trim();
    if (s.length === 0) return bad('empty');
    if (s.length > 512) return bad('longer than 512 characters');
    // eslint-disable-next-line no-control-regex
    if (/[\u0000-\u001f\u007f]/.test(s)) return bad('contains control characters');
    return ok(s);
  },
  /** Comma-separated built-in rules; `none` turns joining off at this level. */
  multiline(v: string): ParseResult<MultilineRule[]> {
    const s = v.trim();
    if (s === 'none') return ok([]);
    const rules: MultilineRule[] = [];
    for (const part of s.split(',')) {
      const rule = part.trim();
      if (rule === '') continue;
      if (!(MULTILINE_RULES as readonly string[]).includes(rule)) {
        return bad(`unknown rule ${JSON.stringify(rule.slice(0, 40))}; expected a list of ${MULTILINE_RULES.join(', ')}, or none`);
      }
      if (!rules.includes(rule as MultilineRule)) rules.push(rule as MultilineRule);
    }
    return rules.length ? ok(rules) : bad(`empty; expected a list of ${MULTILINE_RULES.join(', ')}, or none`);
  },
  /** Trimmed like every other value, because the sidecar trims its environment. */
  pattern(v: string): ParseResult<string> {
    const s = v.trim();
    const why = startPatternProblem(s);
    return why === undefined ? ok(s) : bad(why);
  },
  parseFormat(v: string): ParseResult<ParseFormat> {
    const s = v.trim();
    return (PARSE_FORMATS as readonly string[]).includes(s) ? ok(s as ParseFormat) : bad(`expected ${PARSE_FORMATS.join(' or ')}`);
  },
  esIndex: checked(esIndexProblem),
  lokiTenant: checked(lokiTenantProblem),
  forwardTag: checked(forwardTagProblem),
};

/** Free text that must also be acceptable to the sink's protocol. */
function checked(problem: (v: string) => string | undefined) {
  return (v: string): ParseResult<string> => {
    const r = parse.text(v);
    if (!r.ok) return r;
    const why = problem(r.value);
    return why === undefined ? r : bad(why);
  };
}
