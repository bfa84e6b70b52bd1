// `tsx bench/sidecar/swing.ts`: what makes one run of bench:sidecar's OTLP
// row slower than another. Runs that row (the plain corpus through the OTLP
// sink, protobuf, gzip 1, sender pinned to CPU 0) BENCH_SWING_RUNS times
// (default 6) and prints, per run, the figures a slow run could come from:
//   - MiB per CPU-second and CPU seconds by thread: the event loop, libuv's
//     pool (gzip, file reads), V8's workers (GC), the rest;
//   - GC from --trace-gc: scavenges, mark-compacts (and why V8 started them),
//     the main thread's pause; with BENCH_SWING_NODE_OPTIONS=--trace-gc-nvp
//     also the bytes scavenges promoted to the old generation;
//   - the corpus's share in the page cache before the run (fincore);
//   - requests and mean bytes per request on the wire (batch sizes);
//   - the machine's load average.
// With BENCH_SWING_PROFILE=1 every run also writes a --cpu-prof profile, and
// the fastest and slowest runs' heaviest functions (self time) are printed
// side by side, with the median run's self time by pipeline stage (mapped
// back to the sources through the bundle's source maps): where the CPU goes
// apart from the codec. The profiles stay in the printed folder only while
// the script runs; it removes everything it made.
// Knobs: BENCH_SIDECAR_BYTES (as bench:sidecar), BENCH_SWING_RUNS,
// BENCH_SWING_PROFILE, BENCH_SWING_NODE_OPTIONS (more flags for the sidecar),
// BENCH_SWING_COMPRESSION (gzip, zstd or none; default gzip),
// BENCH_SWING_ANSWER_MS (the receiver answers each request this much later, as
// a busy server would: what a slow answer costs the sidecar in CPU).
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { SidecarProcess, ensureSidecarBundle } from '../../test/support/sidecar.ts';
import { ensureCorpus } from './corpus.ts';
import { CountingOtlpReceiver } from './otlp-receiver.ts';
import { Sampler } from './procstat.ts';
import { stageTimes, selfTimes } from './cpuprofile.ts';
import { median } from './repeats.ts';
import { threadCpu } from './threads.ts';

const MiB = 2 ** 20;
const MIN_BYTES = Number(process.env.BENCH_SIDECAR_BYTES ?? 2 ** 30);
const RUNS = Number(process.env.BENCH_SWING_RUNS ?? 6);
const PROFILE = process.env.BENCH_SWING_PROFILE === '1';
const ANSWER_DELAY_MS = Number(process.env.BENCH_SWING_ANSWER_MS ?? 0);
const COMPRESSION = process.env.BENCH_SWING_COMPRESSION ?? 'gzip';
const log = (m: string) => console.log(`[swing] ${m}`);
const fmt = (n: number, d = 1) => n.toFixed(d);

const pinned = spawnSync('taskset', ['-V']).status === 0 && cpus().length > 1;
if (pinned) spawnSync('taskset', ['-pc', '1', String(process.pid)], { stdio: 'ignore' });

interface Run {
  n: number;
  perCpu: number;
  seconds: number;
  cpu: number;
  threads: ReturnType<typeof threadCpu>;
  scavenges: number;
  markCompacts: number;
  gcPauseMs: number;
  cachedPct: number;
  requests: number;
  meanRequestKiB: number;
  load: number;
  profileDir?: string;
}

/** Percentage of the file's pages in the page cache, or NaN when fincore is missing. */
function cached(file: string): number {
  const r = spawnSync('fincore', ['--bytes', '--noheadings', '--output', 'RES,SIZE', file], { encoding: 'utf8' });
  const [res, size] = (r.stdout ?? '').trim().split(/\s+/).map(Number);
  return r.status === 0 && size ? (100 * res!) / size : NaN;
}

