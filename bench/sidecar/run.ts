// `npm run bench:sidecar`: ships a pre-written CRI log of at least 1 GiB
// through the bundled sidecar to a local receiver that only counts, once with
// the NDJSON http sink and once with the OTLP sink (protobuf, gzip level 1),
// then has the peers do the same with the same file: the OpenTelemetry
// Collector (filelog + container operator + batch + otlphttp, once at its
// default gzip and once at the sidecar's level 1) and rsyslog (imfile →
// omfwd TCP). OTLP receivers count the records in each request exactly.
// All senders are pinned to one core (taskset -c 0) when taskset exists; the
// receivers run in this process, pinned to the other core.
// BENCH_SIDECAR_ROWS=sidecar,sidecar-otlp,otelcol,otelcol-gzip1,rsyslog picks rows.
//
// Not a test: it prints figures; CPU seconds are the figure that holds on a
// loaded machine. Its last lines are
//   ratio sidecar/otelcol per CPU-second: <r>x   (OTLP sink vs the collector at gzip level 1)
//   MiBps=<x> peak_rss_MiB=<y> startup_ms=<z> peer_MiBps=<w>
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { OTELCOL, ensureGoProgram, pinnedVersion } from '../../test/harness/servers/go-build.ts';
import { ensureRsyslog, rsyslogVersion } from '../../test/harness/servers/rsyslog.ts';
import { CountingHttpReceiver, CountingTcpReceiver } from '../../test/support/counting-receiver.ts';
import { SidecarProcess, ensureSidecarBundle, summaryNumber } from '../../test/support/sidecar.ts';
import { ensureCorpus } from './corpus.ts';
import { Sampler } from './procstat.ts';
import { startOtelcolPeer } from './otelcol-peer.ts';
import { CountingOtlpReceiver } from './otlp-receiver.ts';
import { startRsyslogPeer, type PeerRun } from './rsyslog-peer.ts';

const MiB = 2 ** 20;
const MIN_BYTES = Number(process.env.BENCH_SIDECAR_BYTES ?? 2 ** 30);
const LINE_BYTES = 200;
const TIMEOUT_MS = 15 * 60_000;
const ALL_ROWS = ['sidecar', 'sidecar-otlp', 'otelcol', 'otelcol-gzip1', 'rsyslog'] as const;
type RowKey = (typeof ALL_ROWS)[number];
const ROWS = new Set((process.env.BENCH_SIDECAR_ROWS?.split(',') ?? ALL_ROWS) as RowKey[]);

const log = (m: string) => console.log(`[bench] ${m}`);
const fmt = (n: number, d = 1) => n.toFixed(d);

const hasTaskset = spawnSync('taskset', ['-V']).status === 0;
const oneCore = hasTaskset && cpus().length > 1;
const SENDER_CPUS = oneCore ? '0' : undefined;
if (oneCore) {
  // Keep the receivers off the senders' core.
  spawnSync('taskset', ['-pc', '1', String(process.pid)], { stdio: 'ignore' });
}

interface Row {
  key?: RowKey;
  name: string;
  seconds: number;
  MiBps: number;
  linesPerSec: number;
  cpuSeconds: number;
  peakRssMiB: number;
  startupMs: number;
}

function row(name: string, bytes: number, lines: number, startedAt: number, firstAt: number | undefined, doneAt: number, s: { cpuSeconds: number; peakRssMiB: number }): Row {
  const seconds = (doneAt - startedAt) / 1000;
  return {
    name,
    seconds,
    MiBps: bytes / MiB / seconds,
    linesPerSec: lines / seconds,
    cpuSeconds: s.cpuSeconds,
    peakRssMiB: s.peakRssMiB,
    startupMs: firstAt === undefined ? NaN : firstAt - startedAt,
  };
}

async function benchSidecar(corpus: ReturnType<typeof ensureCorpus>): Promise<Row> {
  const receiver = await CountingHttpReceiver.start();
  const state = mkdtempSync(join(tmpdir(), 'jh-bench-state-'));
  try {
    const sidecar = SidecarProcess.start({
      identity: corpus.identity,
      logDir: corpus.podDir,
      stateDir: state,
      sink: 'http',
      endpoint: `${receiver.url}/ingest`,
      cpus: SENDER_CPUS,
    });
    const sampler = new Sampler(sidecar.pid);
    try {
      await Promise.race([
        receiver.waitForLines(corpus.lines, TIMEOUT_MS),
        sidecar.exited().then((e) => Promise.reject(new Error(`sidecar exited early (${e.code ?? e.signal}):\n${sidecar.tail()}`))),
      ]);
    } catch (err) {
      sampler.stop();
      await sidecar.kill();
      throw err;
    }
    const doneAt = receiver.stats.lastRequestAt ?? Date.now();
    const usage = sampler.poll();
    const exit = await sidecar.stop();
    const final = sampler.stop();
    if (exit.code !== 0) log(`sidecar exit ${exit.code ?? exit.signal}:\n${sidecar.tail()}`);
    const shipped = summaryNumber(exit.summary, 'lines_shipped');
    log(`sidecar: received ${receiver.stats.lines} of ${corpus.lines} lines in ${receiver.stats.requests} requests (${fmt(receiver.stats.wireBytes / MiB)} MiB on the wire); summary lines_shipped=${shipped}`);
    return row('jobharvest sidecar', corpus.bytes, corpus.lines, sidecar.startedAt, receiver.stats.firstRequestAt, doneAt, { cpuSeconds: usage.cpuSeconds, peakRssMiB: final.peakRssMiB });
  } finally {
    await receiver.close();
    rmSync(state, { recursive: true, force: true });
  }
}

