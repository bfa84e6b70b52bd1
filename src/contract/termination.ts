// The sidecar's termination message: what it writes to its
// terminationMessagePath and what the webhook's harvester reads back from the
// container status. Both sides import this file.
//
// Reading rule, for every run (container + restart count) of the pod's other
// containers: in `done` → fully delivered; in `runs` → resume after the given
// position; anywhere else → read from its start. Every reading of a message
// that was cut to fit, or of no message at all, therefore loses nothing; it
// only sends more again.

/** The kubelet's cap on a termination message. */
export const TERMINATION_MESSAGE_MAX_BYTES = 4096;
export const TERMINATION_VERSION = 1;

/** `running`: a snapshot taken at a checkpoint, i.e. the sidecar ended without a drain. */
export type TerminationState = 'running' | 'complete' | 'incomplete';

/**
 * Where to resume one run through pods/log: after the line with timestamp `ts`
 * and the `n`-th line carrying exactly that timestamp. No `ts`: from the start.
 * `o` (api mode only) is the number of lines acknowledged, which is also the
 * line number the record ids continue from.
 */
export type RunPosition = readonly [container: string, restart: number, ts: string | null, n: number, o?: number];

/** What a sidecar says it did: the fixed part of its termination message. */
export interface TerminationCounts {
  readonly state: TerminationState;
  readonly mode: 'node' | 'api';
  readonly sink: string;
  readonly shipped: number;
  readonly unsent: number;
  readonly dead_lettered: number;
  /**
   * api mode: log streams resumed past a kubelet rotation; lines in the rotated
   * files may be lost, their number unknown. Only written when not 0: older
   * messages have no such field and mean 0.
   */
  readonly resume_gaps?: number;
}

/** The counts plus where to resume each run. */
export interface TerminationMessage extends TerminationCounts {
  readonly v: typeof TERMINATION_VERSION;
  /** Runs not fully delivered, with the position to resume from. */
  readonly runs: readonly RunPosition[];
  /** Runs fully delivered, as `container/restart`. */
  readonly done: readonly string[];
  /** Entries of `done` and `runs` left out to stay under the cap (then read from the start). */
  readonly cut?: number;
}

/**
 * JSON on one line, at most `max` bytes with its newline. When everything
 * does not fit, `done` entries go first (reading such a run again only
 * duplicates it), then `runs` from the end (read from the start instead);
 * the counts always stay. `cut` says how many entries were left out.
 */
export function encodeTermination(counts: TerminationCounts, runs: readonly RunPosition[], done: readonly string[], max = TERMINATION_MESSAGE_MAX_BYTES): string {
  // Left out when 0, so the budget goes to positions; a reader takes a missing count as 0.
  const { resume_gaps: gaps, ...rest } = counts;
  const fixed = gaps !== undefined && gaps > 0 ? { ...rest, resume_gaps: gaps } : rest;
  const build = (r: readonly RunPosition[], d: readonly string[]): string => {
    const cut = runs.length - r.length + done.length - d.length;
    const m: TerminationMessage = { v: TERMINATION_VERSION, ...fixed, runs: r, done: d, ...(cut > 0 ? { cut } : {}) };
    return JSON.stringify(m) + '\n';
  };
  const fits = (s: string): boolean => Buffer.byteLength(s) <= max;
  let text = build(runs, done);
  if (fits(text)) return text;
  // Binary search for the longest prefix that fits: first of `done` with no runs
  // dropped, then of `runs` with `done` empty.
  const longest = (len: number, at: (k: number) => string): number => {
    let lo = 0;
    let hi = len;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (fits(at(mid))) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  };
  const dk = longest(done.length - 1, (k) => build(runs, done.slice(0, k)));
  text = build(runs, done.slice(0, dk));
  if (fits(text)) return text;
  const rk = longest(runs.length, (k) => build(runs.slice(0, k), []));
  text = build(runs.slice(0, rk), []);
  if (fits(text)) return text;
  // Only reachable with a cap below the size of the counts themselves.
  throw new RangeError(`termination message cap ${max} is too small for the counts`);
}

/** Parses the first line of a termination message; undefined when it is not one of ours. */
export function decodeTermination(text: string | undefined): TerminationMessage | undefined {
  if (!text) return undefined;
  const line = text.split('\n', 1)[0]!;
  let m: unknown;
  try {
    m = JSON.parse(line);
  } catch {
    return undefined;
  }
  if (!m || typeof m !== 'object') return undefined;
  // The message sits in a pod a tenant controls; every number and position is
  // checked before anyone counts with it or resumes from it.
  const o = m as Partial<TerminationMessage>;
  if (o.v !== TERMINATION_VERSION || !Array.isArray(o.runs) || !Array.isArray(o.done)) return undefined;
  if (!count(o.shipped) || !count(o.unsent) || !count(o.dead_lettered)) return undefined;
  if (o.resume_gaps !== undefined && !count(o.resume_gaps)) return undefined;
  if (o.cut !== undefined && !count(o.cut)) return undefined;
  if (o.state !== undefined && !['running', 'complete', 'incomplete'].includes(o.state)) return undefined;
  if (o.mode !== undefined && o.mode !== 'node' && o.mode !== 'api') return undefined;
  if (!o.runs.every(validRun) || !o.done.every((d) => typeof d === 'string' && RUN_NAME.test(d))) return undefined;
  return o as TerminationMessage;
}

/** A non-negative safe integer. */
function count(n: unknown): n is number {
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0;
}

/** `container/restart`, a container name being a DNS label. */
const RUN_NAME = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\/\d{1,9}$/;
const CONTAINER = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/;

function validRun(r: unknown): boolean {
  if (!Array.isArray(r) || r.length < 4 || r.length > 5) return false;
  const [container, restart, ts, n, o] = r as unknown[];
  if (typeof container !== 'string' || !CONTAINER.test(container) || !count(restart)) return false;
  if (ts !== null && (typeof ts !== 'string' || !TIMESTAMP.test(ts))) return false;
  return count(n) && (o === undefined || count(o));
}
