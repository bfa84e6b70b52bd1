import { z } from 'zod';
import { JSON_ORIGINAL, SINKS } from '../contract/env.ts';
import { CODECS } from '../contract/codec.ts';
import { ERROR_CODES, JobharvestError } from './errors.ts';
import { parse, QUERY_TYPES } from './annotations.ts';
import { headerListProblem } from '../contract/values.ts';
import { MASK_BUILTINS, MULTILINE_RULES, PARSE_FORMATS, patternProblem } from '../contract/shaping-settings.ts';
import { carriedKeyProblem, MAX_CARRIED_KEYS } from './carry.ts';
import { tenantsProblems, tenantsSchema } from './tenants.ts';

function headerList(v: string): { ok: boolean; why?: string } {
  const why = headerListProblem(v);
  return why === undefined ? { ok: true } : { ok: false, why };
}

/**
 * The global configuration: the chart renders it into a file, the CLI reads the
 * same file with --config. It is the lowest level of precedence; namespace and
 * Job annotations override the sink settings in it.
 */

const positiveInt = z.number().int().min(0);
const ownerKind = z.object({ group: z.string().max(253), kind: z.string().min(1).max(63) }).strict();

const quantity = z.union([z.string().regex(/^[0-9.]+[a-zA-Z]*$/), z.number()]);
const resourceList = z.record(z.string(), quantity);

const sinkSchema = z
  .object({
    type: z.enum(SINKS).default('stdout'),
    endpoint: z.string().optional(),
    authSecret: z.string().optional(),
    tlsSecret: z.string().optional(),
    headers: z.string().optional(),
    // The older switch: false turns compression gzip into none.
    gzip: z.boolean().default(true),
    compression: z.enum(CODECS).default('gzip'),
    esIndex: z.string().optional(),
    otlpEncoding: z.enum(['protobuf', 'json']).optional(),
    lokiTenant: z.string().optional(),
    forwardTag: z.string().optional(),
  })
  .strict();

// Where `jobharvest logs` reads a Job's lines back when the sink endpoint is
// not itself queryable (a collector in front of the store, say).
const querySchema = z
  .object({
    type: z.enum(QUERY_TYPES).optional(),
    endpoint: z.string().optional(),
    // A Secret in the Job's namespace with token or username/password for the query API.
    authSecret: z.string().optional(),
  })
  .strict();

export const SYSTEM_NAMESPACES = ['kube-system', 'kube-public', 'kube-node-lease'] as const;

