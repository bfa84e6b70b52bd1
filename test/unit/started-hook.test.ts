import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/core/config.ts';
import { mutateJob } from '../../src/core/mutate.ts';
import { durableConfig, job, optedIn } from '../support/fixtures.ts';

/** The injected sidecar's lifecycle hooks, or undefined when it has none. */
function hooksOf(spec: Record<string, unknown>, config = durableConfig()): unknown {
  const j = job();
  Object.assign(j.spec.template.spec, spec);
  const r = mutateJob(j, { config, namespace: optedIn('team-a') });
  expect(r.decision.action).toBe('inject');
  const sidecar = r.job.spec?.template?.spec?.initContainers?.[0] as { name: string; lifecycle?: unknown };
  expect(sidecar.name).toBe('jobharvest');
  return sidecar.lifecycle;
}

const HOOK = { exec: { command: ['/nodejs/bin/node', '/app/sidecar.mjs', '--wait-started'] } };

describe('the preStop handshake', () => {
  it('is given to every pod, and no postStart hook holds back the Job\'s start', () => {
    expect(hooksOf({})).toEqual({ preStop: HOOK });
    expect(hooksOf({ shareProcessNamespace: false, hostPID: false })).toEqual({ preStop: HOOK });
  });

  it('is the same where the pod shares a PID namespace, where an early SIGTERM would kill the sidecar rather than be lost', () => {
    expect(hooksOf({ shareProcessNamespace: true })).toEqual({ preStop: HOOK });
    expect(hooksOf({ hostPID: true })).toEqual({ preStop: HOOK });
  });

  it('takes the configured command, and an empty one leaves the hook out', () => {
    const command = ['/custom/node', '/app/sidecar.mjs', '--wait-started'];
    expect(hooksOf({}, durableConfig({ sidecar: { startedCommand: command } }))).toEqual({ preStop: { exec: { command } } });
    expect(hooksOf({ shareProcessNamespace: true }, parseConfig({ sink: { type: 'http', endpoint: 'http://logs.example:8080/ingest' }, sidecar: { startedCommand: [] } }))).toBeUndefined();
  });
});
