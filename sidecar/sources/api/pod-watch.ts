// Keeps the sidecar's view of its own Pod current: GET it, then watch it
// (fieldSelector on its name) from that resourceVersion, and start over with
// a GET when the watch expires (410) or breaks.
import { setTimeout as sleep } from 'node:timers/promises';
import { retryDelay } from '../../delivery/backoff.ts';
import { log } from '../../log.ts';
import { ApiError, podPath, podWatchPath, type KubeClient } from './kube-client.ts';
import type { Pod } from './pod.ts';

/** Servers end a watch after this long; we then resume it from the last resourceVersion. */
const WATCH_TIMEOUT_SECONDS = 290;

interface WatchEvent {
  readonly type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  readonly object: Pod & { readonly code?: number; readonly message?: string };
}

export interface PodWatchHandlers {
  onPod(pod: Pod): void;
  /** The pod was deleted (or a GET said 404): its logs are gone with it. */
  onGone(): void;
}

class Expired extends Error {}

export class PodWatch {
  private done: Promise<void> | undefined;

  constructor(
    private readonly client: KubeClient,
    private readonly namespace: string,
    private readonly pod: string,
    private readonly signal: AbortSignal,
    private readonly handlers: PodWatchHandlers,
  ) {}

  /** One GET; throws what the API said. */
  async get(): Promise<Pod> {
    try {
      const pod = await this.client.getJson<Pod>(podPath(this.namespace, this.pod), this.signal);
      this.handlers.onPod(pod);
      return pod;
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) this.handlers.onGone();
      throw err;
    }
  }

  start(): void {
    this.done ??= this.loop();
  }

  stopped(): Promise<void> {
    return this.done ?? Promise.resolve();
  }

  private async loop(): Promise<void> {
    let failures = 0;
    while (!this.signal.aborted) {
      try {
        const pod = await this.get();
        let rv = pod.metadata?.resourceVersion ?? '';
        failures = 0;
        for (;;) {
          rv = await this.watch(rv);
          failures = 0;
        }
      } catch (err) {
        if (this.signal.aborted) return;
        if (err instanceof ApiError && err.status === 404) return;
        if (err instanceof Expired) continue;
        failures++;
        if (failures === 1 || failures % 10 === 0) log.warn('watching the pod failed; retrying', { attempt: failures, error: err });
        try {
          await sleep(retryDelay(failures, undefined, { baseMs: 250, maxMs: 10_000, maxRetryAfterMs: 0 }), undefined, { signal: this.signal });
        } catch {
          return;
        }
      }
    }
  }

  /** Follows one watch request to its end; returns the resourceVersion to go on from. */
  private async watch(from: string): Promise<string> {
    let rv = from;
    const res = await this.client.stream(podWatchPath(this.namespace, this.pod, rv, WATCH_TIMEOUT_SECONDS), this.signal);
    res.setEncoding('utf8');
    let buf = '';
    for await (const chunk of res) {
      buf += chunk as string;
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const text = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (text === '') continue;
        const ev = JSON.parse(text) as WatchEvent;
        if (ev.type === 'ERROR') {
          if (ev.object.code === 410) throw new Expired('watch expired');
          throw new ApiError(ev.object.code ?? 500, `watch error: ${ev.object.message ?? 'unknown'}`);
        }
        rv = ev.object.metadata?.resourceVersion ?? rv;
        if (ev.type === 'DELETED') {
          this.handlers.onGone();
          throw new ApiError(404, 'the pod was deleted');
        }
        if (ev.type === 'ADDED' || ev.type === 'MODIFIED') this.handlers.onPod(ev.object);
      }
    }
    return rv;
  }
}
