import { defaultConfig } from '../../src/core/config.ts';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, copyFileSync, cpSync, existsSync, linkSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ENV, type EnvKey, type SinkType } from '../../src/contract/env.ts';
import { exited, onRunnerExit, track, type Exit } from './process.ts';

/**
 * Runs the sidecar as a black box: the bundled program (dist/sidecar.mjs, the
 * file the image ships) under this Node, configured only through the env
 * contract, observed only through its exit code, its stderr/stdout lines and
 * what reaches the servers.
 */

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const SIDECAR_BUNDLE = join(repo, 'dist', 'sidecar.mjs');

function newestMtime(dir: string): number {
  let newest = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) newest = Math.max(newest, newestMtime(p));
    else if (e.name.endsWith('.ts')) newest = Math.max(newest, statSync(p).mtimeMs);
  }
  return newest;
}

let bundled = false;
/** Bundles the sidecar when dist/ is missing or older than its sources (once per test process). */
export function ensureSidecarBundle(): string {
  if (bundled) return SIDECAR_BUNDLE;
  const stale =
    !existsSync(SIDECAR_BUNDLE) ||
    statSync(SIDECAR_BUNDLE).mtimeMs < Math.max(newestMtime(join(repo, 'sidecar')), newestMtime(join(repo, 'src')));
  if (stale) execFileSync(process.execPath, [join(repo, 'scripts', 'bundle.mjs')], { cwd: repo, stdio: 'inherit' });
  bundled = true;
  return SIDECAR_BUNDLE;
}

/** The first folder from / down to `path` that other users cannot search (o+x), if any. */
export function closedAncestor(path: string): string | undefined {
  const parts = resolve(path).split('/').filter(Boolean);
  for (let i = 0; i <= parts.length; i++) {
    const dir = '/' + parts.slice(0, i).join('/');
    if ((statSync(dir).mode & 0o001) === 0) return dir;
  }
  return undefined;
}

const STAGE_PREFIX = 'jh-sidecar-run-';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Folders a test process staged and could not remove (a runner killed outright); their name holds its pid. */
function pruneStaged(root: string): void {
  for (const name of readdirSync(root)) {
    const pid = Number(/^jh-sidecar-run-(\d+)-/.exec(name)?.[1]);
    if (pid && pid !== process.pid && !alive(pid)) rmSync(join(root, name), { recursive: true, force: true });
  }
}

let staged: { node: string; bundle: string } | undefined;
/**
 * The node binary and the bundle where another user can run them. A clone may
 * sit under a folder only its owner can enter (root's home, `mktemp -d`), and
 * there a sidecar started as 65534 cannot even execute node. So for a run as
 * another user both are linked (or copied), once per test process, into a
 * world-readable folder under the system's temporary folder; if even that is
 * closed to other users, this says so at once instead of leaving the spawn to
 * fail.
 */
export function runnableByOthers(): { node: string; bundle: string } {
  if (staged && existsSync(staged.node) && existsSync(staged.bundle)) return staged;
  const bundle = ensureSidecarBundle();
  pruneStaged(tmpdir());
  const dir = mkdtempSync(join(tmpdir(), `${STAGE_PREFIX}${process.pid}-`));
  chmodSync(dir, 0o755);
  onRunnerExit(() => rmSync(dir, { recursive: true, force: true }));
  const closed = closedAncestor(dir);
  if (closed) throw new Error(`cannot run the sidecar as another user: ${closed} is closed to other users (mode ${(statSync(closed).mode & 0o777).toString(8)}); point TMPDIR at a folder they can enter`);
  const node = join(dir, 'node');
  try {
    // A hard link costs nothing, if the binary's own mode lets others run it.
    linkSync(process.execPath, node);
    if ((statSync(node).mode & 0o005) !== 0o005) throw new Error('not runnable by others');
  } catch {
    rmSync(node, { force: true });
    copyFileSync(process.execPath, node);
    chmodSync(node, 0o755);
  }
  const copy = join(dir, 'sidecar.mjs');
  copyFileSync(bundle, copy);
  cpSync(join(dirname(bundle), 'sidecar-chunks'), join(dir, 'sidecar-chunks'), { recursive: true });
  for (const f of [copy, ...readdirSync(join(dir, 'sidecar-chunks')).map((f) => join(dir, 'sidecar-chunks', f))]) chmodSync(f, 0o644);
  chmodSync(join(dir, 'sidecar-chunks'), 0o755);
  staged = { node, bundle: copy };
  return staged;
}

export interface PodIdentity {
  namespace: string;
  pod: string;
  uid: string;
  node?: string;
  job?: string;
}

export interface SidecarOptions {
  identity: PodIdentity;
  /** The pod log directory (<root>/<ns>_<pod>_<uid>), as the node-mode mount shows it. */
  logDir: string;
  stateDir: string;
  sink: SinkType;
  endpoint?: string;
  /** Any other contract settings. */
  settings?: Partial<Record<EnvKey, string>>;
  /** Pin the process to these CPUs with taskset (e.g. "0"). */
  cpus?: string;
  /** Run as this user and group (a non-root container), e.g. 65534. */
  uid?: number;
  gid?: number;
  /** Variables outside the contract, as a pod spec may set them. */
  extraEnv?: Record<string, string>;
  /** The node binary (default: this test's node, or its copy for another user). */
  node?: string;
  /** Node flags after the injected ones, for a benchmark's diagnostics (--trace-gc, --cpu-prof). */
  moreNodeFlags?: string[];
}

/** The sidecar's exit summary; the field names are the sidecar's. */
export type Summary = Record<string, unknown>;

