/**
 * The life of one pod on the test kubelet, in the order a real kubelet runs it:
 * log directory and volumes, regular init containers one after another, native
 * sidecars started in order and kept running, the regular containers, then,
 * once they are done, the sidecars stopped in reverse order within the grace
 * period, and only then the terminal phase.
 */
import type { CoreV1Api, V1Container, V1Pod } from '@kubernetes/client-node';
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { PodLogWriter, type ContainerLogWriter } from '../../support/kubelet-log-writer.ts';
import { ContainerInstance, type InstanceResult } from './container.ts';
import { ContainerConfigError, containerEnv, expand, type EnvSources } from './env.ts';
import { lookupImage, type ImageTable } from './images.ts';
import { ContainerRecord, podStatus, StatusWriter, type Phase, type PodState } from './status.ts';
import { containerMounts, podVolumesDir, prepareVolumes, toLocal, VolumeError, type VolumeSources } from './volumes.ts';
import { join } from 'node:path';

export type KubeletEvent =
  | { t: number; uid: string; pod: string; namespace: string; type: 'start'; container: string; restart: number; pid: number | undefined }
  | { t: number; uid: string; pod: string; namespace: string; type: 'exit'; container: string; restart: number; exitCode: number; signal: string | null }
  | { t: number; uid: string; pod: string; namespace: string; type: 'postStart'; container: string; restart: number; exitCode: number; ms: number }
  | { t: number; uid: string; pod: string; namespace: string; type: 'signal'; container: string; restart: number; signal: string }
  | { t: number; uid: string; pod: string; namespace: string; type: 'phase'; phase: Phase }
  | { t: number; uid: string; pod: string; namespace: string; type: 'removed' };

export interface WorkerContext {
  core: CoreV1Api;
  root: string;
  nodeName: string;
  hostIP: string;
  sources: EnvSources & VolumeSources;
  images: ImageTable;
  logMaxSizeBytes: number;
  logMaxFiles: number;
  restartBackoffMs: number;
  maxRestartBackoffMs: number;
  emit(e: KubeletEvent): void;
  log(line: string): void;
}

const DEFAULT_GRACE_SECONDS = 30;
/**
 * The real kubelet starts the container after a sidecar in a later sync: a
 * relist has to see the sidecar running, then the runtime creates and starts
 * the next container (runc). On the real node of test/harness/node a sidecar
 * was never signalled sooner than 0.2 s after its start, even for a Job done
 * within milliseconds (test/node/early-sigterm.test.ts); a test kubelet that
 * started the next container at once would signal a sidecar faster than any
 * node can.
 */
const NEXT_CONTAINER_AFTER_SIDECAR_MS = 200;

export class PodWorker {
  readonly uid: string;
  readonly namespace: string;
  readonly name: string;
  readonly records = new Map<string, ContainerRecord>();
  readonly done: Promise<void>;
  readonly logs: PodLogWriter;
  private readonly state: PodState;
  private readonly status: StatusWriter;
  private readonly instances = new Map<string, ContainerInstance>();
  private readonly writers = new Map<string, ContainerLogWriter>();
  private readonly stopSidecar = new Set<string>();
  private readonly transitions = new Map<string, { ok: boolean; at: Date }>();
  private readonly wake = new AbortController();
  private volumes = new Map<string, string>();
  private finalPhase: Phase | undefined;
  private terminating: { deadline: number } | undefined;
  private killTimer: NodeJS.Timeout | undefined;
  /** The API object is gone: no more status writes. */
  private gone = false;

  constructor(
    private pod: V1Pod,
    private readonly ctx: WorkerContext,
  ) {
    this.uid = pod.metadata!.uid!;
    this.namespace = pod.metadata!.namespace!;
    this.name = pod.metadata!.name!;
    const spec = pod.spec!;
    const init = (spec.initContainers ?? []).map((c) => this.addRecord(c, c.restartPolicy === 'Always' ? 'sidecar' : 'init'));
    const regular = spec.containers.map((c) => this.addRecord(c, 'regular'));
    this.state = { phase: 'Pending', startTime: new Date(), initialized: false, completed: false, init, regular, hostIP: ctx.hostIP, podIP: ctx.hostIP };
    // The kubelet creates the pod's log directory before any container starts.
    this.logs = new PodLogWriter({
      root: join(ctx.root, 'var/log/pods'),
      namespace: this.namespace,
      pod: this.name,
      uid: this.uid,
      maxSizeBytes: ctx.logMaxSizeBytes,
      maxFiles: ctx.logMaxFiles,
    });
    this.status = new StatusWriter(
      ctx.core,
      this.namespace,
      this.name,
      () => podStatus({ ...this.state, phase: this.phase() }, this.transitions),
      () => (this.gone = true),
      (err) => ctx.log(`pod ${this.namespace}/${this.name}: status update rejected: ${describe(err)}`),
    );
    this.done = this.run().catch((err: unknown) => ctx.log(`pod ${this.namespace}/${this.name}: worker failed: ${(err as Error).stack ?? err}`));
  }

