// api mode against a fake Kubernetes API (fake-kube.ts) and a fake NDJSON
// server: discovery of containers and restarts from the pod watch, resume
// after a cut and after a sidecar restart, done only after termination, and
// the service-account token read again when it rotates.
import { cp, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { KubeClient } from '../sources/api/kube-client.ts';
import { sinceTimeOf } from '../sources/api/run-reader.ts';
import { CHECKPOINT_FILE } from '../delivery/checkpoint.ts';
import { ConfigError, loadConfig } from '../config.ts';
import { log } from '../log.ts';
import { Pipeline } from '../pipeline.ts';
import { SidecarPipeline } from '../run.ts';
import { decodeTermination } from '../termination.ts';
import { FakeKube, type LogLine } from '../../test/support/fake-kube.ts';
import { NdjsonReceiver, type Doc } from '../../test/support/ndjson-receiver.ts';
import { testConfig, tmpDir, waitUntil } from '../../test/support/sidecar-helpers.ts';

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const BASE_SEC = Date.UTC(2024, 2, 4, 5, 6, 7) / 1000;

/** RFC3339Nano as Go prints it: trailing zeros of the fraction dropped. */
function kubeTs(sec: number, nanos: number): string {
  const iso = new Date(sec * 1000).toISOString().slice(0, 19);
  const frac = String(nanos).padStart(9, '0').replace(/0+$/, '');
  return `${iso}${frac ? '.' + frac : ''}Z`;
}

/** Lines `<prefix> i` for i in [from, to); every `group` consecutive lines share a timestamp, four timestamps a second. */
function lines(prefix: string, from: number, to: number, group = 1): LogLine[] {
  const out: LogLine[] = [];
  for (let i = from; i < to; i++) {
    const g = Math.floor(i / group);
    out.push({ ts: kubeTs(BASE_SEC + Math.floor(g / 4), (g % 4) * 250_000_000), msg: `${prefix} ${i}` });
  }
  return out;
}
const names = (prefix: string, from: number, to: number) => Array.from({ length: to - from }, (_, k) => `${prefix} ${from + k}`);
/** Line number from the id (`<prefix>-<line>`): batches in flight together may be stored in any order. */
const lineOf = (d: Doc) => Number(d.id.slice(d.id.lastIndexOf('-') + 1));
const messages = (docs: Doc[]) => [...docs].sort((a, b) => lineOf(a) - lineOf(b)).map((d) => d.message);

/** The kubelet creates the termination message file before the container starts; the sidecar only writes into it. */
async function emptyTerminationLog(): Promise<string> {
  const file = path.join(await tmpDir(), 'termination-log');
  await writeFile(file, '');
  return file;
}

async function setup(containers: ConstructorParameters<typeof FakeKube>[0], env: Record<string, string> = {}) {
  const kube = await new FakeKube(containers).start();
  cleanups.push(() => kube.stop());
  const sink = await new NdjsonReceiver().start();
  cleanups.push(() => sink.stop());
  const stateDir = path.join(await tmpDir(), 'state');
  const config = (over: Record<string, string> = {}) =>
    testConfig({
      JOBHARVEST_MODE: 'api',
      JOBHARVEST_KUBE_API_URL: kube.url,
      JOBHARVEST_KUBE_TOKEN_DIR: kube.tokenDir,
      JOBHARVEST_SINK: 'http',
      JOBHARVEST_ENDPOINT: sink.url,
      JOBHARVEST_STATE_DIR: stateDir,
      JOBHARVEST_BATCH_MAX_WAIT_MS: '30',
      JOBHARVEST_BATCH_MAX_RECORDS: '50',
      JOBHARVEST_DRAIN_SECONDS: '10',
      ...env,
      ...over,
    });
  const start = async (over: Record<string, string> = {}) => {
    const p = new SidecarPipeline(config(over));
    await p.start();
    cleanups.push(async () => {
      await p.drain();
    });
    return p;
  };
  const checkpoint = async (dir = stateDir) =>
    (JSON.parse(await readFile(path.join(dir, CHECKPOINT_FILE), 'utf8')) as { files: Record<string, { offset: number; done: boolean; ts?: string; n?: number }> }).files;
  const of = (docs: Doc[], container: string, restart: number) =>
    messages(docs.filter((d) => d['k8s.container.name'] === container && d['k8s.container.restart_count'] === restart));
  return { kube, sink, stateDir, start, checkpoint, of };
}

describe('api mode: discovery from the pod watch', () => {
  it('reads init and regular containers and every restart, never its own container, with metadata and unique ids', async () => {
    const t = await setup({ init: ['setup'], main: ['main', 'helper'] });
    const p = await t.start();
    await waitUntil(() => t.kube.watchRequests > 0, 'the pod watch');

    t.kube.run('setup', 0);
    t.kube.append('setup', 0, lines('setup', 0, 30));
    t.kube.terminate('setup');
    t.kube.run('main', 0);
    t.kube.run('helper', 0);
    t.kube.append('main', 0, lines('main-a', 0, 120, 3));
    t.kube.append('helper', 0, lines('helper', 0, 40));
    await waitUntil(() => t.of(t.sink.accepted, 'main', 0).length >= 120, 'first run of main');
    // main fails and is restarted: the new run shows up through the watch.
    t.kube.terminate('main', 1);
    t.kube.run('main', 1);
    t.kube.append('main', 1, lines('main-b', 0, 80));
    t.kube.append('helper', 0, lines('helper', 40, 60));
    t.kube.terminate('main');
    t.kube.terminate('helper');
    await waitUntil(() => t.sink.accepted.length >= 30 + 120 + 80 + 60, 'all lines');
    const summary = await p.drain();

    expect(t.of(t.sink.accepted, 'setup', 0)).toEqual(names('setup', 0, 30));
    expect(t.of(t.sink.accepted, 'main', 0)).toEqual(names('main-a', 0, 120));
    expect(t.of(t.sink.accepted, 'main', 1)).toEqual(names('main-b', 0, 80));
    expect(t.of(t.sink.accepted, 'helper', 0)).toEqual(names('helper', 0, 60));
    expect(t.sink.accepted).toHaveLength(290);
    expect(new Set(t.sink.accepted.map((d) => d.id)).size).toBe(290);
    expect(t.kube.logRequests.some((q) => q.container === 'jobharvest')).toBe(false);
    const first = t.sink.accepted.find((d) => d.message === 'main-a 4')!;
    expect(first).toMatchObject({ '@timestamp': kubeTs(BASE_SEC, 250_000_000), stream: 'unknown', 'k8s.pod.uid': 'uid-1', 'k8s.namespace.name': 'team-a', 'k8s.job.name': 'job-abc' });
    expect(summary).toMatchObject({ lines_read: 290, lines_shipped: 290, lines_unsent: 0, deadline_hit: false });
    const files = await t.checkpoint();
    expect(Object.keys(files).sort()).toEqual(['helper/0/api', 'main/0/api', 'main/1/api', 'setup/0/api']);
    expect(Object.values(files).every((f) => f.done)).toBe(true);
    expect(files['main/0/api']).toMatchObject({ offset: 120, ts: kubeTs(BASE_SEC + 9, 750_000_000), n: 3 });
  });

  it('reads a run that ended before it looked with previous=true, and reports older runs as lost', async () => {
    const t = await setup({ main: ['main', 'other'] });
    // Before the sidecar starts: main ran three times (runs 0, 1 and now 2); other ran twice (runs 0 and 1).
    for (const r of [0, 1]) {
      t.kube.run('main', r);
      t.kube.append('main', r, lines(`main-${r}`, 0, 10));
      t.kube.terminate('main', 1);
    }
    t.kube.run('main', 2);
    t.kube.append('main', 2, lines('main-2', 0, 10));
    t.kube.run('other', 0);
    t.kube.append('other', 0, lines('other-0', 0, 10));
    t.kube.terminate('other', 1);
    t.kube.run('other', 1);
    t.kube.append('other', 1, lines('other-1', 0, 10));
    const p = await t.start();
    await waitUntil(() => t.sink.accepted.length >= 30, 'runs 1 and 2 of main, both runs of other');
    t.kube.terminate('main');
    t.kube.terminate('other');
    await p.drain();
    expect(t.of(t.sink.accepted, 'main', 0)).toEqual([]);
    expect(t.of(t.sink.accepted, 'main', 1)).toEqual(names('main-1', 0, 10));
    expect(t.of(t.sink.accepted, 'main', 2)).toEqual(names('main-2', 0, 10));
    expect(t.of(t.sink.accepted, 'other', 0)).toEqual(names('other-0', 0, 10));
    expect(t.of(t.sink.accepted, 'other', 1)).toEqual(names('other-1', 0, 10));
    // Runs 1 of main and 0 of other are only served with previous=true.
    expect(t.kube.logRequests.filter((q) => q.previous).map((q) => `${q.container}/${q.run}`).sort()).toContain('main/1');
    expect(t.kube.logRequests.filter((q) => q.previous).map((q) => `${q.container}/${q.run}`)).toContain('other/0');
    expect(t.kube.logRequests.every((q) => q.run !== 0 || q.container !== 'main')).toBe(true);
  });
});

describe('api mode: resuming', () => {
  it('reconnects after cuts from the second of the last line, skipping what it had: nothing lost, nothing twice', async () => {
    const t = await setup({ main: ['main'] });
    let n = 0;
    // Cuts land inside runs of lines that share one timestamp (groups of 4).
    t.kube.onLog = (q) => (q.container === 'main' && ++n <= 3 ? { cutAfterLines: [26, 37, 50][n - 1] } : undefined);
    t.kube.run('main', 0);
    t.kube.append('main', 0, lines('main', 0, 400, 4));
    const p = await t.start();
    await waitUntil(() => t.sink.accepted.length >= 400, 'lines after three cuts');
    t.kube.terminate('main');
    const summary = await p.drain();
    expect(messages(t.sink.accepted)).toEqual(names('main', 0, 400));
    expect(summary.lines_read).toBe(400);
    const reqs = t.kube.logRequests.filter((q) => q.container === 'main');
    expect(reqs[0]!.sinceTime).toBeUndefined();
    // After 26 lines (line 25 is in group 6, i.e. second 1) the next request starts at that second.
    expect(reqs[1]!.sinceTime).toBe(sinceTimeOf(BASE_SEC + 1));
    expect(reqs.length).toBeGreaterThanOrEqual(4);
    expect(new Set(t.sink.accepted.map((d) => d.id)).size).toBe(400);
  });

  it('a restarted sidecar resumes from the checkpoint: nothing lost, at most the unacknowledged batch again, with the same ids', async () => {
    const t = await setup({ main: ['main'] }, { JOBHARVEST_MAX_IN_FLIGHT: '1', JOBHARVEST_BATCH_MAX_RECORDS: '10', JOBHARVEST_BATCH_MAX_WAIT_MS: '1000' });
    // The first sidecar's server stores the 8th batch but never answers it: the sidecar dies before the ack.
    const first = await new NdjsonReceiver().start();
    cleanups.push(() => first.stop());
    first.handler = () => first.requests < 8;
    t.kube.run('main', 0);
    t.kube.append('main', 0, lines('main', 0, 200, 4));
    const p1 = await t.start({ JOBHARVEST_ENDPOINT: first.url, JOBHARVEST_DRAIN_SECONDS: '1' });
    await waitUntil(() => first.requests >= 8, 'the unanswered batch');
    await waitUntil(() => p1.stats.linesShipped === 70, 'seven batches acknowledged');
    const crashDir = path.join(await tmpDir(), 'state');
    // What a SIGKILL leaves behind: the checkpoint as last written.
    const files = await (async () => {
      for (;;) {
        const f = await t.checkpoint().catch(() => undefined);
        if (f?.['main/0/api']?.offset === 70) return f;
        await sleep(50);
      }
    })();
    // Line 69 is the second of group 17 (lines 68-71).
    expect(files['main/0/api']).toEqual({ offset: 70, done: false, ts: kubeTs(BASE_SEC + 4, 250_000_000), n: 2 });
    await cp(t.stateDir, crashDir, { recursive: true });

    t.kube.append('main', 0, lines('main', 200, 260, 4));
    const p2 = await t.start({ JOBHARVEST_STATE_DIR: crashDir, JOBHARVEST_BATCH_MAX_WAIT_MS: '30' });
    await waitUntil(() => t.sink.accepted.length >= 190, 'the rest');
    t.kube.terminate('main');
    await p2.drain();

    const before = first.received;
    const after = t.sink.accepted;
    const all = new Set([...before, ...after].map((d) => d.message));
    expect([...all].sort()).toEqual(names('main', 0, 260).sort());
    const again = after.filter((d) => before.some((b) => b.message === d.message));
    expect(messages(again)).toEqual(names('main', 70, 80));
    for (const d of again) expect(d.id).toBe(before.find((b) => b.message === d.message)!.id);
    expect(messages(after)).toEqual(names('main', 70, 260));
  });
});

describe('api mode: resuming past a kubelet rotation', () => {
  /** Captures the sidecar's warnings for one test. */
  function warnings(): string[] {
    const seen: string[] = [];
    log.setWriter((line) => {
      const e = JSON.parse(line) as { level: string; msg: string };
      if (e.level === 'warn') seen.push(e.msg);
    });
    cleanups.push(async () => log.setWriter((line) => void process.stderr.write(line)));
    return seen;
  }

  /**
   * The first stream is cut after `cutAfter` lines; every request after it
   * is answered 503 until `open()` is called, so that the test decides what
   * the kubelet does while no stream is open.
   */
  async function cutAndHold(cutAfter: number) {
    const t = await setup({ main: ['main'] });
    let held = true;
    let n = 0;
    t.kube.onLog = (q) => {
      if (q.container !== 'main') return undefined;
      n++;
      if (n === 1) return { cutAfterLines: cutAfter };
      return held ? { status: 503 } : undefined;
    };
    const refused = () => n - 1;
    return { t, open: () => void (held = false), refused };
  }

  it('counts a gap when the run was rotated while its stream was cut, and warns; the outcome is incomplete, and the termination message carries the count', async () => {
    const seen = warnings();
    const { t, open, refused } = await cutAndHold(100);
    t.kube.run('main', 0);
    t.kube.append('main', 0, lines('main', 0, 150, 4));
    const terminationLog = await emptyTerminationLog();
    const p = await t.start({ JOBHARVEST_TERMINATION_LOG: terminationLog });
    await waitUntil(() => t.sink.accepted.length >= 100 && refused() >= 2, 'the cut, and a refused reconnection');
    // While no stream is open: more lines, then the kubelet rotates and the
    // runtime writes on into a new file.
    t.kube.append('main', 0, lines('main', 150, 300, 4));
    t.kube.rotate('main', 0);
    t.kube.append('main', 0, lines('main', 300, 400, 4));
    open();
    await waitUntil(() => t.sink.accepted.length >= 200, 'the lines of the new file');
    t.kube.terminate('main');
    const summary = await p.drain();
    expect(messages(t.sink.accepted)).toEqual([...names('main', 0, 100), ...names('main', 300, 400)]);
    expect({ outcome: summary.outcome, resume_gaps: summary.resume_gaps, lines_read: summary.lines_read }).toEqual({ outcome: 'incomplete', resume_gaps: 1, lines_read: 200 });
    expect(seen.filter((m) => m.startsWith('resumed a container log past a rotation'))).toHaveLength(1);
    expect(p.stats.resumeGaps).toBe(1);
    expect(decodeTermination(await readFile(terminationLog, 'utf8'))).toMatchObject({ state: 'incomplete', resume_gaps: 1 });
  });

  it('counts a gap when the run was rotated during the cut and ended with nothing in the new file', async () => {
    const { t, open, refused } = await cutAndHold(100);
    t.kube.run('main', 0);
    t.kube.append('main', 0, lines('main', 0, 150, 4));
    const p = await t.start();
    await waitUntil(() => t.sink.accepted.length >= 100 && refused() >= 2, 'the cut, and a refused reconnection');
    t.kube.rotate('main', 0);
    t.kube.terminate('main');
    open();
    const summary = await p.drain();
    expect(messages(t.sink.accepted)).toEqual(names('main', 0, 100));
    expect({ outcome: summary.outcome, resume_gaps: summary.resume_gaps }).toEqual({ outcome: 'incomplete', resume_gaps: 1 });
  });

  it('no gap when the kubelet rotates right after the last line and the run ends while its stream is open', async () => {
    const seen = warnings();
    const t = await setup({ main: ['main'] });
    t.kube.run('main', 0);
    t.kube.append('main', 0, lines('main', 0, 100, 4));
    const terminationLog = await emptyTerminationLog();
    const p = await t.start({ JOBHARVEST_TERMINATION_LOG: terminationLog });
    await waitUntil(() => t.sink.accepted.length >= 100, 'every line');
    // The current file is empty now; the followed stream ends with the run,
    // and the closing request (from the second of the last line) gets nothing.
    t.kube.rotate('main', 0);
    t.kube.terminate('main');
    const summary = await p.drain();
    expect(messages(t.sink.accepted)).toEqual(names('main', 0, 100));
    expect(t.kube.logRequests.filter((q) => q.container === 'main' && !q.follow).length, 'the closing request was made').toBeGreaterThan(0);
    expect({ outcome: summary.outcome, resume_gaps: summary.resume_gaps }).toEqual({ outcome: 'complete', resume_gaps: 0 });
    const message = decodeTermination(await readFile(terminationLog, 'utf8'));
    expect(message?.state).toBe('complete');
    expect(message && 'resume_gaps' in message, 'no count when there is no gap').toBe(false);
    expect(seen.filter((m) => m.startsWith('resumed a container log past a rotation'))).toEqual([]);
  });

  it('no gap when the stream ends with the run before its status says so, and the kubelet rotated after the last line', async () => {
    const seen = warnings();
    const t = await setup({ main: ['main'] });
    t.kube.run('main', 0);
    t.kube.append('main', 0, lines('main', 0, 100, 4));
    const p = await t.start();
    await waitUntil(() => t.sink.accepted.length >= 100, 'every line');
    // The kubelet rotates after the last line and ends the followed stream
    // as the container stops; the pod status still says running, so the
    // sidecar follows again, is served the empty current file, and that
    // stream ends too. The status shows the run terminated only while the
    // sidecar waits to reconnect.
    const before = t.kube.logRequests.length;
    t.kube.rotate('main', 0);
    t.kube.endFollowers('main');
    await waitUntil(() => t.kube.logRequests.slice(before).some((q) => q.container === 'main' && q.follow) && t.kube.openStreams > 0, 'a followed request after the end');
    const gets = t.kube.podGets;
    t.kube.endFollowers('main');
    await waitUntil(() => t.kube.podGets > gets, 'the sidecar reading the pod after the empty stream');
    t.kube.terminate('main');
    const summary = await p.drain();
    expect(messages(t.sink.accepted)).toEqual(names('main', 0, 100));
    expect({ outcome: summary.outcome, resume_gaps: summary.resume_gaps }).toEqual({ outcome: 'complete', resume_gaps: 0 });
    expect(seen.filter((m) => m.startsWith('resumed a container log past a rotation'))).toEqual([]);
  });

  it('no gap when the rotation came while the stream was open, or the resume point is still in the current file', async () => {
    const seen = warnings();
    const { t, open, refused } = await cutAndHold(120);
    t.kube.run('main', 0);
    t.kube.append('main', 0, lines('main', 0, 100, 4));
    const p = await t.start();
    await waitUntil(() => t.sink.accepted.length >= 100, 'the first lines');
    // Rotated while the first stream is open: it goes on into the new file.
    t.kube.rotate('main', 0);
    t.kube.append('main', 0, lines('main', 100, 200, 4));
    await waitUntil(() => t.sink.accepted.length >= 120 && refused() >= 2, 'the cut, inside the new file, and a refused reconnection');
    t.kube.append('main', 0, lines('main', 200, 300, 4));
    open();
    await waitUntil(() => t.sink.accepted.length >= 300, 'every line');
    t.kube.terminate('main');
    const summary = await p.drain();
    expect(messages(t.sink.accepted)).toEqual(names('main', 0, 300));
    expect({ outcome: summary.outcome, resume_gaps: summary.resume_gaps }).toEqual({ outcome: 'complete', resume_gaps: 0 });
    expect(seen.filter((m) => m.startsWith('resumed a container log past a rotation'))).toEqual([]);
  });
});

describe('api mode: end of a run', () => {
  it('reconnects when a stream ends while the run is running, and is done only after a read that began after termination', async () => {
    const t = await setup({ main: ['main'] });
    t.kube.run('main', 0);
    t.kube.append('main', 0, lines('main', 0, 20));
    t.kube.onLog = (q) => (q.follow && t.kube.logRequests.filter((r) => r.follow).length === 1 ? { endAfterLines: 20 } : undefined);
    const p = await t.start();
    await waitUntil(() => t.sink.accepted.length >= 20, 'first lines');
    // The first stream ended cleanly though main still runs: the sidecar reconnects and keeps following.
    await waitUntil(() => t.kube.logRequests.filter((q) => q.follow).length >= 2 && t.kube.openStreams === 1, 'a second followed stream');
    t.kube.append('main', 0, lines('main', 20, 30));
    await waitUntil(() => t.sink.accepted.length >= 30, 'lines on the second stream');
    // The stream ends cleanly while the pod status still says running: not done.
    t.kube.endFollowers('main');
    await sleep(300);
    let files = await t.checkpoint().catch(() => ({}) as Record<string, { done: boolean }>);
    expect(files['main/0/api']?.done ?? false).toBe(false);
    t.kube.append('main', 0, lines('main', 30, 35));
    t.kube.terminate('main');
    await waitUntil(() => t.sink.accepted.length >= 35, 'the last lines');
    const summary = await p.drain();
    expect(messages(t.sink.accepted)).toEqual(names('main', 0, 35));
    const reqs = t.kube.logRequests.filter((q) => q.container === 'main');
    expect(reqs.at(-1)!.follow).toBe(false);
    expect(summary).toMatchObject({ lines_shipped: 35, deadline_hit: false });
    files = await t.checkpoint();
    expect(files['main/0/api']).toMatchObject({ offset: 35, done: true });
  });

  it('on SIGTERM reads terminated runs to the end, ships everything and exits; a pod-log 403 is retried until allowed', async () => {
    const t = await setup({ main: ['main'] });
    let forbidden = true;
    t.kube.onLog = () => (forbidden ? { status: 403 } : undefined);
    t.kube.run('main', 0);
    t.kube.append('main', 0, lines('main', 0, 500, 2));
    const p = await t.start();
    await waitUntil(() => t.kube.logRequests.length >= 2, 'two refused requests');
    expect(t.sink.accepted).toHaveLength(0);
    forbidden = false;
    t.kube.terminate('main');
    const summary = await p.drain();
    expect(messages(t.sink.accepted)).toEqual(names('main', 0, 500));
    expect(summary).toMatchObject({ lines_shipped: 500, lines_unsent: 0, deadline_hit: false });
  });
});

describe('api mode: credentials and configuration', () => {
  it('reads the token again periodically and after a 401, so a rotated token keeps working', async () => {
    const kube = await new FakeKube({ main: ['main'] }).start();
    cleanups.push(() => kube.stop());
    const client = await KubeClient.create({ apiUrl: new URL(kube.url), tokenDir: kube.tokenDir, tokenRefreshMs: 100 });
    cleanups.push(async () => client.close());
    const podPath = `/api/v1/namespaces/${kube.namespace}/pods/${kube.name}`;
    await client.getJson(podPath);
    expect(kube.tokensSeen.at(-1)).toBe('token-1');
    // Periodic re-read: both tokens are valid, the new one is used once the interval has passed.
    await kube.rotateToken('token-2', true);
    await sleep(150);
    await client.getJson(podPath);
    expect(kube.tokensSeen.at(-1)).toBe('token-2');

    // A client that would not re-read for a minute still recovers on 401.
    const slow = await KubeClient.create({ apiUrl: new URL(kube.url), tokenDir: kube.tokenDir, tokenRefreshMs: 60_000 });
    cleanups.push(async () => slow.close());
    await kube.rotateToken('token-3');
    const seen = kube.tokensSeen.length;
    const pod = await slow.getJson<{ metadata: { uid: string } }>(podPath);
    expect(pod.metadata.uid).toBe('uid-1');
    expect(kube.tokensSeen.slice(seen)).toEqual(['token-2', 'token-3']);
  });

  it('trusts only the CA in the token directory', async () => {
    const kube = await new FakeKube({ main: ['main'] }).start();
    cleanups.push(() => kube.stop());
    const other = await new FakeKube({ main: ['main'] }).start();
    cleanups.push(() => other.stop());
    // The other server's CA does not vouch for this server's certificate.
    const client = await KubeClient.create({ apiUrl: new URL(kube.url), tokenDir: other.tokenDir });
    cleanups.push(async () => client.close());
    await expect(client.getJson(`/api/v1/namespaces/${kube.namespace}/pods/${kube.name}`)).rejects.toThrow(/certificate/);
  });

  it('needs an API address and a token, and says so at start-up', async () => {
    const base = { POD_NAME: 'p', POD_NAMESPACE: 'n', POD_UID: 'u', JOBHARVEST_MODE: 'api' };
    expect(() => loadConfig(base)).toThrow(/KUBERNETES_SERVICE_HOST/);
    const cfg = loadConfig({ ...base, KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '6443' });
    expect(cfg.kube?.apiUrl.href).toBe('https://[fd00::1]:6443/');
    expect(cfg.kube?.tokenDir).toBe('/var/run/secrets/kubernetes.io/serviceaccount');
    expect(loadConfig({ ...base, KUBERNETES_SERVICE_HOST: '10.0.0.1', JOBHARVEST_KUBE_API_URL: 'http://127.0.0.1:8080' }).kube?.apiUrl.href).toBe('http://127.0.0.1:8080/');
    const empty = await tmpDir();
    const p = new Pipeline(testConfig({ JOBHARVEST_MODE: 'api', JOBHARVEST_KUBE_API_URL: 'https://127.0.0.1:1', JOBHARVEST_KUBE_TOKEN_DIR: empty, JOBHARVEST_STATE_DIR: path.join(empty, 's') }));
    await expect(p.start()).rejects.toBeInstanceOf(ConfigError);
  });
});

describe('api mode: records', () => {
  it('cuts a line over JOBHARVEST_MAX_RECORD_BYTES on a UTF-8 boundary and counts what was cut', async () => {
    const t = await setup({ main: ['main'] }, { JOBHARVEST_MAX_RECORD_BYTES: '1024' });
    await t.start();
    await waitUntil(() => t.kube.watchRequests > 0, 'the pod watch');
    t.kube.run('main', 0);
    // 1801 bytes: more than the line limit too, so part of it never reaches the record.
    const long = 'a' + '€'.repeat(600);
    t.kube.append('main', 0, [
      { ts: kubeTs(BASE_SEC, 0), msg: long },
      { ts: kubeTs(BASE_SEC, 1), msg: 'short' },
    ]);
    t.kube.terminate('main');
    await waitUntil(() => t.sink.accepted.length >= 2, 'both lines');
    const docs = [...t.sink.accepted].sort((a, b) => lineOf(a) - lineOf(b));
    expect(docs.map((d) => d.message)).toEqual(['a' + '€'.repeat(341) + ' [jobharvest: truncated 777 bytes]', 'short']);
    expect(docs.map((d) => d['jobharvest.truncated'])).toEqual([true, undefined]);
  });
});
