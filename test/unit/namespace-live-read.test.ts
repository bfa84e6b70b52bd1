import { describe, expect, it } from 'vitest';
import { defaultConfig } from '../../src/core/config.ts';
import type { NamespaceMeta } from '../../src/core/kube.ts';
import { optedIn } from '../../src/k8s/log-reader-rbac.ts';
import { changedAt, liveReadTrigger, namespaceLookup, type CachedNamespace, type LiveRead, type LiveReadResult, type LiveReadTrigger } from '../../src/k8s/namespace-live.ts';

const config = defaultConfig();
const isIn = (ns: NamespaceMeta) => optedIn(ns, config);
const plain: NamespaceMeta = { name: 'team-a', labels: {}, annotations: {} };
const annotated: NamespaceMeta = { name: 'team-a', labels: {}, annotations: { 'jobharvest.io/inject': 'enabled' } };
const NOW = 1_000_000;

describe('when the webhook reads a namespace live', () => {
  it('reads a namespace the cache has not seen', () => {
    expect(liveReadTrigger(undefined, isIn, NOW)).toBe('unseen');
  });

  it('reads a namespace that is not opted in and was created or changed a moment ago', () => {
    expect(liveReadTrigger({ meta: plain, changedAt: NOW - 15 }, isIn, NOW)).toBe('recent');
    expect(liveReadTrigger({ meta: plain, changedAt: NOW - 4_999 }, isIn, NOW)).toBe('recent');
  });

  it('takes a change stamped later than now (clocks apart) as recent', () => {
    expect(liveReadTrigger({ meta: plain, changedAt: NOW + 800 }, isIn, NOW)).toBe('recent');
  });

  it('trusts the cache for a namespace not opted in and unchanged for longer than the window', () => {
    expect(liveReadTrigger({ meta: plain, changedAt: NOW - 5_000 }, isIn, NOW)).toBeUndefined();
    expect(liveReadTrigger({ meta: plain, changedAt: NOW - 3_600_000 }, isIn, NOW)).toBeUndefined();
    expect(liveReadTrigger({ meta: plain, changedAt: undefined }, isIn, NOW)).toBeUndefined();
  });

  it('trusts the cache for an opted-in namespace, however recent', () => {
    expect(liveReadTrigger({ meta: annotated, changedAt: NOW - 1 }, isIn, NOW)).toBeUndefined();
  });

  it('honours a shorter window', () => {
    expect(liveReadTrigger({ meta: plain, changedAt: NOW - 600 }, isIn, NOW, 500)).toBeUndefined();
    expect(liveReadTrigger({ meta: plain, changedAt: NOW - 400 }, isIn, NOW, 500)).toBe('recent');
  });

  it('dates a namespace by its creation, or by the last change the cache saw, whichever is later', () => {
    const created = new Date(NOW - 60_000);
    expect(changedAt(created, undefined)).toBe(NOW - 60_000);
    expect(changedAt(created.toISOString(), NOW - 10)).toBe(NOW - 10);
    expect(changedAt(new Date(NOW - 10), NOW - 60_000)).toBe(NOW - 10);
    expect(changedAt(undefined, undefined)).toBeUndefined();
    expect(changedAt('not a date', undefined)).toBeUndefined();
  });
});

interface Pending {
  name: string;
  resolve: (r: LiveRead) => void;
}

/** A cache whose live reads the test answers by hand (or never). */
function fakeCache(cached: Record<string, CachedNamespace | undefined>) {
  const pending: Pending[] = [];
  let reads = 0;
  const cache = {
    peek: (name: string) => cached[name],
    readLive: (name: string) =>
      new Promise<LiveRead>((resolve) => {
        reads++;
        pending.push({ name, resolve });
      }),
  };
  return { cache, pending, reads: () => reads };
}

