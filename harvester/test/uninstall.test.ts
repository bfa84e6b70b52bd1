import type { V1Job, V1RoleBinding } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { HOLD_ANNOTATION, holdPatch } from '../hold.ts';
import { isOurLogReaderBinding, isOurSecret, parseUninstallSettings, releaseOf } from '../uninstall.ts';
import { managedByLabels } from '../../src/contract/managed-by.ts';

const KEY = Buffer.from('0123456789abcdef0123456789abcdef');
const OTHER = Buffer.from('fedcba9876543210fedcba9876543210');
const job = (ttl: number, annotations: Record<string, string> = {}): V1Job => ({
  metadata: { name: 'j', namespace: 'n', uid: 'job-uid-1', resourceVersion: '9', annotations },
  spec: { template: {}, ttlSecondsAfterFinished: ttl },
});
const heldBy = (key: Buffer, originalTtl: number): V1Job => {
  const placed = holdPatch(job(originalTtl), key, Date.parse('2026-01-01T00:00:00Z'), Date.parse('2026-01-01T00:00:01Z'), 600)!;
  const p = placed.patch as { metadata: { annotations: Record<string, string> }; spec: { ttlSecondsAfterFinished: number } };
  return job(p.spec.ttlSecondsAfterFinished, { [HOLD_ANNOTATION]: p.metadata.annotations[HOLD_ANNOTATION]! });
};

describe('uninstall: releasing holds', () => {
  it("puts back the TTL the hold recorded and removes the hold, with the resourceVersion read", () => {
    const held = heldBy(KEY, 5);
    expect(held.spec!.ttlSecondsAfterFinished).toBeGreaterThan(600);
    expect(releaseOf(held, KEY)).toEqual({ metadata: { resourceVersion: '9', annotations: { [HOLD_ANNOTATION]: null } }, spec: { ttlSecondsAfterFinished: 5 } });
  });

  it('leaves alone a hold another key signed, or one a tenant wrote', () => {
    expect(releaseOf(heldBy(OTHER, 5), KEY)).toBeUndefined();
    expect(releaseOf(job(100_000, { [HOLD_ANNOTATION]: JSON.stringify({ originalTtl: 0, since: '2026-01-01T00:00:00Z', maxHoldSeconds: 600 }) }), KEY)).toBeUndefined();
    expect(releaseOf(job(5), KEY)).toBeUndefined();
  });
});

describe('uninstall: what the webhook made', () => {
  const binding = (name: string, labels: Record<string, string>, role = 'jh-jobharvest-log-reader'): V1RoleBinding => ({
    metadata: { name, labels },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: role },
  });

  it('a log-reader RoleBinding is ours only with our label, one of our two names and our role', () => {
    const role = 'jh-jobharvest-log-reader';
    expect(isOurLogReaderBinding(binding(role, managedByLabels()), role)).toBe(true);
    expect(isOurLogReaderBinding(binding(`${role}-webhook`, managedByLabels()), role)).toBe(true);
    expect(isOurLogReaderBinding(binding(role, { 'app.kubernetes.io/managed-by': 'Helm' }), role)).toBe(false);
    expect(isOurLogReaderBinding(binding(role, managedByLabels(), 'admin'), role)).toBe(false);
    expect(isOurLogReaderBinding(binding('other', managedByLabels()), role)).toBe(false);
    // Another release's binding, to its own role.
    expect(isOurLogReaderBinding(binding('jh2-jobharvest-log-reader', managedByLabels(), 'jh2-jobharvest-log-reader'), role)).toBe(false);
  });

  it("a Secret is ours only with our label: an operator's or cert-manager's is left", () => {
    expect(isOurSecret({ metadata: { name: 's', labels: managedByLabels() } })).toBe(true);
    expect(isOurSecret({ metadata: { name: 's', labels: { 'app.kubernetes.io/managed-by': 'Helm' } } })).toBe(false);
    expect(isOurSecret({ metadata: { name: 's' } })).toBe(false);
  });
});

describe('uninstall: settings', () => {
  it('takes repeated names, the namespace from the pod, a bounded deadline', () => {
    const s = parseUninstallSettings(['--webhook-configuration=jh', '--cluster-role-binding=a', '--cluster-role-binding=b', '--secret=t', '--lease=l', '--deadline-seconds=30'], { POD_NAMESPACE: 'ns' });
    expect(s).toMatchObject({ namespace: 'ns', webhookConfiguration: 'jh', clusterRoleBindings: ['a', 'b'], roleBindings: [], secrets: ['t'], leases: ['l'], deadlineMs: 30_000, settleMs: 2000, logReaderRole: undefined });
    expect(() => parseUninstallSettings(['--webhook-configuration=jh'], {})).toThrow(/namespace/);
    expect(() => parseUninstallSettings(['--webhook-configuration=jh', '--deadline-seconds=0'], { POD_NAMESPACE: 'ns' })).toThrow();
  });
});