  get podDir(): string {
    return this.logs.podDir;
  }

  get volumesDir(): string {
    return podVolumesDir(this.ctx.root, this.uid);
  }

  /** Rotations of the container's log so far, over all its runs. */
  logRotations(container: string): number {
    return this.writers.get(container)?.rotations ?? 0;
  }

  get annotations(): Record<string, string> {
    return this.pod.metadata?.annotations ?? {};
  }

  get labels(): Record<string, string> {
    return this.pod.metadata?.labels ?? {};
  }

  get phaseNow(): Phase {
    return this.phase();
  }

  /** Whether a process of this container is alive right now. */
  isRunning(container: string): boolean {
    return this.instances.get(container)?.running === true;
  }

  /** The last lines the container's latest run printed (kept after the pod is gone). */
  output(container: string): string[] {
    return this.lastOutput.get(container) ?? [];
  }
  private readonly lastOutput = new Map<string, string[]>();

  update(pod: V1Pod): void {
    this.pod = pod;
    const del = pod.metadata?.deletionTimestamp;
    if (del && !this.finalPhase) {
      const grace = pod.metadata?.deletionGracePeriodSeconds ?? pod.spec?.terminationGracePeriodSeconds ?? DEFAULT_GRACE_SECONDS;
      this.terminate(grace);
    }
  }

  /** The pod is gone from the API server (or the kubelet stops): kill what runs, quickly. */
  removed(graceSeconds = 0): void {
    this.gone = true;
    this.terminate(graceSeconds);
  }

  /**
   * Graceful termination of everything: regular containers get SIGTERM now;
   * sidecars follow in reverse order once those exited; SIGKILL for whatever
   * is alive at the deadline.
   */
  terminate(graceSeconds: number): void {
    const deadline = Date.now() + graceSeconds * 1000;
    if (this.terminating && this.terminating.deadline <= deadline) return;
    this.terminating = { deadline };
    this.wake.abort();
    for (const rec of [...this.state.init, ...this.state.regular]) {
      if (rec.kind !== 'sidecar') this.signal(rec, 'SIGTERM');
    }
    clearTimeout(this.killTimer);
    this.killTimer = setTimeout(() => this.killAll(), Math.max(0, deadline - Date.now()));
  }

  private killAll(): void {
    for (const inst of this.instances.values()) inst.kill();
  }

  private signal(rec: ContainerRecord, sig: NodeJS.Signals): void {
    const inst = this.instances.get(rec.name);
    if (!inst?.running) return;
    this.emit({ type: 'signal', container: rec.name, restart: rec.restartCount, signal: sig });
    inst.signal(sig);
  }

  private addRecord(c: V1Container, kind: ContainerRecord['kind']): ContainerRecord {
    const r = new ContainerRecord(c.name, c.image ?? '', kind);
    this.records.set(c.name, r);
    return r;
  }

  private emit(e: Record<string, unknown> & { type: KubeletEvent['type'] }): void {
    this.ctx.emit({ t: Date.now(), uid: this.uid, pod: this.name, namespace: this.namespace, ...e } as KubeletEvent);
  }

  private phase(): Phase {
    if (this.finalPhase) return this.finalPhase;
    if (!this.state.initialized) return 'Pending';
    return this.state.regular.some((r) => r.state !== 'waiting' || r.restartCount > 0) ? 'Running' : 'Pending';
  }

  private updateStatus(): void {
    if (!this.gone) void this.status.update();
  }