function lookupWith(cached: Record<string, CachedNamespace | undefined>, timeoutMs = 1_000) {
  const fake = fakeCache(cached);
  const counted: Array<[LiveReadTrigger, LiveReadResult]> = [];
  const warnings: string[] = [];
  const lookup = namespaceLookup(fake.cache, {
    optedIn: isIn,
    now: () => NOW,
    timeoutMs,
    onLiveRead: (t, r) => counted.push([t, r]),
    log: (level, msg) => warnings.push(`${level}: ${msg}`),
  });
  return { ...fake, lookup, counted, warnings };
}

const tick = () => new Promise((r) => setImmediate(r));

describe('the admission lookup of a namespace', () => {
  it('answers from the cache, with no read, when the cache says opted in', async () => {
    const t = lookupWith({ 'team-a': { meta: annotated, changedAt: NOW - 1 } });
    expect(await t.lookup('team-a')).toEqual(annotated);
    expect(t.reads()).toBe(0);
    expect(t.counted).toEqual([]);
  });

  it('answers from the cache, with no read, for a namespace long not opted in', async () => {
    const t = lookupWith({ 'team-a': { meta: plain, changedAt: NOW - 60_000 } });
    expect(await t.lookup('team-a')).toEqual(plain);
    expect(t.reads()).toBe(0);
  });

  it('takes the live answer for a namespace annotated a moment ago, and counts it', async () => {
    const t = lookupWith({ 'team-a': { meta: plain, changedAt: NOW - 15 } });
    const got = t.lookup('team-a');
    await tick();
    t.pending[0]!.resolve({ kind: 'found', meta: annotated });
    expect(await got).toEqual(annotated);
    expect(t.counted).toEqual([['recent', 'opted-in']]);
  });

  it('counts a live read that confirms the cache', async () => {
    const t = lookupWith({ 'team-a': { meta: plain, changedAt: NOW - 15 } });
    const got = t.lookup('team-a');
    await tick();
    t.pending[0]!.resolve({ kind: 'found', meta: plain });
    expect(await got).toEqual(plain);
    expect(t.counted).toEqual([['recent', 'not-opted-in']]);
  });

  it('reads a namespace the cache has not seen, and has no answer when the read fails', async () => {
    const t = lookupWith({});
    const got = t.lookup('team-b');
    await tick();
    t.pending[0]!.resolve({ kind: 'error', error: 'connection refused' });
    expect(await got).toBeUndefined();
    expect(t.counted).toEqual([['unseen', 'error']]);
  });

  it('falls back to the cached answer, with a warning, when the live read fails', async () => {
    const t = lookupWith({ 'team-a': { meta: plain, changedAt: NOW - 15 } });
    const got = t.lookup('team-a');
    await tick();
    t.pending[0]!.resolve({ kind: 'error', error: 'etcdserver: request timed out' });
    expect(await got).toEqual(plain);
    expect(t.counted).toEqual([['recent', 'error']]);
    expect(t.warnings).toEqual([expect.stringMatching(/^warn: .*cached/)]);
  });

  it('falls back to the cached answer when the namespace is not found live', async () => {
    const t = lookupWith({ 'team-a': { meta: plain, changedAt: NOW - 15 } });
    const got = t.lookup('team-a');
    await tick();
    t.pending[0]!.resolve({ kind: 'not-found' });
    expect(await got).toEqual(plain);
    expect(t.counted).toEqual([['recent', 'not-found']]);
  });

  it('gives up on a live read that does not answer within the timeout and decides on the cached answer', async () => {
    const t = lookupWith({ 'team-a': { meta: plain, changedAt: NOW - 15 } }, 50);
    const started = performance.now();
    expect(await t.lookup('team-a')).toEqual(plain);
    const took = performance.now() - started;
    expect(took).toBeGreaterThanOrEqual(45);
    expect(took).toBeLessThan(1_000);
    expect(t.counted).toEqual([['recent', 'timeout']]);
    expect(t.warnings).toEqual([expect.stringMatching(/^warn: /)]);
  });

  it('shares one read among the admissions that arrive while it is under way, with no read started before an admission arrived', async () => {
    const t = lookupWith({ 'team-a': { meta: plain, changedAt: NOW - 15 } });
    const first = t.lookup('team-a');
    await tick();
    expect(t.reads()).toBe(1);
    // These arrive after the first read went out: it may predate their annotation.
    const later = [t.lookup('team-a'), t.lookup('team-a'), t.lookup('team-a')];
    await tick();
    expect(t.reads()).toBe(1);
    t.pending[0]!.resolve({ kind: 'found', meta: plain });
    expect(await first).toEqual(plain);
    await tick();
    expect(t.reads()).toBe(2);
    t.pending[1]!.resolve({ kind: 'found', meta: annotated });
    expect(await Promise.all(later)).toEqual([annotated, annotated, annotated]);
    // Nothing under way any more: the next admission starts its own read.
    const next = t.lookup('team-a');
    await tick();
    expect(t.reads()).toBe(3);
    t.pending[2]!.resolve({ kind: 'found', meta: annotated });
    expect(await next).toEqual(annotated);
  });

  it('reads different namespaces independently', async () => {
    const t = lookupWith({ a: { meta: { ...plain, name: 'a' }, changedAt: NOW - 15 }, b: { meta: { ...plain, name: 'b' }, changedAt: NOW - 15 } });
    const got = [t.lookup('a'), t.lookup('b')];
    await tick();
    expect(t.pending.map((p) => p.name)).toEqual(['a', 'b']);
    for (const p of t.pending) p.resolve({ kind: 'found', meta: { ...annotated, name: p.name } });
    expect((await Promise.all(got)).map((m) => m?.name)).toEqual(['a', 'b']);
  });
});

