import { CoordinationV1Api, HttpMethod, KubeConfig, RequestContext, type ConfigurationOptions, type V1Lease } from '@kubernetes/client-node';
import fc from 'fast-check';
import { once } from 'node:events';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { LeaderElector, type LeaderOptions, type LeaseApi } from '../leader.ts';
import { checkTimings, leaseAction, observe, type LeaseView } from '../lease.ts';

// client-go's defaults; the clock is fake, so real durations cost nothing.
const TIMINGS = { leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000 };

describe('lease decisions', () => {
  const lease = (holder: string | undefined, renewTime: string, rv: string): LeaseView => ({ holder, renewTime, resourceVersion: rv, durationSeconds: 15 });

  it('takes a missing or free lease and renews its own', () => {
    const o = observe(undefined, undefined, 0);
    expect(leaseAction(undefined, o, 'a', 0, 15_000)).toBe('acquire');
    expect(leaseAction(lease(undefined, 't', '1'), o, 'a', 0, 15_000)).toBe('acquire');
    expect(leaseAction(lease('a', 't', '1'), o, 'a', 0, 15_000)).toBe('renew');
  });

  it("judges a holder by when this candidate last saw the lease change, never by the holder's renewTime", () => {
    // renewTime says "an hour ago" by this replica's wall clock, but the lease has just changed.
    const l = lease('b', '2020-01-01T00:00:00.000000Z', '7');
    const o = observe(undefined, l, 1_000);
    expect(leaseAction(l, o, 'a', 1_000, 15_000)).toBe('follow');
    expect(leaseAction(l, observe(o, l, 15_999), 'a', 15_999, 15_000)).toBe('follow');
    expect(leaseAction(l, observe(o, l, 16_000), 'a', 16_000, 15_000)).toBe('acquire');
    // A renewal (new renewTime, new resourceVersion) starts the wait over.
    const renewed = lease('b', '2020-01-01T00:00:02.000000Z', '8');
    const o2 = observe(o, renewed, 15_000);
    expect(o2.at).toBe(15_000);
    expect(leaseAction(renewed, o2, 'a', 29_999, 15_000)).toBe('follow');
    // A new resourceVersion alone is a change too.
    expect(observe(o, lease('b', '2020-01-01T00:00:00.000000Z', '9'), 20_000).at).toBe(20_000);
  });

  it('waits the longer of its own lease duration and the one the holder wrote', () => {
    const l = { ...lease('b', 't', '1'), durationSeconds: 40 };
    const o = observe(undefined, l, 0);
    expect(leaseAction(l, o, 'a', 39_999, 15_000)).toBe('follow');
    expect(leaseAction(l, o, 'a', 40_000, 15_000)).toBe('acquire');
  });

  it("refuses timings that could let a leader outlive its lease (client-go's checks)", () => {
    expect(() => checkTimings(TIMINGS)).not.toThrow();
    expect(() => checkTimings({ ...TIMINGS, renewDeadlineMs: 15_000 })).toThrow(/greater than renewDeadlineMs/);
    expect(() => checkTimings({ ...TIMINGS, renewDeadlineMs: 16_000 })).toThrow(/greater than renewDeadlineMs/);
    expect(() => checkTimings({ ...TIMINGS, retryPeriodMs: 9_000 })).toThrow(/1\.2 × retryPeriodMs/);
    expect(() => checkTimings({ ...TIMINGS, renewDeadlineMs: 2_400 })).toThrow(/1\.2 × retryPeriodMs/);
    expect(() => checkTimings({ ...TIMINGS, retryPeriodMs: 0 })).toThrow(/positive/);
    expect(() => checkTimings({ ...TIMINGS, leaseDurationMs: Number.NaN })).toThrow(/positive/);
  });
});

/** A running elector: isLeader() as it says, stop() aborts its run and waits for it. */
interface Leader {
  isLeader(): boolean;
  stop(): Promise<void>;
}

function startLeader(api: LeaseApi, opts: LeaderOptions): Leader {
  const elector = new LeaderElector(api, opts);
  const ac = new AbortController();
  const running = elector.run(ac.signal);
  return {
    isLeader: () => elector.isLeader(),
    stop: () => {
      ac.abort();
      return running;
    },
  };
}

type Mode = 'ok' | 'down' | 'hang' | { slowMs: number };

/** An API server's optimistic concurrency for one Lease, with each candidate's own connection to it. */
class FakeLeases {
  lease: V1Lease | undefined;
  private rv = 0;
  /** Every write, with the fake time it was stored. */
  readonly writes: { at: number; holder: string | undefined; by: string }[] = [];