const configSchema = z
  .object({
    mode: z.enum(['node', 'api', 'auto']).default('auto'),
    sink: sinkSchema.default({ type: 'stdout', gzip: true, compression: 'gzip' }),
    ttlSecondsAfterFinished: positiveInt.default(3600),
    maxTtlSecondsAfterFinished: positiveInt.nullable().default(null),
    drainSeconds: z.number().int().min(1).max(3600).default(25),
    // Raise a grace period the Job chose below drainSeconds + 5 (false: keep it, warn, and let the harvester ship what the drain leaves).
    raiseGracePeriod: z.boolean().default(false),
    namespaceSelection: z.enum(['annotation', 'label']).default('annotation'),
    webhookNamespace: z.string().default('jobharvest'),
    excludedNamespaces: z.array(z.string()).default([]),
    query: querySchema.prefault({}),
    // Namespaces mapped to their own Secrets and log-store tenant (src/core/tenants.ts).
    tenants: tenantsSchema,
    // e.g. a Grafana Explore URL with {namespace}, {job}, {uid}, {from}, {to}: written to jobharvest.io/logs-url at admission.
    logsUrlTemplate: z.string().default(''),
    // Jobs another controller owns (docs/platforms.md). Both lists are the
    // operator's: a tenant can write an ownerReference, but one with no real
    // owner behind it gets the Job garbage-collected.
    ownedJobs: z
      .object({
        // Owner kinds whose Jobs may get jobharvest's TTL, besides Jobs with no
        // controller and CronJobs' (an owner that never reads or re-creates a finished Job).
        ttlOwners: z.array(ownerKind).max(64).default([]),
        // Owner kinds whose Jobs are injected in any namespace that did not opt
        // out, opted in or not: Jobs that users never write (a JobSet's, say).
        injectOwners: z.array(ownerKind).max(64).default([]),
      })
      .strict()
      .prefault({}),
    sidecar: z
      .object({
        image: z.string().default('jobharvest:0.2.0'),
        imagePullPolicy: z.enum(['Always', 'IfNotPresent', 'Never']).default('IfNotPresent'),
        // V8's default young generation alone would exceed the sidecar's memory
        // limit on a large node; the live heap is under 20 MiB. 4 MiB semi-spaces
        // let in-flight records die young (a fifth less CPU than 1 MiB); compiling
        // on the main thread keeps compiler memory out of extra malloc arenas.
        args: z.array(z.string()).default(['--max-semi-space-size=4', '--max-old-space-size=48', '--no-concurrent-recompilation', '/app/sidecar.mjs']),
        // preStop hook, given to every pod (see stopHook in inject.ts): the
        // kubelet sends the sidecar SIGTERM only after it returns, and it
        // returns once the sidecar's SIGTERM handler is in place.
        startedCommand: z.array(z.string()).default(['/nodejs/bin/node', '/app/sidecar.mjs', '--wait-started']),
        runAsUser: z.number().int().min(1).default(65532),
        // Sized by `npm run bench:node` (docs/operations.md#sizing): the
        // request is a quiet sidecar's working set (15.2 MiB) with ~60% to
        // spare for the heap it keeps after shipping more; the limit is twice
        // the working set at full flood (45.0 MiB), which also holds the node
        // binary's page cache (~43 MiB) for the sidecar that is the first on
        // its node to run the image.
        resources: z
          .object({ requests: resourceList.optional(), limits: resourceList.optional() })
          .strict()
          .default({ requests: { cpu: '10m', memory: '24Mi' }, limits: { memory: '96Mi' } }),
        // Requests and limits alike, where every container must have both: in a
        // Guaranteed pod (so it stays Guaranteed), and for a limit a namespace's
        // ResourceQuota demands of every container. The memory is the standard
        // limit; the CPU is enough to ship ~9 MiB/s (bench:sidecar's MiB per CPU-second).
        boundedResources: resourceList
          .refine((r) => r.cpu !== undefined && r.memory !== undefined, 'needs both cpu and memory')
          .default({ cpu: '100m', memory: '96Mi' }),
        stateSizeLimit: z.string().default('64Mi'),
        // node mode: the kubelet's podLogsDir on the node (its default). A
        // kubelet configured elsewhere needs this, or the hostPath check fails
        // and the pod never starts.
        podLogsHostPath: z.string().regex(/^\/[^\0]*$/, 'an absolute path').default('/var/log/pods'),
        // Record shaping. Every key left out leaves its variable unset on the
        // sidecar, so its default applies and a pod without shaping is
        // unchanged. rules, start and parse.format are defaults a namespace or
        // Job may override by annotation; the bounds, the masks and what is
        // carried are the operator's alone (docs/security.md).
        multiline: z
          .object({
            rules: z.array(z.enum(MULTILINE_RULES)).default([]),
            start: z.string().optional(),
            maxLines: z.number().int().min(1).max(100_000).optional(),
            // The sidecar cuts any record at JOBHARVEST_MAX_RECORD_BYTES (262144), which the webhook leaves at its default.
            maxBytes: z.number().int().min(1).max(262_144).optional(),
            flushMs: z.number().int().min(1).max(60_000).optional(),
          })
          .strict()
          .prefault({}),
        parse: z
          .object({
            format: z.enum(PARSE_FORMATS).optional(),
            maxFields: z.number().int().min(1).max(1024).optional(),
            maxDepth: z.number().int().min(1).max(32).optional(),
            // OTLP: when a JSON record also carries its line as written (the sidecar's default: lossy).
            original: z.enum(JSON_ORIGINAL).optional(),
          })
          .strict()
          .prefault({}),
        mask: z
          .object({
            builtin: z.array(z.enum([...MASK_BUILTINS, 'all'])).default([]),
            patterns: z.array(z.string()).max(64).default([]),
            replacement: z.string().max(256).optional(),
          })
          .strict()
          .prefault({}),
        carry: z
          .object({
            labels: z.array(z.string()).max(MAX_CARRIED_KEYS).default([]),
            annotations: z.array(z.string()).max(MAX_CARRIED_KEYS).default([]),
          })
          .strict()
          .prefault({}),
        loki: z
          .object({
            streamLabels: z.array(z.string()).default([]),
            maxMetadata: z.number().int().min(0).max(256).optional(),
          })
          .strict()
          .prefault({}),
      })
      .strict()
      // prefault, not default: the empty object goes through the schema above,
      // so every sidecar default is written once, on its field.
      .prefault({}),
  })
  .strict();

export type Config = z.infer<typeof configSchema>;

/** The embedded defaults: what jobharvest does with no configuration at all. */
export function defaultConfig(): Config {
  return configSchema.parse({});
}

