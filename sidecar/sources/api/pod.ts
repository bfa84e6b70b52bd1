// What the sidecar reads from its own Pod object, and which runs of each
// container the pods/log API can still serve. The kubelet answers a log
// request from its container statuses:
// - without `previous`: the current run (restartCount) while it runs or after
//   it terminated, and, while a restart waits in back-off, the run that just
//   terminated, which is still restartCount;
// - with `previous`: lastState.terminated, i.e. run restartCount-1 while the
//   next run is running or terminated.
// Anything older is gone from the API (the files may still be on the node).

export interface ContainerState {
  readonly running?: object | null;
  readonly terminated?: { readonly exitCode?: number; readonly containerID?: string } | null;
  readonly waiting?: { readonly reason?: string } | null;
}

export interface ContainerStatus {
  readonly name: string;
  readonly restartCount?: number;
  readonly state?: ContainerState;
  readonly lastState?: ContainerState;
}

export interface Pod {
  readonly metadata?: { readonly uid?: string; readonly resourceVersion?: string };
  readonly spec?: {
    readonly initContainers?: ReadonlyArray<{ readonly name: string }>;
    readonly containers?: ReadonlyArray<{ readonly name: string }>;
    readonly ephemeralContainers?: ReadonlyArray<{ readonly name: string }>;
  };
  readonly status?: {
    readonly initContainerStatuses?: readonly ContainerStatus[];
    readonly containerStatuses?: readonly ContainerStatus[];
    readonly ephemeralContainerStatuses?: readonly ContainerStatus[];
  };
}

/** Statuses of every container but the sidecar itself: init containers, then regular, then ephemeral. */
export function containerStatuses(pod: Pod, self: string): ContainerStatus[] {
  const s = pod.status ?? {};
  return [...(s.initContainerStatuses ?? []), ...(s.containerStatuses ?? []), ...(s.ephemeralContainerStatuses ?? [])].filter((c) => c.name !== self);
}

export type Reach =
  /** Not started yet: nothing to read. */
  | 'pending'
  /** Served by a request without `previous`. */
  | 'current'
  /** Served by a request with `previous=true`. */
  | 'previous'
  /** Existed, but the API serves it no longer. */
  | 'gone';

export interface RunView {
  readonly reach: Reach;
  /** The run has ended: a stream of it that ends cleanly is complete. */
  readonly terminated: boolean;
}

export function runView(status: ContainerStatus | undefined, restart: number): RunView {
  if (!status) return { reach: 'pending', terminated: false };
  const latest = status.restartCount ?? 0;
  const st = status.state ?? {};
  const last = status.lastState ?? {};
  const backOff = Boolean(st.waiting) && Boolean(last.terminated);
  const latestEnded = Boolean(st.terminated) || backOff;
  const latestStarted = Boolean(st.running) || latestEnded;
  if (restart > latest) return { reach: 'pending', terminated: false };
  if (restart === latest) return latestStarted ? { reach: 'current', terminated: latestEnded } : { reach: 'pending', terminated: false };
  if (restart === latest - 1 && !backOff && (st.running || st.terminated) && last.terminated) return { reach: 'previous', terminated: true };
  return { reach: 'gone', terminated: true };
}

/** Highest run number that has started (or -1): runs 0..n are candidates to read. */
export function latestStartedRun(status: ContainerStatus): number {
  const latest = status.restartCount ?? 0;
  return runView(status, latest).reach === 'pending' ? latest - 1 : latest;
}
