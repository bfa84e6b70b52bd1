// The start-up handshake with the kubelet, for pods that share a PID
// namespace (src/core/inject.ts, needsStartedHook): there the sidecar is not
// PID 1 of its container, and a SIGTERM before its handler is in place would
// kill it. The webhook gives such a sidecar a postStart hook
// (`--wait-started`), and the kubelet starts the pod's next container only
// once that hook returns. The sidecar writes its marker as soon as its SIGTERM
// handler is in place, so a Job that is done within milliseconds cannot have
// its sidecar killed before it can drain. A marker left by an earlier run of a
// restarted sidecar only lets the hook return early, and by then the pod's
// other containers are running anyway.
import { existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ENV } from '../src/contract/env.ts';

const MARKER = 'started';

function markerPath(env: NodeJS.ProcessEnv): string {
  return path.join(env[ENV.STATE_DIR.name] || ENV.STATE_DIR.default, MARKER);
}

export function markStarted(env: NodeJS.ProcessEnv): void {
  try {
    writeFileSync(markerPath(env), `${process.pid}\n`);
  } catch {
    // An unusable state dir is reported by the pipeline's own start-up check;
    // the hook then gives up after its timeout and the pod goes on.
  }
}

/**
 * The hook's side: wait for the marker. It gives up after `timeoutMs` and
 * still exits 0, because a failing postStart hook makes the kubelet kill and
 * restart the sidecar without ever starting the Job: better a Job whose
 * sidecar is in trouble than a Job that never runs.
 */
export async function waitStarted(env: NodeJS.ProcessEnv, timeoutMs = 10_000): Promise<boolean> {
  const file = markerPath(env);
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    if (existsSync(file)) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return false;
}