  read(): V1Lease {
    if (!this.lease) throw Object.assign(new Error('not found'), { code: 404 });
    return structuredClone(this.lease);
  }
  create(body: V1Lease, by: string): V1Lease {
    if (this.lease) throw Object.assign(new Error('exists'), { code: 409 });
    return this.store(body, by);
  }
  replace(body: V1Lease, by: string): V1Lease {
    if (body.metadata?.resourceVersion !== this.lease?.metadata?.resourceVersion) throw Object.assign(new Error('conflict'), { code: 409 });
    return this.store(body, by);
  }
  private store(b: V1Lease, by: string): V1Lease {
    this.lease = { ...structuredClone(b), metadata: { ...b.metadata, resourceVersion: String(++this.rv) } };
    this.writes.push({ at: Date.now(), holder: b.spec?.holderIdentity, by });
    return structuredClone(this.lease);
  }

  /**
   * One candidate's client. 'hang' never answers and ignores aborts; 'slow'
   * reaches the server (and commits) only after a delay, even if the caller
   * has given up by then, as a request already on the wire does.
   */
  client(by: string, mode: { value: Mode }, signals: AbortSignal[] = []): LeaseApi {
    const call = async <T>(options: ConfigurationOptions | undefined, f: () => T): Promise<T> => {
      // Run the caller's middleware as client-node would, to see the signal it sets.
      const ctx = new RequestContext('https://api.invalid/', HttpMethod.GET);
      for (const m of options?.middleware ?? []) await m.pre(ctx).toPromise();
      const s = ctx.getSignal();
      if (s) signals.push(s);
      const m = mode.value;
      if (m === 'down') throw new Error('connection refused');
      if (m === 'hang') return new Promise<T>(() => {});
      if (m !== 'ok') await new Promise((r) => setTimeout(r, m.slowMs));
      return f();
    };
    return {
      readNamespacedLease: (_p: unknown, o?: ConfigurationOptions) => call(o, () => this.read()),
      createNamespacedLease: (p: { body: V1Lease }, o?: ConfigurationOptions) => call(o, () => this.create(p.body, by)),
      replaceNamespacedLease: (p: { body: V1Lease }, o?: ConfigurationOptions) => call(o, () => this.replace(p.body, by)),
    } as LeaseApi;
  }
}

/** Who acts as leader: from onStartedLeading until its signal is aborted. */
class Stage {
  readonly acting = new Set<string>();
  readonly timeline: { at: number; event: string }[] = [];
  violations: string[] = [];

  note(event: string): void {
    this.timeline.push({ at: Date.now(), event });
  }
  events(): string[] {
    return this.timeline.map((t) => t.event);
  }
  at(event: string): number {
    const t = this.timeline.find((x) => x.event === event);
    if (!t) throw new Error(`no ${event} in ${this.events().join(' ')}`);
    return t.at;
  }
}

interface Candidate {
  leader: Leader;
  mode: { value: Mode };
  signals: AbortSignal[];
}

function candidate(api: FakeLeases, stage: Stage, identity: string, extra: Partial<LeaderOptions> = {}): Candidate {
  const mode: { value: Mode } = { value: 'ok' };
  const signals: AbortSignal[] = [];
  const leader = startLeader(api.client(identity, mode, signals), {
    namespace: 'jh',
    name: 'jobharvest-harvester',
    identity,
    ...TIMINGS,
    now: () => Date.now(),
    onStartedLeading: (signal) => {
      stage.note(`${identity}+`);
      if (stage.acting.size > 0) stage.violations.push(`${identity} started leading at ${Date.now()} while ${[...stage.acting].join(',')} still acted`);
      stage.acting.add(identity);
      signal.addEventListener('abort', () => stage.acting.delete(identity), { once: true });
    },
    onStoppedLeading: () => stage.note(`${identity}-`),
    ...extra,
  });
  return { leader, mode, signals };
}

/** Advances the fake clock in small steps, checking at each that at most one candidate leads. */
async function run(ms: number, stage: Stage, cs: Candidate[], step = 100): Promise<void> {
  for (let t = 0; t < ms; t += step) {
    await vi.advanceTimersByTimeAsync(step);
    const leaders = cs.filter((c) => c.leader.isLeader()).length;
    if (leaders > 1) stage.violations.push(`${leaders} leaders at ${Date.now()}`);
    if (stage.acting.size > 1) stage.violations.push(`${[...stage.acting].join(',')} acting at ${Date.now()}`);
  }
}

