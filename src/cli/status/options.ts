import { ERROR_CODES, JobharvestError } from '../../core/errors.ts';
import { parseCronJobRef, parseJobRef } from '../logs/options.ts';

/** The `status` command's flags as commander hands them over: text, unchecked. */
export interface StatusFlags {
  namespace?: string;
  allNamespaces?: boolean;
  selector?: string;
  output?: string;
  watch?: boolean;
  raw?: boolean;
  kubeconfig?: string;
  context?: string;
  chartNamespace?: string;
  release?: string;
  signingSecret?: string;
  pageSize?: string;
}

export interface StatusOptions {
  /** What to list: the Jobs of the namespace(s), one Job, or a CronJob's runs. */
  target: { kind: 'jobs' } | { kind: 'job'; name: string } | { kind: 'cronjob'; name: string };
  namespace: string | undefined;
  allNamespaces: boolean;
  selector: string | undefined;
  output: 'table' | 'wide' | 'json' | 'yaml';
  watch: boolean;
  raw: boolean;
  kubeconfig: string | undefined;
  context: string | undefined;
  chartNamespace: string | undefined;
  release: string | undefined;
  /** The signing key Secret in the release's namespace, when the chart's `signing.existingSecret` names another than `<release>-signing`. */
  signingSecret: string | undefined;
  /** Jobs a list call asks for at once (limit), following the continue token. */
  pageSize: number;
}

/** kubectl's default chunk size for lists. */
export const DEFAULT_PAGE_SIZE = 500;

function bad(msg: string): never {
  throw new JobharvestError(ERROR_CODES.BAD_INPUT, msg);
}

/** Flags → checked options, with no I/O (kubectl's Complete and Validate). */
export function parseStatusOptions(ref: string | undefined, flags: StatusFlags): StatusOptions {
  let target: StatusOptions['target'] = { kind: 'jobs' };
  if (ref !== undefined) {
    const cron = parseCronJobRef(ref);
    target = cron !== undefined ? { kind: 'cronjob', name: cron } : { kind: 'job', name: parseJobRef(ref) };
  }
  const output = flags.output ?? 'table';
  if (output !== 'table' && output !== 'wide' && output !== 'json' && output !== 'yaml') bad(`-o ${output}: expected wide, json or yaml`);
  if (flags.allNamespaces && target.kind !== 'jobs') bad(`-A lists every namespace: a ${target.kind} is named in one, give -n instead`);
  if (flags.allNamespaces && flags.namespace !== undefined) bad('-A and -n cannot both be given');
  if (flags.selector !== undefined && target.kind === 'job') bad('-l selects among Jobs: it cannot be given with job/NAME');
  let pageSize = DEFAULT_PAGE_SIZE;
  if (flags.pageSize !== undefined) {
    pageSize = /^\d+$/.test(flags.pageSize) ? Number(flags.pageSize) : NaN;
    if (!Number.isSafeInteger(pageSize) || pageSize < 1) bad(`--page-size ${flags.pageSize}: expected a whole number of at least 1`);
  }
  return {
    target,
    namespace: flags.namespace,
    allNamespaces: flags.allNamespaces ?? false,
    selector: flags.selector,
    output,
    watch: flags.watch ?? false,
    raw: flags.raw ?? false,
    kubeconfig: flags.kubeconfig,
    context: flags.context,
    chartNamespace: flags.chartNamespace,
    release: flags.release,
    signingSecret: flags.signingSecret,
    pageSize,
  };
}