describe('reads of namespaces the cache has not seen, as forged reviews would ask for', () => {
  function throttled(clock: { t: number }) {
    const fake = fakeCache({});
    const counted: Array<[LiveReadTrigger, LiveReadResult]> = [];
    const warnings: string[] = [];
    const lookup = namespaceLookup(fake.cache, {
      optedIn: isIn,
      now: () => clock.t,
      onLiveRead: (t, r) => counted.push([t, r]),
      log: (level, msg) => warnings.push(`${level}: ${msg}`),
      unseenReadsPerSecond: 10,
      unseenReadBurst: 20,
    });
    return { ...fake, lookup, counted, warnings };
  }

  it('reads at most the burst at once, then the rate, and answers the rest at once with no namespace', async () => {
    const clock = { t: NOW };
    const t = throttled(clock);
    const got = Array.from({ length: 100 }, (_, i) => t.lookup(`forged-${i}`));
    await tick();
    expect(t.reads()).toBe(20);
    for (const p of t.pending) p.resolve({ kind: 'not-found' });
    expect((await Promise.all(got)).every((m) => m === undefined)).toBe(true);
    expect(t.counted.filter(([, r]) => r === 'throttled')).toHaveLength(80);
    // One warning for the whole burst, not one a review.
    expect(t.warnings.filter((w) => /too many reads/.test(w))).toHaveLength(1);
    clock.t += 1_000;
    const more = Array.from({ length: 30 }, (_, i) => t.lookup(`later-${i}`));
    await tick();
    expect(t.reads()).toBe(30);
    for (const p of t.pending.slice(20)) p.resolve({ kind: 'not-found' });
    await Promise.all(more);
  });

  it('remembers a name found absent, so the same forged name costs one read', async () => {
    const clock = { t: NOW };
    const t = throttled(clock);
    const first = t.lookup('nowhere');
    await tick();
    t.pending[0]!.resolve({ kind: 'not-found' });
    expect(await first).toBeUndefined();
    for (let i = 0; i < 50; i++) expect(await t.lookup('nowhere')).toBeUndefined();
    expect(t.reads()).toBe(1);
    // After the window it is read again: a namespace created since is found.
    clock.t += 10_000;
    const again = t.lookup('nowhere');
    await tick();
    expect(t.reads()).toBe(2);
    t.pending[1]!.resolve({ kind: 'found', meta: { ...annotated, name: 'nowhere' } });
    expect((await again)?.name).toBe('nowhere');
  });
});
