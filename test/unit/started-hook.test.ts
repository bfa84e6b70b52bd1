import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/core/config.ts';
import { mutateJob } from '../../src/core/mutate.ts';
import { durableConfig, job, optedIn } from './fixtures.ts';

/** The injected sidecar's postStart hook, or undefined when it has none. */
function hookOf(spec: Record<string, unknown>, config = durableConfig()): unknown {
  const j = job();
  Object.assign(j.spec.template.spec, spec);
  const r = mutateJob(j, { config, namespace: optedIn('team-a') });
  expect(r.decision.action).toBe('inject');
  const sidecar = r.job.spec?.template?.spec?.initContainers?.[0] as { name: string; lifecycle?: { postStart?: unknown } };
  expect(sidecar.name).toBe('jobharvest');
  return sidecar.lifecycle?.postStart;
}

const HOOK = { exec: { command: ['/nodejs/bin/node', '/app/sidecar.mjs', '--wait-started'] } };

describe('the postStart handshake', () => {
  it('is left out when the sidecar is PID 1 of its container: the handshake would only delay the Job', () => {
    expect(hookOf({})).toBeUndefined();
    expect(hookOf({ shareProcessNamespace: false, hostPID: false })).toBeUndefined();
  });

  it('is given when the pod shares a PID namespace, where an early SIGTERM would kill the sidecar before it drained', () => {
    expect(hookOf({ shareProcessNamespace: true })).toEqual(HOOK);
    expect(hookOf({ hostPID: true })).toEqual(HOOK);
  });

  it('takes the configured command, and an empty one leaves the hook out even then', () => {
    const command = ['/custom/node', '/app/sidecar.mjs', '--wait-started'];
    expect(hookOf({ shareProcessNamespace: true }, durableConfig({ sidecar: { startedCommand: command } }))).toEqual({ exec: { command } });
    expect(hookOf({ shareProcessNamespace: true }, parseConfig({ sink: { type: 'http', endpoint: 'http://logs.example:8080/ingest' }, sidecar: { startedCommand: [] } }))).toBeUndefined();
  });
});
