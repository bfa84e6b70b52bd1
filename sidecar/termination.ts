// The sidecar's outcome in its termination message, where the cluster can read
// it after the pod (and the sidecar's own log) is gone from the node: the
// kubelet copies the file into the container status as
// `state.terminated.message`, capped at 4096 bytes.
//
// The file is rewritten after every checkpoint save as well as at exit, so a
// sidecar killed without a drain (SIGKILL, OOM) still leaves the positions of
// its last checkpoint: whoever resumes through pods/log re-sends at most the
// batches that were in flight.
//
// Reading rule, for every run (container + restart count) of the pod's other
// containers: in `done` → fully delivered; in `runs` → resume after the given
// position; anywhere else → read from its start. Every reading of a message
// that was cut to fit, or of no message at all, therefore loses nothing; it
// only sends more again.
import { closeSync, ftruncateSync, openSync, writeSync } from 'node:fs';
import type { CheckpointEntry } from './delivery/checkpoint.ts';
import { log } from './log.ts';
import { parseTimestamp } from './records/timestamp.ts';

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

export interface TerminationMessage {
  readonly v: typeof TERMINATION_VERSION;
  readonly state: TerminationState;
  readonly mode: 'node' | 'api';
  readonly sink: string;
  readonly shipped: number;
  readonly unsent: number;
  readonly dead_lettered: number;
  /** Runs not fully delivered, with the position to resume from. */
  readonly runs: readonly RunPosition[];
  /** Runs fully delivered, as `container/restart`. */
  readonly done: readonly string[];
  /** Entries of `done` and `runs` left out to stay under the cap (then read from the start). */
  readonly cut?: number;
}

export interface TerminationCounts {
  readonly state: TerminationState;
  readonly mode: 'node' | 'api';
  readonly sink: string;
  readonly shipped: number;
  readonly unsent: number;
  readonly dead_lettered: number;
}

/**
 * JSON on one line, at most `max` bytes with its newline. When everything
 * does not fit, `done` entries go first (reading such a run again only
 * duplicates it), then `runs` from the end (read from the start instead);
 * the counts always stay. `cut` says how many entries were left out.
 */
export function encodeTermination(counts: TerminationCounts, runs: readonly RunPosition[], done: readonly string[], max = TERMINATION_MESSAGE_MAX_BYTES): string {
  const build = (r: readonly RunPosition[], d: readonly string[]): string => {
    const cut = runs.length - r.length + done.length - d.length;
    const m: TerminationMessage = { v: TERMINATION_VERSION, ...counts, runs: r, done: d, ...(cut > 0 ? { cut } : {}) };
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
  const o = m as Partial<TerminationMessage>;
  if (o.v !== TERMINATION_VERSION || !Array.isArray(o.runs) || !Array.isArray(o.done)) return undefined;
  if (typeof o.shipped !== 'number' || typeof o.unsent !== 'number' || typeof o.dead_lettered !== 'number') return undefined;
  return o as TerminationMessage;
}

/** RFC 3339 texts drop trailing zeros of the fraction, so they do not sort as text. */
function before(a: string, b: string): boolean {
  const x = parseTimestamp(a);
  const y = parseTimestamp(b);
  if (!x || !y) return a < b;
  return x.sec !== y.sec ? x.sec < y.sec : x.nanos < y.nanos;
}

interface Mark {
  readonly ts: string | undefined;
  readonly n: number;
  readonly o: number;
}

/** Splits a checkpoint key `container/restart/fingerprint`. */
function runOf(key: string): string | undefined {
  const parts = key.split('/');
  return parts.length >= 3 ? `${parts[0]}/${parts[1]}` : undefined;
}

/**
 * Turns checkpoint entries into run positions. Node mode may hold several
 * files per run (rotations) and forgets finished files after a while, so this
 * remembers, per run, the newest position of a finished file: a file that is
 * not finished and has no acknowledged line yet resumes from there.
 */
export class RunPositions {
  private readonly doneRuns = new Set<string>();
  private readonly lastDone = new Map<string, Mark>();

  constructor(private readonly mode: 'node' | 'api') {}

  update(entries: ReadonlyMap<string, CheckpointEntry>): { runs: RunPosition[]; done: string[] } {
    const open = new Map<string, Mark[]>();
    const seen = new Map<string, boolean>();
    for (const [key, e] of entries) {
      const run = runOf(key);
      if (run === undefined) continue;
      const mark: Mark = { ts: e.ts, n: e.n ?? (e.ts !== undefined ? 1 : 0), o: e.offset };
      if (e.done) {
        const prev = this.lastDone.get(run);
        if (mark.ts !== undefined && (prev?.ts === undefined || before(prev.ts, mark.ts))) this.lastDone.set(run, mark);
        if (!seen.has(run)) seen.set(run, true);
      } else {
        seen.set(run, false);
        const list = open.get(run) ?? [];
        list.push(mark);
        open.set(run, list);
      }
    }
    for (const [run, allDone] of seen) {
      if (allDone) this.doneRuns.add(run);
      else this.doneRuns.delete(run);
    }
    const runs: RunPosition[] = [];
    for (const [run, marks] of open) {
      const slash = run.lastIndexOf('/');
      const container = run.slice(0, slash);
      const restart = Number(run.slice(slash + 1));
      // The earliest position of the run's unfinished files; one without any
      // acknowledged line starts where the run's finished files ended.
      let best: Mark | undefined;
      let fromStart = false;
      for (const m of marks) {
        const at = m.ts !== undefined ? m : this.lastDone.get(run);
        if (at?.ts === undefined) fromStart = true;
        else if (!best || before(at.ts, best.ts!)) best = at;
      }
      if (fromStart || !best) runs.push([container, restart, null, 0]);
      else if (this.mode === 'api') runs.push([container, restart, best.ts!, best.n, best.o]);
      else runs.push([container, restart, best.ts!, best.n]);
    }
    return { runs, done: [...this.doneRuns] };
  }
}

/**
 * Writes the message in place: the kubelet bind-mounts the file, so it cannot
 * be replaced by a rename. New text, then a truncate; a kill between the two
 * leaves the new first line followed by old bytes, and readers take the first
 * line only.
 */
export class TerminationLog {
  private fd: number | undefined;
  private failed = false;

  constructor(readonly path: string) {}

  write(text: string): void {
    if (this.failed || this.path === '') return;
    try {
      if (this.fd === undefined) this.fd = this.open();
      if (this.fd === undefined) return;
      const buf = Buffer.from(text);
      writeSync(this.fd, buf, 0, buf.length, 0);
      ftruncateSync(this.fd, buf.length);
    } catch (err) {
      this.failed = true;
      log.warn('cannot write the termination message; the outcome stays in the summary line only', { path: this.path, error: err });
    }
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }

  private open(): number | undefined {
    try {
      return openSync(this.path, 'r+');
    } catch (err) {
      // The kubelet creates the file; without one (outside a pod) there is nobody to tell.
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      this.failed = true;
      return undefined;
    }
  }
}