export class SidecarProcess {
  readonly stdout: string[] = [];
  readonly stderr: string[] = [];
  readonly startedAt = Date.now();
  /** Set when the process could not be started at all (EACCES, ENOENT): no 'exit' will ever come. */
  spawnError: Error | undefined;
  private readonly spawnFailed: Promise<never>;
  private constructor(readonly child: ChildProcess) {
    this.spawnFailed = new Promise<never>((_, reject) => {
      child.on('error', (err) => {
        // 'error' also reports a failed kill() of a running child; only a child that never got a pid failed to spawn.
        if (child.pid !== undefined) return;
        this.spawnError = new Error(`the sidecar could not be started: ${err.message}`, { cause: err });
        reject(this.spawnError);
      });
    });
    this.spawnFailed.catch(() => {});
  }

  static start(opts: SidecarOptions): SidecarProcess {
    const asOther = opts.uid !== undefined || opts.gid !== undefined;
    const runtime = asOther ? runnableByOthers() : { node: process.execPath, bundle: ensureSidecarBundle() };
    const bundle = runtime.bundle;
    const node = opts.node ?? runtime.node;
    const set = (k: EnvKey, v: string | undefined) => {
      if (v !== undefined) env[ENV[k].name] = v;
    };
    // Only what a pod would have: no inherited settings leak into the run.
    const env: Record<string, string> = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/tmp' };
    set('POD_NAMESPACE', opts.identity.namespace);
    set('POD_NAME', opts.identity.pod);
    set('POD_UID', opts.identity.uid);
    set('NODE_NAME', opts.identity.node);
    set('JOB_NAME', opts.identity.job);
    set('MODE', 'node');
    set('LOG_DIR', opts.logDir);
    set('STATE_DIR', opts.stateDir);
    set('SINK', opts.sink);
    set('ENDPOINT', opts.endpoint);
    for (const [k, v] of Object.entries(opts.settings ?? {})) set(k as EnvKey, v);
    Object.assign(env, opts.extraEnv);
    // The node flags the webhook injects (config sidecar.args), so tests and the
    // bench run the sidecar exactly as a pod does.
    const nodeFlags = [...defaultConfig().sidecar.args.filter((a) => a.startsWith('--')), ...(opts.moreNodeFlags ?? [])];
    const cmd = opts.cpus ? 'taskset' : node;
    const args = opts.cpus ? ['-c', opts.cpus, node, ...nodeFlags, bundle] : [...nodeFlags, bundle];
    const child = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'], uid: opts.uid, gid: opts.gid });
    track(child);
    const p = new SidecarProcess(child);
    lines(child.stdout, p.stdout);
    lines(child.stderr, p.stderr);
    return p;
  }

  get pid(): number {
    return this.child.pid ?? -1;
  }

  /** SIGTERM, as the kubelet sends once the main containers exited; resolves at exit. */
  async stop(timeoutMs = 60_000): Promise<{ code: number | null; signal: NodeJS.Signals | null; summary: Summary | undefined }> {
    const done = this.exited();
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), timeoutMs);
    const r = await done.finally(() => clearTimeout(timer));
    await new Promise((res) => setImmediate(res));
    return { ...r, summary: this.summary() };
  }

  /** SIGKILL: no drain, no final checkpoint. */
  async kill(): Promise<void> {
    if (this.spawnError) return;
    const done = this.exited();
    this.child.kill('SIGKILL');
    await done;
  }

  /** Resolves at exit; rejects at once if the process could not be started. */
  async exited(): Promise<Exit> {
    const r = await Promise.race([exited(this.child), this.spawnFailed]);
    // A process that never ran may report an 'exit' (with -errno) just before its 'error'.
    if (this.child.pid === undefined) return this.spawnFailed;
    return r;
  }

  /** Parsed JSON lines the sidecar logged on stderr. */
  logEntries(): Record<string, unknown>[] {
    const out: Record<string, unknown>[] = [];
    for (const l of this.stderr) {
      if (!l.startsWith('{')) continue;
      try {
        out.push(JSON.parse(l) as Record<string, unknown>);
      } catch {
        // not one of its JSON lines
      }
    }
    return out;
  }

  /** The one summary line printed at exit (its log message is `summary`). */
  summary(): Summary | undefined {
    return this.logEntries().findLast((e) => e.msg === 'summary');
  }

  /** Resolves once the sidecar logged a line with this message; rejects if it exits first. */
  async waitForLog(msg: string, timeoutMs = 15_000): Promise<Record<string, unknown>> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const e = this.logEntries().find((x) => x.msg === msg);
      if (e) return e;
      if (this.spawnError) throw this.spawnError;
      if (this.child.pid === undefined && this.child.exitCode !== null) await this.spawnFailed;
      if (this.child.exitCode !== null || this.child.signalCode !== null) throw new Error(`sidecar exited before logging '${msg}':\n${this.tail()}`);
      if (Date.now() > deadline) throw new Error(`sidecar did not log '${msg}' within ${timeoutMs} ms:\n${this.tail()}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  /** Diagnostics for a failed assertion. */
  tail(n = 30): string {
    return this.stderr.slice(-n).join('\n');
  }
}

function lines(stream: NodeJS.ReadableStream | null, into: string[]): void {
  if (!stream) return;
  let rest = '';
  stream.setEncoding('utf8');
  stream.on('data', (chunk: string) => {
    const parts = (rest + chunk).split('\n');
    rest = parts.pop() ?? '';
    for (const p of parts) into.push(p);
  });
  stream.on('end', () => {
    if (rest) into.push(rest);
  });
}

/** A counter from the summary line (`lines_shipped`, `retries`, `lines_dead_lettered`, `lines_unsent`...). */
export function summaryNumber(s: Summary | undefined, key: string): number | undefined {
  const v = s?.[key];
  return typeof v === 'number' ? v : undefined;
}