/** Counts and main-thread pause of the GCs in --trace-gc lines ("Scavenge ... MB, 0.52 / 0.00 ms ..."). */
function gc(lines: readonly string[]): { scavenges: number; markCompacts: number; pauseMs: number } {
  let scavenges = 0;
  let markCompacts = 0;
  let pauseMs = 0;
  for (const l of lines) {
    const kind = /ms: (Scavenge|Mark-Compact|Mark-sweep|Minor Mark-Sweep)/.exec(l)?.[1];
    if (!kind) continue;
    if (kind === 'Scavenge' || kind === 'Minor Mark-Sweep') scavenges++;
    else markCompacts++;
    const pause = /MB, ([\d.]+) \/ [\d.]+ ms/.exec(l);
    if (pause) pauseMs += Number(pause[1]);
  }
  return { scavenges, markCompacts, pauseMs };
}


const corpus = ensureCorpus(MIN_BYTES, 200, log);
ensureSidecarBundle();
const work = mkdtempSync(join(tmpdir(), 'jh-bench-swing-'));
const runs: Run[] = [];
try {
  for (let n = 1; n <= RUNS; n++) {
    const cachedPct = cached(corpus.file);
    const receiver = await CountingOtlpReceiver.start({ answerDelayMs: ANSWER_DELAY_MS });
    const state = mkdtempSync(join(work, 'state-'));
    const profileDir = PROFILE ? mkdtempSync(join(work, `prof-${n}-`)) : undefined;
    const flags = ['--trace-gc', ...(profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : []), process.env.BENCH_SWING_NODE_OPTIONS ?? ''].join(' ').trim();
    try {
      const sidecar = SidecarProcess.start({
        identity: corpus.identity,
        logDir: corpus.podDir,
        stateDir: state,
        sink: 'otlp',
        endpoint: receiver.url,
        settings: { OTLP_ENCODING: 'protobuf', COMPRESSION },
        cpus: pinned ? '0' : undefined,
        moreNodeFlags: flags.split(' ').filter(Boolean),
      });
      const sampler = new Sampler(sidecar.pid);
      let threads = threadCpu(sidecar.pid);
      const poll = setInterval(() => (threads = threadCpu(sidecar.pid)), 100);
      try {
        await Promise.race([
          receiver.waitForRecords(corpus.lines, 15 * 60_000),
          sidecar.exited().then((e) => Promise.reject(new Error(`sidecar exited early (${e.code ?? e.signal}):\n${sidecar.tail()}`))),
        ]);
      } finally {
        clearInterval(poll);
      }
      threads = threadCpu(sidecar.pid);
      const usage = sampler.poll();
      const doneAt = receiver.stats.lastRequestAt ?? Date.now();
      await sidecar.stop();
      sampler.stop();
      const g = gc(sidecar.stdout);
      const promoted = sidecar.stdout.reduce((n, l) => n + Number(/\bpromoted=(\d+)/.exec(l)?.[1] ?? 0), 0);
      if (promoted > 0) log(`run ${n}: ${fmt(promoted / MiB)} MiB promoted by scavenges (--trace-gc-nvp)`);
      const reasons = new Map<string, number>();
      for (const l of sidecar.stdout) {
        if (!/Mark-Compact|Mark-sweep/.test(l)) continue;
        const why = /current mu = [\d.]+\) (.*)$/.exec(l)?.[1]?.trim() ?? '?';
        reasons.set(why, (reasons.get(why) ?? 0) + 1);
      }
      if (reasons.size > 0) log(`run ${n}: mark-compacts by reason: ${[...reasons].map(([k, v]) => `${v}x ${k}`).join('; ')}`);
      const seconds = (doneAt - sidecar.startedAt) / 1000;
      const r: Run = {
        n,
        perCpu: corpus.bytes / MiB / usage.cpuSeconds,
        seconds,
        cpu: usage.cpuSeconds,
        threads,
        scavenges: g.scavenges,
        markCompacts: g.markCompacts,
        gcPauseMs: g.pauseMs,
        cachedPct,
        requests: receiver.stats.requests,
        meanRequestKiB: receiver.stats.wireBytes / 1024 / Math.max(1, receiver.stats.requests),
        load: loadavg()[0]!,
        profileDir,
      };
      runs.push(r);
      log(`run ${n}: ${fmt(r.perCpu)} MiB/cpu_s, ${fmt(r.cpu, 2)} cpu_s (main ${fmt(threads.main, 2)}, pool ${fmt(threads.pool, 2)}, v8 ${fmt(threads.v8, 2)}), ${r.scavenges} scavenges, ${r.markCompacts} mark-compacts, ${fmt(r.gcPauseMs, 0)} ms GC pause, corpus ${fmt(cachedPct, 0)}% cached, load ${fmt(r.load, 2)}`);
    } finally {
      await receiver.close();
      rmSync(state, { recursive: true, force: true });
    }
  }
  console.log('');
  console.log('run  MiB/cpu_s  seconds  cpu_s   main   pool     v8  other  scav  m-c  gc_ms  cached%  requests  KiB/req  load1');
  for (const r of runs) {
    console.log(
      `${String(r.n).padStart(3)} ${fmt(r.perCpu).padStart(10)} ${fmt(r.seconds, 2).padStart(8)} ${fmt(r.cpu, 2).padStart(6)} ${fmt(r.threads.main, 2).padStart(6)} ${fmt(r.threads.pool, 2).padStart(6)} ${fmt(r.threads.v8, 2).padStart(6)} ${fmt(r.threads.other, 2).padStart(6)} ${String(r.scavenges).padStart(5)} ${String(r.markCompacts).padStart(4)} ${fmt(r.gcPauseMs, 0).padStart(6)} ${fmt(r.cachedPct, 0).padStart(8)} ${String(r.requests).padStart(9)} ${fmt(r.meanRequestKiB).padStart(8)} ${fmt(r.load, 2).padStart(6)}`,
    );
  }
  const by = [...runs].sort((a, b) => a.perCpu - b.perCpu);
  const slow = by[0]!;
  const fast = by[by.length - 1]!;
  const med = median(runs.map((r) => r.perCpu));
  console.log(`spread (max/min) of MiB/cpu_s: ${fmt(fast.perCpu / slow.perCpu, 2)} over ${runs.length} runs; median ${fmt(med)}`);
  console.log(`slowest run ${slow.n} against fastest run ${fast.n}: cpu_s +${fmt(slow.cpu - fast.cpu, 2)} (main ${fmt(slow.threads.main - fast.threads.main, 2)}, pool ${fmt(slow.threads.pool - fast.threads.pool, 2)}, v8 ${fmt(slow.threads.v8 - fast.threads.v8, 2)}, other ${fmt(slow.threads.other - fast.threads.other, 2)})`);
  if (PROFILE && slow.profileDir && fast.profileDir) {
    const a = selfTimes(slow.profileDir);
    const b = selfTimes(fast.profileDir);
    const names = [...new Set([...a.keys(), ...b.keys()])];
    const rowsByDiff = names.map((k) => ({ k, slow: a.get(k) ?? 0, fast: b.get(k) ?? 0 })).sort((x, y) => Math.abs(y.slow - y.fast) - Math.abs(x.slow - x.fast));
    console.log('');
    console.log(`self time (ms), slowest run ${slow.n} against fastest run ${fast.n}, largest differences first:`);
    for (const r of rowsByDiff.slice(0, 15)) console.log(`${fmt(r.slow, 0).padStart(8)} ${fmt(r.fast, 0).padStart(8)} ${fmt(r.slow - r.fast, 0).padStart(7)}  ${r.k}`);
    const mid = by[Math.floor((by.length - 1) / 2)]!;
    const all = stageTimes(mid.profileDir!);
    const blocking = [...all].filter(([k]) => k.startsWith('blocking'));
    const stages = [...all].filter(([k]) => !k.startsWith('blocking')).sort((x, y) => y[1] - x[1]);
    const busy = stages.reduce((n, [, ms]) => n + ms, 0);
    console.log('');
    console.log(`main thread by stage, run ${mid.n} (${COMPRESSION}): share of the sampled time outside blocking file calls, and that share of the main thread's ${fmt(mid.threads.main, 2)} cpu_s (${fmt(mid.cpu, 2)} cpu_s in all threads):`);
    for (const [stage, ms] of stages) console.log(`${fmt((100 * ms) / busy).padStart(6)} % ${fmt((mid.threads.main * ms) / busy, 2).padStart(6)} cpu_s  ${stage}`);
    for (const [stage, ms] of blocking) console.log(`${fmt(ms, 0).padStart(8)} ms sampled in ${stage}`);
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}