describe('leader election', () => {
  beforeEach(() => {
    vi.useFakeTimers({ now: 1_000_000 });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('throws at start unless leaseDuration > renewDeadline > 1.2 × retryPeriod', () => {
    const api = new FakeLeases();
    const stage = new Stage();
    expect(() => candidate(api, stage, 'a', { renewDeadlineMs: 15_000 })).toThrow(/renewDeadlineMs/);
    expect(() => candidate(api, stage, 'a', { retryPeriodMs: 8_500 })).toThrow(/retryPeriodMs/);
    expect(api.writes).toHaveLength(0);
  });

  it('of two candidates racing for a free lease, exactly one leads', async () => {
    const api = new FakeLeases();
    const stage = new Stage();
    const cs = [candidate(api, stage, 'a'), candidate(api, stage, 'b')];
    await run(30_000, stage, cs);
    expect(cs.filter((c) => c.leader.isLeader())).toHaveLength(1);
    expect(stage.events()).toHaveLength(1);
    expect(stage.violations).toEqual([]);
    await Promise.all(cs.map((c) => c.leader.stop()));
  });

  it("a replica whose clock runs 20 s ahead does not take a lease renewed a second ago", async () => {
    const api = new FakeLeases();
    const stage = new Stage();
    const a = candidate(api, stage, 'a');
    await run(5_000, stage, [a]);
    expect(a.leader.isLeader()).toBe(true);
    const ahead = () => Date.now() + 20_000;
    const b = candidate(api, stage, 'b', { now: ahead, wallClock: ahead });
    // And one whose clock runs 20 s behind, so the holder's renewTime is in its future.
    const behind = () => Date.now() - 20_000;
    const c = candidate(api, stage, 'c', { now: behind, wallClock: behind });
    await run(120_000, stage, [a, b, c]);
    expect(a.leader.isLeader()).toBe(true);
    expect(stage.events()).toEqual(['a+']);
    expect(api.lease?.spec?.holderIdentity).toBe('a');
    expect(stage.violations).toEqual([]);
    await Promise.all([a, b, c].map((x) => x.leader.stop()));
  });

  it('a leader whose calls hang steps down within the renew deadline; a follower takes over only after a lease duration without change', async () => {
    const api = new FakeLeases();
    const stage = new Stage();
    const a = candidate(api, stage, 'a');
    await run(3_000, stage, [a]);
    const b = candidate(api, stage, 'b');
    await run(20_000, stage, [a, b]);
    expect(a.leader.isLeader()).toBe(true);
    a.mode.value = 'hang';
    const hungFrom = a.signals.length;
    await run(40_000, stage, [a, b]);
    expect(stage.events()).toEqual(['a+', 'a-', 'b+']);
    expect(b.leader.isLeader()).toBe(true);
    expect(a.leader.isLeader()).toBe(false);
    const lastByA = api.writes.filter((w) => w.by === 'a').at(-1)!.at;
    expect(stage.at('a-') - lastByA).toBeLessThanOrEqual(TIMINGS.renewDeadlineMs);
    expect(stage.at('b+') - lastByA).toBeGreaterThanOrEqual(TIMINGS.leaseDurationMs);
    // Every hung call was cut off through its signal.
    const hung = a.signals.slice(hungFrom);
    expect(hung.length).toBeGreaterThan(1);
    // (but the latest, which may still be waiting for its time limit).
    expect(hung.slice(0, -1).every((s) => s.aborted)).toBe(true);
    expect(stage.violations).toEqual([]);
    a.mode.value = 'ok';
    await Promise.all([a, b].map((x) => x.leader.stop()));
  });

  it('losing the API server aborts the signal within the renew deadline of the last renewal', async () => {
    const api = new FakeLeases();
    const stage = new Stage();
    let abortedAt = 0;
    const a = candidate(api, stage, 'a', {
      onStartedLeading: (s) => s.addEventListener('abort', () => (abortedAt = Date.now())),
      onStoppedLeading: () => {},
    });
    await run(7_000, stage, [a]);
    a.mode.value = 'down';
    const lastByA = api.writes.at(-1)!.at;
    await run(15_000, stage, [a], 10);
    expect(abortedAt).toBeGreaterThan(lastByA);
    expect(abortedAt - lastByA).toBeLessThanOrEqual(TIMINGS.renewDeadlineMs);
    await a.leader.stop();
  });

  it('checks the renew deadline every round: after a stall past it, steps down before renewing, though renewing would succeed', async () => {
    const api = new FakeLeases();
    const stage = new Stage();
    const frozen = { ms: 0 };
    const a = candidate(api, stage, 'a', { now: () => Date.now() + frozen.ms });
    await run(5_000, stage, [a]);
    expect(a.leader.isLeader()).toBe(true);
    // The process was frozen (a long GC pause, a stopped container): its
    // monotonic clock moved on while no timer ran.
    frozen.ms = TIMINGS.renewDeadlineMs + 1_000;
    expect(a.leader.isLeader()).toBe(false);
    await run(TIMINGS.retryPeriodMs, stage, [a]);
    // It stepped down, then led again on a fresh renewal, as the lease was still its own.
    expect(stage.events()).toEqual(['a+', 'a-', 'a+']);
    expect(a.leader.isLeader()).toBe(true);
    await a.leader.stop();
  });

  it('steps down on the next round when another replica holds the lease', async () => {
    const api = new FakeLeases();
    const stage = new Stage();
    const a = candidate(api, stage, 'a');
    await run(5_000, stage, [a]);
    // Someone (an operator, a replica with a different view) wrote the lease.
    api.replace({ ...api.lease!, spec: { ...api.lease!.spec, holderIdentity: 'x' } }, 'x');
    const taken = Date.now();
    await run(TIMINGS.retryPeriodMs + 100, stage, [a]);
    expect(stage.events()).toEqual(['a+', 'a-']);
    expect(stage.at('a-') - taken).toBeLessThanOrEqual(TIMINGS.retryPeriodMs);
    expect(a.leader.isLeader()).toBe(false);
    await a.leader.stop();
    expect(api.lease?.spec?.holderIdentity).toBe('x');
  });

  it('stop() aborts the work, waits for it while still renewing, and only then releases the lease', async () => {
    const api = new FakeLeases();
    const stage = new Stage();
    let holderWhenWorkEnded: string | undefined = 'unset';
    let workEnded = 0;
    const a = candidate(api, stage, 'a', {
      onStartedLeading: async (signal) => {
        stage.note('a+');
        await new Promise<void>((r) => signal.addEventListener('abort', () => r(), { once: true }));
        // Winding down takes longer than the renew deadline.
        await new Promise((r) => setTimeout(r, 12_000));
        holderWhenWorkEnded = api.lease?.spec?.holderIdentity;
        workEnded = Date.now();
      },
    });
    await run(5_000, stage, [a]);
    const b = candidate(api, stage, 'b');
    await run(5_000, stage, [b]);
    expect(a.leader.isLeader()).toBe(true);
    let stopped = 0;
    const stopAt = Date.now();
    const stopping = a.leader.stop().then(() => (stopped = Date.now()));
    await run(11_000, stage, [a, b]);
    expect(stopped).toBe(0);
    expect(a.leader.isLeader()).toBe(false);
    expect(stage.events()).toEqual(['a+', 'a-']);
    await run(4_000, stage, [a, b]);
    await stopping;
    expect(workEnded - stopAt).toBe(12_000);
    expect(holderWhenWorkEnded).toBe('a');
    expect(stopped).toBeGreaterThanOrEqual(workEnded);
    // It kept renewing while the work wound down, so b did not take over
    // early, then released the lease, which b took on its next round.
    expect(api.writes.filter((w) => w.by === 'a' && w.at > stopAt && w.at < workEnded && w.holder === 'a').length).toBeGreaterThan(3);
    const release = api.writes.findIndex((w) => w.by === 'a' && w.holder === undefined);
    expect(api.writes[release]!.at).toBeGreaterThanOrEqual(workEnded);
    expect(api.writes.slice(release + 1).every((w) => w.by === 'b')).toBe(true);
    expect(stage.events()).toEqual(['a+', 'a-', 'b+']);
    expect(stage.at('b+') - workEnded).toBeLessThanOrEqual(TIMINGS.retryPeriodMs);
    expect(b.leader.isLeader()).toBe(true);
    expect(stage.violations).toEqual([]);
    await b.leader.stop();
  });

  it('does not lead again until the work of its last term has ended', async () => {
    const api = new FakeLeases();
    const stage = new Stage();
    let terms = 0;
    let running = 0;
    let overlapped = false;
    const a = candidate(api, stage, 'a', {
      onStartedLeading: async (signal) => {
        terms++;
        if (++running > 1) overlapped = true;
        await new Promise<void>((r) => signal.addEventListener('abort', () => r(), { once: true }));
        await new Promise((r) => setTimeout(r, 20_000));
        running--;
      },
    });
    await run(5_000, stage, [a]);
    a.mode.value = 'down';
    await run(11_000, stage, [a]);
    expect(a.leader.isLeader()).toBe(false);
    // The lease still names a, so it could renew at once; it waits for the old work.
    a.mode.value = 'ok';
    await run(5_000, stage, [a]);
    expect(terms).toBe(1);
    await run(20_000, stage, [a]);
    expect(terms).toBe(2);
    expect(overlapped).toBe(false);
    await run(100, stage, [a]);
    const s = a.leader.stop();
    await run(21_000, stage, [a]);
    await s;
  });

  it('a stop() called from onStartedLeading still waits for that work', async () => {
    const api = new FakeLeases();
    const stage = new Stage();
    let ended = false;
    let stopped: Promise<void> | undefined;
    let leader: Leader | undefined = undefined;
    const a = candidate(api, stage, 'a', {
      onStartedLeading: async (signal) => {
        stopped = leader!.stop();
        await new Promise((r) => setTimeout(r, 3_000));
        ended = signal.aborted;
      },
    });
    leader = a.leader;
    await run(500, stage, [a]);
    expect(stopped).toBeDefined();
    let done = false;
    void stopped!.then(() => (done = true));
    await run(2_000, stage, [a]);
    expect(done).toBe(false);
    expect(api.lease?.spec?.holderIdentity).toBe('a');
    await run(1_000, stage, [a]);
    expect(ended).toBe(true);
    expect(done).toBe(true);
    expect(api.lease?.spec?.holderIdentity).toBeUndefined();
  });

  it('never lets two candidates act at once, whatever their connections do', async () => {
    const mode = fc.oneof(
      { weight: 3, arbitrary: fc.constant<Mode>('ok') },
      fc.constant<Mode>('down'),
      fc.constant<Mode>('hang'),
      fc.integer({ min: 100, max: 12_000 }).map((slowMs): Mode => ({ slowMs })),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(fc.tuple(fc.integer({ min: 0, max: 2 }), mode, fc.integer({ min: 500, max: 20_000 })), { minLength: 1, maxLength: 12 }), async (script) => {
        const api = new FakeLeases();
        const stage = new Stage();
        const cs = ['a', 'b', 'c'].map((id) => candidate(api, stage, id));
        for (const [who, m, ms] of script) {
          cs[who]!.mode.value = m;
          await run(ms, stage, cs, 250);
        }
        for (const c of cs) c.mode.value = 'ok';
        await run(40_000, stage, cs, 250);
        expect(stage.violations).toEqual([]);
        // With every connection healthy again, someone leads.
        expect(cs.filter((c) => c.leader.isLeader())).toHaveLength(1);
        const stops = Promise.all(cs.map((c) => c.leader.stop()));
        await run(30_000, stage, cs, 1000);
        await stops;
      }),
      { numRuns: 15 },
    );
  });
});

describe('leader election against client-node', () => {
  it("cuts off a hung request through client-node's own HTTP call, not only by ceasing to wait", async () => {
    const requests: IncomingMessage[] = [];
    const closed: string[] = [];
    // An API server that accepts requests and never answers.
    const server = createServer((req) => {
      requests.push(req);
      req.socket.once('close', () => closed.push(req.url ?? ''));
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: 'c', server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, skipTLSVerify: true }],
      users: [{ name: 'u' }],
      contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
      currentContext: 'x',
    });
    const leader = startLeader(kc.makeApiClient(CoordinationV1Api), {
      namespace: 'jh',
      name: 'jobharvest-harvester',
      identity: 'a',
      leaseDurationMs: 1_500,
      renewDeadlineMs: 1_000,
      retryPeriodMs: 200,
      onStartedLeading: () => {},
      onStoppedLeading: () => {},
    });
    try {
      await new Promise((r) => setTimeout(r, 700));
      expect(requests.length).toBeGreaterThan(1);
      expect(requests[0]!.url).toBe('/apis/coordination.k8s.io/v1/namespaces/jh/leases/jobharvest-harvester');
      await leader.stop();
      // Each request was aborted by the client: at its time limit, and the last one by stop().
      await vi.waitFor(() => expect(closed).toHaveLength(requests.length), { timeout: 5_000 });
    } finally {
      await leader.stop();
      server.closeAllConnections();
      server.close();
    }
  });
});