async function benchSidecarOtlp(corpus: ReturnType<typeof ensureCorpus>): Promise<Row> {
  const receiver = await CountingOtlpReceiver.start();
  const state = mkdtempSync(join(tmpdir(), 'jh-bench-state-'));
  try {
    const sidecar = SidecarProcess.start({
      identity: corpus.identity,
      logDir: corpus.podDir,
      stateDir: state,
      sink: 'otlp',
      endpoint: receiver.url,
      settings: { OTLP_ENCODING: 'protobuf' },
      cpus: SENDER_CPUS,
    });
    const sampler = new Sampler(sidecar.pid);
    try {
      await Promise.race([
        receiver.waitForRecords(corpus.lines, TIMEOUT_MS),
        sidecar.exited().then((e) => Promise.reject(new Error(`sidecar exited early (${e.code ?? e.signal}):\n${sidecar.tail()}`))),
      ]);
    } catch (err) {
      sampler.stop();
      await sidecar.kill();
      throw err;
    }
    const doneAt = receiver.stats.lastRequestAt ?? Date.now();
    const usage = sampler.poll();
    const exit = await sidecar.stop();
    const final = sampler.stop();
    if (exit.code !== 0) log(`sidecar exit ${exit.code ?? exit.signal}:\n${sidecar.tail()}`);
    log(`sidecar otlp: received ${receiver.stats.records} of ${corpus.lines} records in ${receiver.stats.requests} requests (${fmt(receiver.stats.wireBytes / MiB)} MiB on the wire); summary lines_shipped=${summaryNumber(exit.summary, 'lines_shipped')}`);
    return row('jobharvest sidecar (otlp protobuf gzip 1)', corpus.bytes, corpus.lines, sidecar.startedAt, receiver.stats.firstRequestAt, doneAt, { cpuSeconds: usage.cpuSeconds, peakRssMiB: final.peakRssMiB });
  } finally {
    await receiver.close();
    rmSync(state, { recursive: true, force: true });
  }
}

/** `gzipLevel` undefined: the exporter's documented default compression (gzip at its default level). */
async function benchOtelcol(corpus: ReturnType<typeof ensureCorpus>, gzipLevel: number | undefined): Promise<Row> {
  const receiver = await CountingOtlpReceiver.start();
  const work = mkdtempSync(join(tmpdir(), 'jh-bench-otelcol-'));
  let peer: ReturnType<typeof startOtelcolPeer> | undefined;
  try {
    peer = startOtelcolPeer({ file: corpus.file, logsUrl: `${receiver.url}/v1/logs`, workDir: work, cpus: SENDER_CPUS, gzipLevel });
    return await measurePeer(peer, receiver, corpus, `otelcol ${pinnedVersion(OTELCOL, 'go.opentelemetry.io/collector/otelcol')} (${gzipLevel === undefined ? 'default gzip' : `gzip ${gzipLevel}`})`);
  } catch (err) {
    if (peer) log(`otelcol log:\n${peer.logTail()}`);
    throw err;
  } finally {
    await peer?.stop();
    await receiver.close();
    rmSync(work, { recursive: true, force: true });
  }
}

async function measurePeer(peer: PeerRun, receiver: CountingOtlpReceiver, corpus: ReturnType<typeof ensureCorpus>, name: string): Promise<Row> {
  const sampler = new Sampler(peer.pid);
  try {
    await Promise.race([
      receiver.waitForRecords(corpus.lines, TIMEOUT_MS),
      peer.exited().then((e) => Promise.reject(new Error(`${name} exited early (${e.code ?? e.signal})`))),
    ]);
  } finally {
    sampler.stop();
  }
  const doneAt = receiver.stats.lastRequestAt ?? Date.now();
  log(`${name}: received ${receiver.stats.records} of ${corpus.lines} records in ${receiver.stats.requests} requests (${fmt(receiver.stats.wireBytes / MiB)} MiB on the wire)`);
  return row(name, corpus.bytes, corpus.lines, peer.startedAt, receiver.stats.firstRequestAt, doneAt, sampler.last);
}