  private async sleep(ms: number): Promise<void> {
    if (this.wake.signal.aborted) return;
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, ms);
      this.wake.signal.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
    });
  }

  private backoff(restarts: number): number {
    return Math.min(this.ctx.maxRestartBackoffMs, this.ctx.restartBackoffMs * 2 ** Math.max(0, restarts - 1));
  }

  private async run(): Promise<void> {
    this.updateStatus();
    // Volumes: retried like MountVolume.SetUp until they work or the pod goes.
    for (;;) {
      if (this.terminating) return this.finish();
      try {
        this.volumes = await prepareVolumes(this.pod, this.ctx.root, this.ctx.sources);
        break;
      } catch (err) {
        if (!(err instanceof VolumeError)) throw err;
        for (const r of this.records.values()) r.waiting('ContainerCreating', err.message);
        this.updateStatus();
        await this.sleep(1000);
      }
    }
    const spec = this.pod.spec!;
    const never = spec.restartPolicy === 'Never';
    const sidecarLoops: Promise<void>[] = [];
    let initFailed = false;
    for (const c of spec.initContainers ?? []) {
      if (this.terminating) break;
      const rec = this.records.get(c.name)!;
      if (rec.kind === 'sidecar') {
        // The next init container starts once this one has started.
        let started!: () => void;
        const isStarted = new Promise<void>((r) => (started = r));
        sidecarLoops.push(this.keepRunning(c, rec, started));
        await isStarted;
        await this.sleep(NEXT_CONTAINER_AFTER_SIDECAR_MS);
        continue;
      }
      for (;;) {
        const res = await this.runOnce(c, rec);
        if (res?.exitCode === 0) break;
        if (never || this.terminating) {
          initFailed = true;
          break;
        }
        await this.restartWait(rec);
      }
      if (initFailed) break;
    }
    let results: Array<InstanceResult | undefined> = [];
    if (!initFailed && !this.terminating) {
      this.state.initialized = true;
      this.updateStatus();
      results = await Promise.all(spec.containers.map((c) => this.runRegular(c, this.records.get(c.name)!)));
    }
    this.state.completed = true;
    this.updateStatus();
    await this.stopSidecars();
    await Promise.all(sidecarLoops);
    const succeeded = !initFailed && results.length === spec.containers.length && results.every((r) => r?.exitCode === 0);
    return this.finish(succeeded ? 'Succeeded' : 'Failed');
  }

  private async finish(phase: Phase = 'Failed'): Promise<void> {
    clearTimeout(this.killTimer);
    for (const w of this.writers.values()) w.close();
    this.finalPhase = phase;
    for (const r of this.records.values()) if (r.state === 'waiting') r.waiting(phase === 'Succeeded' ? 'Completed' : 'PodTerminated');
    this.emit({ type: 'phase', phase });
    if (this.gone) return;
    await this.status.flush();
    if (this.pod.metadata?.deletionTimestamp && !this.gone) {
      // Graceful deletion ends with the kubelet confirming that nothing runs any more.
      // With a body, the API server reads the grace period from the body only.
      await this.ctx.core
        .deleteNamespacedPod({ name: this.name, namespace: this.namespace, body: { gracePeriodSeconds: 0, preconditions: { uid: this.uid } } })
        .catch((err: unknown) => this.ctx.log(`pod ${this.namespace}/${this.name}: final delete failed: ${describe(err)}`));
    }
  }

  private async runRegular(c: V1Container, rec: ContainerRecord): Promise<InstanceResult | undefined> {
    const policy = this.pod.spec!.restartPolicy ?? 'Always';
    for (;;) {
      const res = await this.runOnce(c, rec);
      if (this.terminating) return res;
      if (policy === 'Never' || (policy === 'OnFailure' && res?.exitCode === 0)) return res;
      await this.restartWait(rec);
      if (this.terminating) return res;
    }
  }

  /** CrashLoopBackOff between runs; the restart count goes up when the next run is created. */
  private async restartWait(rec: ContainerRecord): Promise<void> {
    rec.waiting('CrashLoopBackOff', `back-off restarting failed container ${rec.name}`);
    this.updateStatus();
    await this.sleep(this.backoff(rec.restartCount + 1));
    rec.restartCount++;
  }

  private async keepRunning(c: V1Container, rec: ContainerRecord, started: () => void): Promise<void> {
    let first = true;
    for (;;) {
      if (this.stopSidecar.has(c.name) || this.finalPhase) break;
      const run = this.runOnce(c, rec, () => {
        if (first) started();
        first = false;
      });
      const res = await run;
      if (first) {
        // It never started (bad config while the pod was being stopped): let the pod go on.
        first = false;
        started();
      }
      if (res === undefined || this.stopSidecar.has(c.name) || this.finalPhase) break;
      // A sidecar is restarted whatever the pod's restartPolicy, until the pod stops it.
      rec.waiting('CrashLoopBackOff', `back-off restarting failed container ${rec.name}`);
      this.updateStatus();
      await this.sleepUnlessStopped(c.name, this.backoff(rec.restartCount + 1));
      if (this.stopSidecar.has(c.name)) break;
      rec.restartCount++;
    }
  }

  private async sleepUnlessStopped(name: string, ms: number): Promise<void> {
    const until = Date.now() + ms;
    while (Date.now() < until && !this.stopSidecar.has(name)) await new Promise((r) => setTimeout(r, Math.min(50, until - Date.now())));
  }

  /** SIGTERM to the sidecars in reverse order, each after the later one exited; SIGKILL at the deadline. */
  private async stopSidecars(): Promise<void> {
    const grace = this.pod.spec!.terminationGracePeriodSeconds ?? DEFAULT_GRACE_SECONDS;
    const deadline = this.terminating?.deadline ?? Date.now() + grace * 1000;
    const sidecars = this.state.init.filter((r) => r.kind === 'sidecar').reverse();
    for (const rec of sidecars) this.stopSidecar.add(rec.name);
    for (const rec of sidecars) {
      const inst = this.instances.get(rec.name);
      if (!inst?.running) continue;
      this.signal(rec, 'SIGTERM');
      const left = deadline - Date.now();
      let timer: NodeJS.Timeout | undefined;
      const timedOut = await Promise.race([inst.done.then(() => false), new Promise<boolean>((r) => (timer = setTimeout(() => r(true), Math.max(0, left))))]);
      clearTimeout(timer);
      if (timedOut) break;
    }
    for (const rec of sidecars) {
      const inst = this.instances.get(rec.name);
      if (inst?.running) {
        this.emit({ type: 'signal', container: rec.name, restart: rec.restartCount, signal: 'SIGKILL' });
        inst.kill();
        await inst.done;
      }
    }
    // Let the keepRunning loops record the exits before the final status.
    await new Promise((r) => setImmediate(r));
  }

  /** Where the container's terminationMessagePath lives on this machine. */
  private terminationFile(c: V1Container): string {
    return join(this.volumesDir, 'containers', c.name, 'termination-log');
  }

  /** The argv and env of a run, with container paths translated to this machine (README.md, "Paths"). */
  private async prepare(c: V1Container): Promise<{ argv: string[]; env: Record<string, string> }> {
    const image = lookupImage(this.ctx.images, c.image);
    const env = { ...image.env, ...(await containerEnv(this.pod, c, this.ctx.sources)) };
    const mounts = [...image.files, ...containerMounts(c, this.volumes, env), { mountPath: terminationMessagePath(c), local: this.terminationFile(c), readOnly: false }];
    const lookup = (n: string) => env[n];
    let argv: string[];
    if (c.command && c.command.length > 0) argv = [...c.command, ...(c.args ?? [])].map((a) => expand(a, lookup));
    else argv = [...image.entrypoint, ...(c.args ?? image.cmd).map((a) => expand(a, lookup))];
    if (argv.length === 0) throw new ContainerConfigError(`container ${c.name}: no command specified and image ${c.image} has no entrypoint here`);
    const local: Record<string, string> = {};
    for (const [k, v] of Object.entries(env)) local[k] = toLocal(mounts, v);
    return { argv: argv.map((a) => toLocal(mounts, a)), env: local };
  }

  /**
   * The postStart exec hook: run in the container's environment while the
   * container runs. A hook that fails kills the container, which is then
   * restarted per its restart policy, as on a real node.
   */
  private async postStart(c: V1Container, env: Record<string, string>, cwd: string, inst: ContainerInstance): Promise<void> {
    const command = c.lifecycle?.postStart?.exec?.command;
    if (!command || command.length === 0) return;
    const { argv } = await this.prepare({ ...c, command, args: [] });
    const [cmd, ...args] = argv;
    const started = Date.now();
    const code = await new Promise<number>((resolve) => {
      const hook = spawn(cmd!, args, { cwd, env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...env }, stdio: 'ignore' });
      const timer = setTimeout(() => hook.kill('SIGKILL'), 30_000);
      hook.once('error', () => resolve(127));
      hook.once('close', (code) => {
        clearTimeout(timer);
        resolve(code ?? 137);
      });
    });
    this.emit({ type: 'postStart', container: c.name, restart: this.records.get(c.name)?.restartCount ?? 0, exitCode: code, ms: Date.now() - started });
    if (code !== 0) {
      this.ctx.log(`${this.namespace}/${this.name} ${c.name}: postStart hook exited ${code}; killing the container (FailedPostStartHook)`);
      inst.kill();
    }
  }

  /**
   * One run of a container, from creation to exit. Returns undefined when it
   * could not be created before the pod stopped.
   */
  private async runOnce(c: V1Container, rec: ContainerRecord, onStart?: () => void): Promise<InstanceResult | undefined> {
    let prepared: { argv: string[]; env: Record<string, string> };
    for (;;) {
      if (this.terminating || (rec.kind === 'sidecar' && this.stopSidecar.has(c.name))) return undefined;
      try {
        prepared = await this.prepare(c);
        break;
      } catch (err) {
        if (!(err instanceof ContainerConfigError) && !(err instanceof VolumeError)) throw err;
        rec.waiting('CreateContainerConfigError', err.message);
        this.updateStatus();
        await this.sleep(1000);
      }
    }
    let writer = this.writers.get(c.name);
    if (!writer) {
      writer = this.logs.container(c.name, rec.restartCount);
      this.writers.set(c.name, writer);
    } else {
      while (writer.restartCount < rec.restartCount) writer.restart();
    }
    const cwd = join(this.volumesDir, 'containers', c.name);
    mkdirSync(cwd, { recursive: true });
    // A fresh, empty termination message file for every run, as the kubelet bind-mounts one.
    writeFileSync(this.terminationFile(c), '');
    const inst = new ContainerInstance({
      argv: prepared.argv,
      env: { PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin', HOSTNAME: this.name, HOME: cwd, ...prepared.env },
      cwd,
      log: writer,
      // Only sidecars get init's signal rule: the jobharvest sidecar relies on
      // it when it has no start-up handshake (src/core/inject.ts), and main
      // containers keep dying on SIGTERM at once, as the scenarios expect.
      init: rec.kind === 'sidecar' && this.pod.spec?.shareProcessNamespace !== true && this.pod.spec?.hostPID !== true,
    });
    this.instances.set(c.name, inst);
    rec.started(inst.startedAt);
    this.emit({ type: 'start', container: c.name, restart: rec.restartCount, pid: inst.pid });
    this.updateStatus();
    // As the kubelet does: the next container starts only once postStart returned.
    await this.postStart(c, prepared.env, cwd, inst);
    onStart?.();
    const res = await inst.done;
    const written = readTerminationMessage(this.terminationFile(c));
    rec.finished({ exitCode: res.exitCode, reason: res.reason, message: written || res.message, startedAt: res.startedAt, finishedAt: res.finishedAt });
    this.lastOutput.set(c.name, inst.output);
    // For post-mortems in the kubelet's log: how the run ended.
    this.ctx.log(`${this.namespace}/${this.name} ${c.name}#${rec.restartCount} exited ${res.exitCode}; last output:\n    ${inst.output.slice(-8).join('\n    ')}`);
    this.emit({ type: 'exit', container: c.name, restart: rec.restartCount, exitCode: res.exitCode, signal: res.signal });
    this.updateStatus();
    return res;
  }
}

function describe(err: unknown): string {
  const e = err as { code?: number; body?: unknown; message?: string };
  return `${e.code ?? ''} ${typeof e.body === 'string' ? e.body.slice(0, 500) : (e.message ?? String(err))}`;
}

/** The container's terminationMessagePath, with the API's default. */
function terminationMessagePath(c: V1Container): string {
  return c.terminationMessagePath || '/dev/termination-log';
}

/** What the kubelet puts into `state.terminated.message` (policy File): the file, at most 4096 bytes. */
function readTerminationMessage(file: string): string | undefined {
  try {
    const b = readFileSync(file);
    return b.length > 0 ? b.subarray(0, 4096).toString('utf8') : undefined;
  } catch {
    return undefined;
  }
}
