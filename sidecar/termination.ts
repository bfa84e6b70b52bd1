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
// The format and its reading rule are a contract with the webhook's
// harvester: src/contract/termination.ts.
import { closeSync, ftruncateSync, openSync, writeSync } from 'node:fs';
import type { SinkType, SourceMode } from '../src/contract/env.ts';
import { encodeTermination, type RunPosition, type TerminationState } from '../src/contract/termination.ts';
import type { CheckpointEntry } from './delivery/checkpoint.ts';
import { log } from './log.ts';
import { parseTimestamp } from './records/timestamp.ts';
import type { Stats } from './stats.ts';

export { decodeTermination, encodeTermination, TERMINATION_MESSAGE_MAX_BYTES, type RunPosition, type TerminationCounts, type TerminationMessage, type TerminationState } from '../src/contract/termination.ts';

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

/**
 * The sidecar's termination message: counts plus, per container run, what is
 * delivered and where to resume. Written with the positions of every
 * checkpoint save and once more with the drain's outcome.
 */
export class TerminationReport {
  private readonly file: TerminationLog;
  private readonly positions: RunPositions;

  constructor(
    path: string,
    private readonly mode: SourceMode,
    private readonly sink: SinkType,
  ) {
    this.file = new TerminationLog(path);
    this.positions = new RunPositions(mode);
  }

  write(state: TerminationState, entries: ReadonlyMap<string, CheckpointEntry>, s: Readonly<Stats>): void {
    let { runs, done } = this.positions.update(entries);
    // Complete: every line the containers wrote was read and acknowledged. A
    // node-mode file the drain let go of is not marked finished in the
    // checkpoint (a restarted sidecar would follow it), but nothing follows it now.
    if (state === 'complete') {
      done = [...new Set([...done, ...runs.map(([c, r]) => `${c}/${r}`)])];
      runs = [];
    }
    const counts = { state, mode: this.mode, sink: this.sink, shipped: s.linesShipped, unsent: s.linesUnsent, dead_lettered: s.linesDeadLettered, resume_gaps: s.resumeGaps };
    this.file.write(encodeTermination(counts, runs, done));
  }

  close(): void {
    this.file.close();
  }
}
