import { describe, expect, it } from 'vitest';
import { chooseFailureExitCode, DEFAULT_FAILURE_EXIT_CODE } from '../../src/core/exit-code.ts';
import { mutateJob } from '../../src/core/mutate.ts';
import { durableConfig, job, optedIn } from '../support/fixtures.ts';

const withRules = (rules: unknown[]) => {
  const j = job();
  j.spec.podFailurePolicy = { rules };
  j.spec.template.spec.restartPolicy = 'Never';
  return j;
};
const onCodes = (operator: string, values: number[], containerName?: string) => ({
  action: 'FailJob',
  onExitCodes: { ...(containerName ? { containerName } : {}), operator, values },
});
const envOf = (j: Record<string, any>, name: string) =>
  j.spec.template.spec.initContainers[0].env.find((e: { name: string }) => e.name === name)?.value;

describe('the sidecar failure exit code never matches a podFailurePolicy rule', () => {
  it('leaves the default when no rule can match the sidecar', () => {
    expect(chooseFailureExitCode(job(), 'jobharvest')).toEqual({ code: null, warnings: [] });
    expect(chooseFailureExitCode(withRules([onCodes('In', [3], 'main')]), 'jobharvest').code).toBeNull();
    expect(chooseFailureExitCode(withRules([{ action: 'Ignore', onPodConditions: [{ type: 'DisruptionTarget' }] }]), 'jobharvest').code).toBeNull();
  });
  it('keeps the default code when it matches no rule', () => {
    expect(chooseFailureExitCode(withRules([onCodes('In', [42])]), 'jobharvest').code).toBe(DEFAULT_FAILURE_EXIT_CODE);
  });
  it('moves off a code an In rule lists, including a rule naming the sidecar', () => {
    expect(chooseFailureExitCode(withRules([onCodes('In', [3, 1])]), 'jobharvest').code).toBe(2);
    expect(chooseFailureExitCode(withRules([onCodes('In', [3], 'jobharvest')]), 'jobharvest').code).toBe(1);
  });
  it('picks a code every NotIn rule lists', () => {
    expect(chooseFailureExitCode(withRules([onCodes('NotIn', [1, 7])]), 'jobharvest').code).toBe(1);
    expect(chooseFailureExitCode(withRules([onCodes('NotIn', [1, 7]), onCodes('In', [1])]), 'jobharvest').code).toBe(7);
  });
  it('falls back to 0, with a warning, when every candidate matches', () => {
    const r = chooseFailureExitCode(withRules([onCodes('NotIn', [200])]), 'jobharvest');
    expect(r.code).toBe(0);
    expect(r.warnings.join()).toMatch(/exits 0/);
  });
  it('warns about a rule that matches the codes of a killed sidecar', () => {
    const r = chooseFailureExitCode(withRules([onCodes('In', [137])]), 'jobharvest');
    expect(r.code).toBe(DEFAULT_FAILURE_EXIT_CODE);
    expect(r.warnings).toHaveLength(1);
    expect(r.warnings[0]).toMatch(/rule 0 .*137.*containerName/);
  });
  it('is passed to the sidecar by injection, with the warnings', () => {
    const r = mutateJob(withRules([onCodes('In', [3, 137])]), { config: durableConfig(), namespace: optedIn('team-a') });
    expect(envOf(r.job, 'JOBHARVEST_FAILURE_EXIT_CODE')).toBe('1');
    expect(r.warnings.join()).toMatch(/137/);
    const plain = mutateJob(job(), { config: durableConfig(), namespace: optedIn('team-a') });
    expect(envOf(plain.job, 'JOBHARVEST_FAILURE_EXIT_CODE')).toBeUndefined();
  });
});