/**
 * Validates a parsed config document. Every problem is reported at once with
 * its path, because a chart user fixes values in one go, not one error per install.
 */
export function parseConfig(input: unknown): Config {
  const result = configSchema.safeParse(input ?? {});
  if (!result.success) {
    const lines = result.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`);
    throw new JobharvestError(ERROR_CODES.BAD_CONFIG, `invalid configuration: ${lines.join('; ')}`);
  }
  const cfg = result.data;
  // Values that reach the pod spec get the same checks as annotations.
  const checks: Array<[string, string | undefined, (v: string) => { ok: boolean; why?: string }]> = [
    ['sink.endpoint', cfg.sink.endpoint, parse.endpoint],
    ['sink.authSecret', cfg.sink.authSecret, parse.secretName],
    ['sink.tlsSecret', cfg.sink.tlsSecret, parse.secretName],
    ['sink.esIndex', cfg.sink.esIndex, parse.esIndex],
    ['sink.lokiTenant', cfg.sink.lokiTenant, parse.lokiTenant],
    ['sink.forwardTag', cfg.sink.forwardTag, parse.forwardTag],
    ['sink.headers', cfg.sink.headers, headerList],
    ['query.endpoint', cfg.query.endpoint, parse.endpoint],
    ['query.authSecret', cfg.query.authSecret, parse.secretName],
    ['logsUrlTemplate', cfg.logsUrlTemplate || undefined, logsUrlTemplateCheck],
  ];
  const sc = cfg.sidecar;
  checks.push(['sidecar.multiline.start', sc.multiline.start, parse.pattern]);
  sc.mask.patterns.forEach((p, i) => checks.push([`sidecar.mask.patterns[${i}]`, p, operatorPattern]));
  checks.push(['sidecar.mask.replacement', sc.mask.replacement, parse.text]);
  sc.carry.labels.forEach((k, i) => checks.push([`sidecar.carry.labels[${i}]`, k, carriedKey]));
  sc.carry.annotations.forEach((k, i) => checks.push([`sidecar.carry.annotations[${i}]`, k, carriedKey]));
  sc.loki.streamLabels.forEach((k, i) =>
    checks.push([`sidecar.loki.streamLabels[${i}]`, k, (v) => (sc.carry.labels.includes(v) ? { ok: true } : { ok: false, why: `${JSON.stringify(v)} is not in sidecar.carry.labels` })]),
  );
  const problems: string[] = [];
  for (const [path, value, check] of checks) {
    if (value === undefined) continue;
    const r = check(value);
    if (!r.ok) problems.push(`${path}: ${(r as { why: string }).why}`);
  }
  problems.push(...tenantsProblems(cfg.tenants));
  if (problems.length) throw new JobharvestError(ERROR_CODES.BAD_CONFIG, `invalid configuration: ${problems.join('; ')}`);
  return cfg;
}

/** Unlike a tenant's start pattern, an operator's mask is never trimmed: its spaces may be what it matches. */
function operatorPattern(v: string): { ok: boolean; why?: string } {
  const why = patternProblem(v);
  return why === undefined ? { ok: true } : { ok: false, why };
}

function carriedKey(v: string): { ok: boolean; why?: string } {
  const why = carriedKeyProblem(v);
  return why === undefined ? { ok: true } : { ok: false, why };
}

const PLACEHOLDER = /\{([a-z]+)\}/g;
export const LOGS_URL_PLACEHOLDERS = ['namespace', 'job', 'uid', 'from', 'to'] as const;

function logsUrlTemplateCheck(v: string): { ok: boolean; why?: string } {
  const unknown = [...v.matchAll(PLACEHOLDER)].map((m) => m[1]!).filter((p) => !(LOGS_URL_PLACEHOLDERS as readonly string[]).includes(p));
  if (unknown.length) return { ok: false, why: `unknown placeholder {${unknown[0]}}; known: ${LOGS_URL_PLACEHOLDERS.map((p) => `{${p}}`).join(', ')}` };
  try {
    new URL(v.replace(PLACEHOLDER, 'x'));
  } catch {
    return { ok: false, why: 'not a URL' };
  }
  return { ok: true };
}

const excludedCache = new WeakMap<Config, ReadonlySet<string>>();

/** Namespaces the webhook never touches: the system ones and its own. Built once per config; every admission asks. */
export function excludedNamespaces(cfg: Config): ReadonlySet<string> {
  let set = excludedCache.get(cfg);
  if (!set) {
    set = new Set<string>([...SYSTEM_NAMESPACES, cfg.webhookNamespace, ...cfg.excludedNamespaces]);
    excludedCache.set(cfg, set);
  }
  return set;
}