async function benchRsyslog(corpus: ReturnType<typeof ensureCorpus>): Promise<Row> {
  const receiver = await CountingTcpReceiver.start();
  const work = mkdtempSync(join(tmpdir(), 'jh-bench-rsyslog-'));
  try {
    const peer = startRsyslogPeer({ file: corpus.file, port: receiver.port, workDir: work, cpus: SENDER_CPUS });
    const sampler = new Sampler(peer.pid);
    let failure: unknown;
    try {
      await Promise.race([
        receiver.waitForLines(corpus.lines, TIMEOUT_MS),
        peer.exited().then((e) => Promise.reject(new Error(`rsyslogd exited early (${e.code ?? e.signal})`))),
      ]);
    } catch (err) {
      failure = err;
    }
    const doneAt = receiver.stats.lastRequestAt ?? Date.now();
    const usage = sampler.stop();
    await peer.stop();
    if (failure) throw failure;
    log(`rsyslog: received ${receiver.stats.lines} of ${corpus.lines} lines on ${receiver.stats.requests} connection(s)`);
    return row(`rsyslog ${rsyslogVersion()} (imfile -> omfwd tcp)`, corpus.bytes, corpus.lines, peer.startedAt, receiver.stats.firstRequestAt, doneAt, usage);
  } finally {
    await receiver.close();
    rmSync(work, { recursive: true, force: true });
  }
}

const corpus = ensureCorpus(MIN_BYTES, LINE_BYTES, log);
ensureSidecarBundle();
if (ROWS.has('rsyslog')) ensureRsyslog(log);
if (ROWS.has('otelcol') || ROWS.has('otelcol-gzip1')) ensureGoProgram(OTELCOL, log);
log(`corpus ${corpus.file}: ${corpus.lines} lines, ${fmt(corpus.bytes / MiB, 0)} MiB, ~${fmt(corpus.bytes / corpus.lines, 0)} B/line`);
log(oneCore ? 'senders pinned to CPU 0, receivers to CPU 1' : 'taskset unavailable or one CPU: not pinned');

const runners: Record<RowKey, () => Promise<Row>> = {
  sidecar: () => benchSidecar(corpus),
  'sidecar-otlp': () => benchSidecarOtlp(corpus),
  otelcol: () => benchOtelcol(corpus, undefined),
  'otelcol-gzip1': () => benchOtelcol(corpus, 1),
  rsyslog: () => benchRsyslog(corpus),
};
const rows: Row[] = [];
for (const key of ALL_ROWS) if (ROWS.has(key)) rows.push({ ...(await runners[key]()), key });
const perCpu = (r: Row) => (r.MiBps * r.seconds) / r.cpuSeconds;
console.log('');
console.log('sender                                     seconds   MiB/s     lines/s   cpu_s  MiB/cpu_s  peak_rss_MiB  startup_ms');
for (const r of rows) {
  console.log(
    `${r.name.padEnd(42)} ${fmt(r.seconds, 2).padStart(7)} ${fmt(r.MiBps).padStart(7)} ${fmt(r.linesPerSec, 0).padStart(11)} ${fmt(r.cpuSeconds, 2).padStart(6)} ${fmt(perCpu(r)).padStart(10)} ${fmt(r.peakRssMiB).padStart(13)} ${fmt(r.startupMs, 0).padStart(11)}`,
  );
}
const by = (k: RowKey) => rows.find((r) => r.key === k);
// Wall-clock MiB/s suffers when other work shares the machine; MiB per CPU second much less so.
console.log(`load average during the run: ${loadavg().map((l) => fmt(l, 2)).join(' ')}`);
const me = by('sidecar');
const otlp = by('sidecar-otlp');
const rsyslog = by('rsyslog');
const collectorDefault = by('otelcol');
const collectorGzip1 = by('otelcol-gzip1');
if (me && rsyslog) console.log(`ratio sidecar/rsyslog throughput: ${fmt(me.MiBps / rsyslog.MiBps, 2)}x`);
if (otlp && collectorDefault) console.log(`ratio sidecar/otelcol per CPU-second at the collector's default gzip: ${fmt(perCpu(otlp) / perCpu(collectorDefault), 2)}x`);
if (otlp && collectorGzip1) {
  console.log(`peak RSS sidecar (otlp) ${fmt(otlp.peakRssMiB)} MiB vs otelcol ${fmt(collectorGzip1.peakRssMiB)} MiB`);
  console.log(`ratio sidecar/otelcol per CPU-second: ${fmt(perCpu(otlp) / perCpu(collectorGzip1), 2)}x`);
}
if (me) console.log(`MiBps=${fmt(me.MiBps)} peak_rss_MiB=${fmt(me.peakRssMiB)} startup_ms=${fmt(me.startupMs, 0)} peer_MiBps=${rsyslog ? fmt(rsyslog.MiBps) : 'n/a'}`);
