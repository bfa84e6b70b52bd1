// Which namespaces the leader watches the Job pods of: those with an injected
// Job not yet recorded, counted by Job, and none once their last such Job is
// recorded, deleted or gone from a fresh list (issue 41: a namespace per CI run
// must not leave a watch behind).
import type { V1Job } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { DELIVERY_ANNOTATION } from '../../src/contract/harvest.ts';
import { PodWatches } from '../pod-watches.ts';

function job(namespace: string, name: string, o: { recorded?: boolean; deleting?: boolean; forged?: boolean } = {}): V1Job {
  return {
    metadata: {
      namespace,
      name,
      uid: `${namespace}-${name}-uid`,
      ...(o.recorded ? { annotations: { [DELIVERY_ANNOTATION]: '{"sink":"http"}' } } : {}),
      ...(o.forged ? { labels: { forged: 'true' } } : {}),
      ...(o.deleting ? { deletionTimestamp: new Date() } : {}),
    },
  };
}

/** Fake watches: which namespaces are open, and every open and stop in order. */
function harness() {
  const open = new Set<string>();
  const calls: string[] = [];
  const forgotten: string[] = [];
  const logs: Array<[string, string]> = [];
  const verified: string[] = [];
  const w = new PodWatches({
    open: (ns) => {
      expect(open.has(ns), `${ns} opened twice`).toBe(false);
      open.add(ns);
      calls.push(`open ${ns}`);
      return {
        stop: () => {
          expect(open.delete(ns), `${ns} stopped twice`).toBe(true);
          calls.push(`stop ${ns}`);
        },
      };
    },
    // The test's stand-in for "no signed delivery record, not being deleted".
    cares: (j) => !j.metadata?.deletionTimestamp && !j.metadata?.annotations?.[DELIVERY_ANNOTATION],
    // The test's stand-in for harvester/trust.ts's verifyInjection: a forged Job fails it.
    verify: (j) => {
      verified.push(j.metadata!.uid!);
      return j.metadata?.labels?.forged ? undefined : `digest-of-${j.metadata?.uid}`;
    },
    forget: (uid) => forgotten.push(uid),
    log: (level, msg) => logs.push([level, msg]),
  });
  return { w, open, calls, forgotten, logs, verified };
}

describe('PodWatches', () => {
  it('opens one watch per namespace on its first Job and keeps it while any of its Jobs is not recorded', () => {
    const { w, open, calls } = harness();
    w.observe(job('a', 'j1'));
    w.observe(job('a', 'j1'));
    w.observe(job('a', 'j2'));
    w.observe(job('b', 'j1'));
    expect([...open]).toEqual(['a', 'b']);
    expect(w.size).toBe(2);
    expect(w.jobs).toBe(3);
    // One recorded: a still has j2.
    w.observe(job('a', 'j1', { recorded: true }));
    expect(w.has('a')).toBe(true);
    w.observe(job('a', 'j2', { recorded: true }));
    expect(w.has('a')).toBe(false);
    expect(calls).toEqual(['open a', 'open b', 'stop a']);
    expect(w.size).toBe(1);
  });

  it('a Job recorded before the harvester saw it (a list after a restart) opens nothing', () => {
    const { w, calls } = harness();
    w.observe(job('a', 'old', { recorded: true }));
    w.observe(job('a', 'going', { deleting: true }));
    expect(calls).toEqual([]);
    expect(w.size).toBe(0);
  });

  it('a deleted Job lets its namespace go, and what was kept for it', () => {
    const { w, open, forgotten } = harness();
    w.observe(job('ci-1', 'build'));
    w.observe(job('ci-1', 'build', { deleting: true }));
    expect(w.size).toBe(0);
    w.observe(job('ci-2', 'build'));
    w.deleted(job('ci-2', 'build'));
    expect([...open]).toEqual([]);
    expect(forgotten).toEqual(['ci-2-build-uid']);
    // A deletion of a Job never kept changes nothing.
    w.deleted(job('ci-3', 'build'));
    expect(w.size).toBe(0);
  });

  it('a Job whose injection signature does not verify (the label is anyone\'s to set) opens no watch and vouches for no pod', () => {
    const { w, open, verified } = harness();
    for (let i = 0; i < 100; i++) w.observe(job('tenant', `forged-${i}`, { forged: true }));
    expect(open.size).toBe(0);
    expect(w.jobs).toBe(0);
    expect(w.trusted('tenant', 'tenant-forged-0-uid')).toBeUndefined();
    // A verified Job is verified once, and vouches only in its own namespace.
    w.observe(job('team', 'real'));
    w.observe(job('team', 'real'));
    expect([...open]).toEqual(['team']);
    expect(verified.filter((u) => u === 'team-real-uid')).toHaveLength(1);
    expect(w.trusted('team', 'team-real-uid')).toBe('digest-of-team-real-uid');
    expect(w.trusted('tenant', 'team-real-uid')).toBeUndefined();
    // Recorded: no longer vouched for.
    w.observe(job('team', 'real', { recorded: true }));
    expect(w.trusted('team', 'team-real-uid')).toBeUndefined();
  });

  it('a Job that comes back unrecorded (its record removed) is watched again', () => {
    const { w, calls } = harness();
    w.observe(job('a', 'j'));
    w.observe(job('a', 'j', { recorded: true }));
    w.observe(job('a', 'j'));
    expect(calls).toEqual(['open a', 'stop a', 'open a']);
  });

  it('a fresh list drops the Jobs deleted while the Job watch was down, and their namespaces', () => {
    const { w, open, forgotten } = harness();
    w.observe(job('a', 'j1'));
    w.observe(job('b', 'j1'));
    w.observe(job('b', 'j2'));
    w.resync(new Set([job('b', 'j2').metadata!.uid!]));
    expect([...open]).toEqual(['b']);
    expect(w.jobs).toBe(1);
    expect(forgotten.sort()).toEqual(['a-j1-uid', 'b-j1-uid']);
  });

  it('200 namespaces, one Job each, then each deleted: 200 watches opened, 0 left', () => {
    const { w, open, calls } = harness();
    for (let i = 0; i < 200; i++) w.observe(job(`ci-${i}`, 'build'));
    expect(w.size).toBe(200);
    // The namespace controller deletes the Jobs; the Job watch delivers each deletion.
    for (let i = 0; i < 200; i++) w.deleted(job(`ci-${i}`, 'build'));
    expect(w.size).toBe(0);
    expect(open.size).toBe(0);
    expect(calls.filter((c) => c.startsWith('open'))).toHaveLength(200);
    expect(calls.filter((c) => c.startsWith('stop'))).toHaveLength(200);
  });

  it('stop() closes every watch and opens none afterwards (leadership lost)', () => {
    const { w, open } = harness();
    w.observe(job('a', 'j'));
    w.observe(job('b', 'j'));
    w.stop();
    expect(open.size).toBe(0);
    w.observe(job('c', 'j'));
    expect(open.size).toBe(0);
    expect(w.size).toBe(0);
  });

  it('logs opening and stopping at debug only', () => {
    const { w, logs } = harness();
    w.observe(job('a', 'j'));
    w.deleted(job('a', 'j'));
    expect(logs.map(([l]) => l)).toEqual(['debug', 'debug']);
  });
});
