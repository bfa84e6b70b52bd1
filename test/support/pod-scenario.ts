import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { EnvKey, SinkType } from '../../src/contract/env.ts';
import { PodLogWriter, type PodLogWriterOptions, type Stream } from './kubelet-log-writer.ts';
import { SidecarProcess, type PodIdentity } from './sidecar.ts';

/**
 * One pod as a test sees it: its log directory written by the kubelet-exact
 * writer, the sidecar's state volume, a unique identity (so many scenarios
 * can share one log server), and the tally of what was written.
 */
export class PodScenario {
  readonly root: string;
  readonly identity: PodIdentity;
  readonly writer: PodLogWriter;
  readonly stateDir: string;
  /** Logical lines written per container (what must arrive). */
  readonly perContainer = new Map<string, number>();
  private seq = 0;

  constructor(name: string, writerOpts: Partial<PodLogWriterOptions> = {}) {
    this.root = mkdtempSync(join(tmpdir(), `jh-${name}-`));
    const uid = randomUUID();
    this.identity = { namespace: `ns-${name}`, pod: `${name}-job-${uid.slice(0, 5)}`, uid, node: 'node-a', job: `${name}-job` };
    this.writer = new PodLogWriter({ ...writerOpts, root: join(this.root, 'pods'), namespace: this.identity.namespace, pod: this.identity.pod, uid });
    this.stateDir = join(this.root, 'state');
    mkdirSync(this.stateDir, { recursive: true });
  }

  get logDir(): string {
    return this.writer.podDir;
  }

  /** Lines written that must be delivered (every container but excluded ones). */
  written(except: readonly string[] = []): number {
    let n = 0;
    for (const [c, v] of this.perContainer) if (!except.includes(c)) n += v;
    return n;
  }

  /**
   * Writes `n` unique lines of about `size` bytes, alternating streams when
   * `stream` is 'both'. Every message is unique, so duplicates can be counted.
   */
  writeLines(container: string, n: number, opts: { stream?: Stream | 'both'; size?: number } = {}): void {
    const c = this.writer.container(container);
    const size = opts.size ?? 200;
    for (let i = 0; i < n; i++) {
      const stream: Stream = opts.stream === 'both' || opts.stream === undefined ? (i % 4 === 3 ? 'stderr' : 'stdout') : opts.stream;
      const head = `${this.identity.uid.slice(0, 8)} ${container} #${++this.seq} `;
      c.write(stream, head + 'x'.repeat(Math.max(0, size - head.length)));
    }
    this.perContainer.set(container, (this.perContainer.get(container) ?? 0) + n);
  }

  /** Writes one message as-is and counts it. */
  /**
   * What every count test writes while its sidecar runs: 300 stdout and 100
   * stderr lines, one 40 KiB line (three CRI fragments, P P F: one record), a
   * restart (the next instance writes 1.log), 100 more lines and a probe line
   * whose timestamp the test checks.
   */
  writeCountWorkload(): { long: string; longTs: string; probe: string; probeTs: string } {
    const uid = this.identity.uid;
    this.writeLines('main', 300, { stream: 'stdout' });
    this.writeLines('main', 100, { stream: 'stderr' });
    const long = `LONG-${uid} ${'L'.repeat(40 * 1024)}`;
    const longTs = this.writeMessage('main', 'stderr', long);
    this.writer.container('main').restart();
    this.writeLines('main', 100, { stream: 'stdout' });
    const probe = `PROBE-${uid}`;
    const probeTs = this.writeMessage('main', 'stdout', probe);
    return { long, longTs, probe, probeTs };
  }

  writeMessage(container: string, stream: Stream, text: string): string {
    const ts = this.writer.container(container).write(stream, text);
    this.perContainer.set(container, (this.perContainer.get(container) ?? 0) + 1);
    return ts;
  }

  /** Writes lines spread over `ms`, yielding to the event loop, so a fault can hit mid-stream. */
  async writeOver(container: string, n: number, ms: number, opts: { stream?: Stream | 'both'; size?: number } = {}): Promise<void> {
    const steps = Math.max(1, Math.ceil(ms / 50));
    let done = 0;
    for (let s = 1; s <= steps; s++) {
      const upto = Math.round((n * s) / steps);
      this.writeLines(container, upto - done, opts);
      done = upto;
      await new Promise((r) => setTimeout(r, ms / steps));
    }
  }

  startSidecar(sink: SinkType, endpoint: string | undefined, settings: Partial<Record<EnvKey, string>> = {}): SidecarProcess {
    return SidecarProcess.start({ identity: this.identity, logDir: this.logDir, stateDir: this.stateDir, sink, endpoint, settings });
  }

  dispose(): void {
    this.writer.close();
    rmSync(this.root, { recursive: true, force: true });
  }
}

/** Polls `count` until it reaches `n` (or `timeoutMs` passes) and returns the last value. */
export async function waitForCount(count: () => Promise<number>, n: number, timeoutMs: number): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  let last = await count();
  while (last < n && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 300));
    last = await count();
  }
  return last;
}
