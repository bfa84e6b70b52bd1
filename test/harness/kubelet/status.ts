/**
 * Pod status as the kubelet reports it, and the writer that sends it through
 * the pods/status subresource with a strategic merge patch (conditions merge
 * by type, so the scheduler's PodScheduled stays), coalescing updates so the
 * last state always wins.
 */
import { PatchStrategy, setHeaderOptions, type CoreV1Api } from '@kubernetes/client-node';
import { randomBytes } from 'node:crypto';

export type Phase = 'Pending' | 'Running' | 'Succeeded' | 'Failed';

export interface Terminated {
  exitCode: number;
  reason: string;
  message?: string;
  signal?: number;
  startedAt: Date;
  finishedAt: Date;
  containerID: string;
}

/** What the kubelet knows about one container of the pod. */
export class ContainerRecord {
  restartCount = 0;
  state: 'waiting' | 'running' | 'terminated' = 'waiting';
  waitingReason = 'PodInitializing';
  waitingMessage: string | undefined;
  startedAt: Date | undefined;
  containerID = '';
  terminated: Terminated | undefined;
  last: Terminated | undefined;
  /** Every finished run, oldest first (restart count = index). */
  readonly history: Terminated[] = [];

  constructor(
    readonly name: string,
    readonly image: string,
    readonly kind: 'init' | 'sidecar' | 'regular',
  ) {}

  started(at: Date): void {
    if (this.terminated) {
      this.last = this.terminated;
      this.terminated = undefined;
    }
    this.state = 'running';
    this.startedAt = at;
    this.containerID = `jobharvest-test://${randomBytes(16).toString('hex')}`;
  }

  finished(t: Omit<Terminated, 'containerID'>): Terminated {
    const rec = { ...t, containerID: this.containerID };
    this.state = 'terminated';
    this.terminated = rec;
    this.history.push(rec);
    return rec;
  }

  waiting(reason: string, message?: string): void {
    if (this.terminated) {
      this.last = this.terminated;
      this.terminated = undefined;
    }
    this.state = 'waiting';
    this.waitingReason = reason;
    this.waitingMessage = message;
  }

  toStatus(): Record<string, unknown> {
    const running = this.state === 'running';
    return {
      name: this.name,
      image: this.image,
      imageID: '',
      containerID: this.containerID || undefined,
      ready: running,
      started: running,
      restartCount: this.restartCount,
      state: stateOf(this),
      lastState: this.last ? { terminated: terminatedStatus(this.last) } : {},
    };
  }
}

const rfc3339 = (d: Date) => d.toISOString().replace(/\.\d{3}Z$/, 'Z');

function terminatedStatus(t: Terminated): Record<string, unknown> {
  return {
    exitCode: t.exitCode,
    reason: t.reason,
    ...(t.message ? { message: t.message } : {}),
    ...(t.signal ? { signal: t.signal } : {}),
    startedAt: rfc3339(t.startedAt),
    finishedAt: rfc3339(t.finishedAt),
    containerID: t.containerID,
  };
}

function stateOf(c: ContainerRecord): Record<string, unknown> {
  if (c.state === 'running') return { running: { startedAt: rfc3339(c.startedAt!) } };
  if (c.state === 'terminated') return { terminated: terminatedStatus(c.terminated!) };
  return { waiting: { reason: c.waitingReason, ...(c.waitingMessage ? { message: c.waitingMessage } : {}) } };
}

export interface PodState {
  phase: Phase;
  startTime: Date;
  initialized: boolean;
  /** Set once the regular containers are done, for the Ready condition's reason. */
  completed: boolean;
  init: ContainerRecord[];
  regular: ContainerRecord[];
  hostIP: string;
  podIP: string;
}

function condition(type: string, ok: boolean, since: Date, reason?: string): Record<string, unknown> {
  return { type, status: ok ? 'True' : 'False', lastProbeTime: null, lastTransitionTime: rfc3339(since), ...(reason && !ok ? { reason } : {}) };
}

export function podStatus(s: PodState, transitions: Map<string, { ok: boolean; at: Date }>): Record<string, unknown> {
  const sidecars = s.init.filter((c) => c.kind === 'sidecar');
  const containersReady = s.regular.every((c) => c.state === 'running') && sidecars.every((c) => c.state === 'running');
  const terminal = s.phase === 'Succeeded' || s.phase === 'Failed';
  const want: Record<string, { ok: boolean; reason?: string }> = {
    PodReadyToStartContainers: { ok: !terminal },
    Initialized: { ok: s.initialized, reason: 'ContainersNotInitialized' },
    ContainersReady: { ok: containersReady, reason: s.completed ? 'PodCompleted' : 'ContainersNotReady' },
    Ready: { ok: containersReady, reason: s.completed ? 'PodCompleted' : 'ContainersNotReady' },
  };
  const conditions = Object.entries(want).map(([type, w]) => {
    const prev = transitions.get(type);
    if (!prev || prev.ok !== w.ok) transitions.set(type, { ok: w.ok, at: new Date() });
    return condition(type, w.ok, transitions.get(type)!.at, w.reason);
  });
  return {
    phase: s.phase,
    conditions,
    hostIP: s.hostIP,
    hostIPs: [{ ip: s.hostIP }],
    podIP: s.podIP,
    podIPs: [{ ip: s.podIP }],
    startTime: rfc3339(s.startTime),
    initContainerStatuses: s.init.map((c) => c.toStatus()),
    containerStatuses: s.regular.map((c) => c.toStatus()),
  };
}

/**
 * Sends the pod's status, one request at a time; a change while a request is
 * out is sent after it with the then current state. flush() resolves once
 * the state at the time of the call (or a later one) is stored.
 */
export class StatusWriter {
  private dirty = false;
  private running: Promise<void> | undefined;
  private gone = false;
  lastError: unknown;

  constructor(
    private readonly core: CoreV1Api,
    private readonly namespace: string,
    private readonly name: string,
    private readonly build: () => Record<string, unknown>,
    private readonly onGone: () => void,
    private readonly onRejected: (err: unknown) => void,
  ) {}

  update(): Promise<void> {
    this.dirty = true;
    this.running ??= this.loop().finally(() => (this.running = undefined));
    return this.running;
  }

  async flush(): Promise<void> {
    await this.update();
  }

  private async loop(): Promise<void> {
    let attempt = 0;
    while (this.dirty && !this.gone) {
      this.dirty = false;
      const status = this.build();
      try {
        await this.core.patchNamespacedPodStatus(
          { name: this.name, namespace: this.namespace, body: { status } },
          setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch),
        );
        attempt = 0;
      } catch (err) {
        const code = (err as { code?: number }).code;
        if (code === 404) {
          this.gone = true;
          this.onGone();
          return;
        }
        if (code === 400 || code === 422) {
          // Invalid: sending the same state again cannot help; the next change may.
          this.onRejected(err);
          continue;
        }
        this.lastError = err;
        if (attempt === 0) this.onRejected(err);
        this.dirty = true;
        attempt++;
        await new Promise((r) => setTimeout(r, Math.min(2000, 100 * 2 ** attempt)));
      }
    }
  }
}
