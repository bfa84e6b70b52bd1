// `npm run bench:sidecar`: ships a pre-written CRI log of at least 1 GiB
// through the bundled sidecar to a local receiver that only counts, once with
// the NDJSON http sink and once with the OTLP sink (protobuf, gzip level 1),
// then has the peers do the same with the same file: the OpenTelemetry
// Collector (filelog + container operator + batch + otlphttp, once at its
// default gzip and once at the sidecar's level 1) and rsyslog (imfile →
// omfwd TCP). OTLP receivers count the records in each request exactly.
// All senders are pinned to one core (taskset -c 0) when taskset exists; the
// receivers run in this process, pinned to the other core.
//
// Record shaping: two more rows ship a second, "shaped" corpus (seeded: ~50%
// plain lines, ~40% JSON object lines, ~10% of lines in Python tracebacks and
// Java stack traces of 5-40 lines; see corpus.ts) with multiline joining and
// JSON parsing on: the sidecar's OTLP sink (JOBHARVEST_MULTILINE_START,
// JOBHARVEST_PARSE=json) and the Collector at gzip level 1 with the recombine
// and json_parser operators, both from the same start-of-event pattern and
// bounds. A shaping row ends once every event arrived joined, or, for a sender
// that joins nothing (a sidecar without shaping), every line as its own record;
// it reports which.
//
// Knobs (environment):
//   BENCH_SIDECAR_ROWS=sidecar,sidecar-otlp,sidecar-otlp-zstd,sidecar-http-zstd,sidecar-otlp-none,sidecar-none,otelcol,otelcol-gzip1,otelcol-zstd,rsyslog,sidecar-parse,sidecar-parse-zstd,sidecar-parse-none,sidecar-parse-mask,otelcol-parse,otelcol-parse-zstd,sidecar-shaped,sidecar-parse-original
//       picks rows (default: all but sidecar-shaped and sidecar-parse-original).
//       sidecar-parse and otelcol-parse alone give the parsing ratio;
//       sidecar-parse-mask is sidecar-parse with every built-in mask on
//       (JOBHARVEST_MASK=all) and gets a parsing ratio of its own, against the
//       same Collector row, which masks nothing;
//       sidecar-shaped is the OTLP row on the shaped corpus with shaping off,
//       and when it runs the with/without-parsing line compares against it
//       instead of sidecar-otlp; sidecar-parse-original is sidecar-parse with
//       the line beside every JSON record (JOBHARVEST_JSON_ORIGINAL=always),
//       and gets a parsing ratio of its own.
//       Codecs (JOBHARVEST_COMPRESSION): the rows without a codec in their
//       name are gzip level 1; -zstd rows are zstd level 1 (the Collector's
//       exporter too), -none rows send uncompressed. sidecar-none is the
//       NDJSON row uncompressed, against rsyslog, which sends uncompressed.
//       After the rows, each codec's floor: the bodies the sidecar sent in
//       its first run of a row family (otlp, http, otlp with parsing; up to
//       64 MiB, decoded by the receiver) compressed in a loop with the
//       sidecar's own compress call; printed as MiB of log per CPU-second and
//       the sidecar row's share of it.
//   BENCH_SIDECAR_REPEATS=<n>   runs of every row (default 3). Rounds run every
//       chosen row once, each round starting one row further down the list;
//       every row is printed as its medians, its MiB per CPU-second also as
//       min-max and spread (max/min); ratios are of medians, with the range
//       and spread of the same ratio taken within each round.
//   BENCH_SIDECAR_BYTES=<n>   minimum size of each corpus (default 1 GiB); e.g. 33554432 for a quick check.
//   BENCH_SIDECAR_MULTILINE=builtin   the sidecar joins with its built-in rules
//       (JOBHARVEST_MULTILINE=python,java) instead of the start pattern the
//       Collector gets (the default, so both sides join by the same rule).
//
// Not a test: it prints figures; CPU seconds are the figure that holds on a
// loaded machine. Every ratio line reads
//   <what>: <median ratio>x (per repeat <min>-<max>, spread <max/min>)
// With the shaping rows it also prints, before the lines below,
//   ratio sidecar/otelcol per CPU-second with parsing: ...
//   ratio sidecar/otelcol per CPU-second with parsing, every mask on: ...
//   ratio sidecar otlp with parsing/without per CPU-second: ...
// Its last lines are
//   ratio sidecar/otelcol per CPU-second: ...   (OTLP sink vs the collector at gzip level 1)
//   MiBps=<x> peak_rss_MiB=<y> startup_ms=<z> peer_MiBps=<w>
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { OTELCOL, ensureGoProgram, pinnedVersion } from '../../test/harness/servers/go-build.ts';
import { ensureRsyslog, rsyslogVersion } from '../../test/harness/servers/rsyslog.ts';
import { CountingHttpReceiver, CountingTcpReceiver } from '../../test/support/counting-receiver.ts';
import { SidecarProcess, ensureSidecarBundle, summaryNumber } from '../../test/support/sidecar.ts';
import { ENV, type EnvKey } from '../../src/contract/env.ts';
import { SHAPED_EVENT_START, ensureCorpus, type Corpus } from './corpus.ts';
import { Sampler, type ProcSample } from './procstat.ts';
import { median, repeatsFrom, summarize, type Sample } from './repeats.ts';
import { startOtelcolPeer, type PeerCompression, type Shaping } from './otelcol-peer.ts';
import { floorMiBPerCpuSecond, measureFloor } from './codec-floor.ts';
import type { Codec } from '../../src/contract/codec.ts';
import { CountingOtlpReceiver } from './otlp-receiver.ts';
import { startRsyslogPeer, type PeerRun } from './rsyslog-peer.ts';

const MiB = 2 ** 20;
const GZIP1: PeerCompression = { codec: 'gzip', level: 1 };
/** The Collector's zstd at level 1, its fastest (klauspost/compress SpeedFastest), as the sidecar's. */
const ZSTD1: PeerCompression = { codec: 'zstd', level: 1 };
const MIN_BYTES = Number(process.env.BENCH_SIDECAR_BYTES ?? 2 ** 30);
const REPEATS = repeatsFrom(process.env.BENCH_SIDECAR_REPEATS);
const LINE_BYTES = 200;
const TIMEOUT_MS = 15 * 60_000;
const ALL_ROWS = [
  'sidecar',
  'sidecar-otlp',
  'sidecar-otlp-zstd',
  'sidecar-http-zstd',
  'sidecar-otlp-none',
  'sidecar-none',
  'otelcol',
  'otelcol-gzip1',
  'otelcol-zstd',
  'rsyslog',
  'sidecar-shaped',
  'sidecar-parse',
  'sidecar-parse-zstd',
  'sidecar-parse-none',
  'sidecar-parse-mask',
  'sidecar-parse-original',
  'otelcol-parse',
  'otelcol-parse-zstd',
] as const;
type RowKey = (typeof ALL_ROWS)[number];
const DEFAULT_ROWS = ALL_ROWS.filter((k) => k !== 'sidecar-shaped' && k !== 'sidecar-parse-original');
const ROWS = new Set((process.env.BENCH_SIDECAR_ROWS?.split(',') ?? DEFAULT_ROWS) as RowKey[]);
for (const k of ROWS) if (!(ALL_ROWS as readonly string[]).includes(k)) throw new Error(`BENCH_SIDECAR_ROWS: unknown row ${k}; rows are ${ALL_ROWS.join(',')}`);
const PLAIN_ROWS: readonly RowKey[] = ['sidecar', 'sidecar-otlp', 'sidecar-otlp-zstd', 'sidecar-http-zstd', 'sidecar-otlp-none', 'sidecar-none', 'otelcol', 'otelcol-gzip1', 'otelcol-zstd', 'rsyslog'];
const SHAPED_ROWS: readonly RowKey[] = ['sidecar-shaped', 'sidecar-parse', 'sidecar-parse-zstd', 'sidecar-parse-none', 'sidecar-parse-mask', 'sidecar-parse-original', 'otelcol-parse', 'otelcol-parse-zstd'];
/** Decoded request bodies kept per sender family for the codec floors: enough for a steady measurement, little next to the corpus. */
const CAPTURE_BYTES = Math.min(64 * MiB, MIN_BYTES);
type Family = 'otlp' | 'http' | 'otlp-parse';
/** The first run of each family's bodies, the log bytes behind that run, and all its body bytes. */
const captures = new Map<Family, { bodies: Buffer[]; logBytes: number; bodyBytes: number }>();
const codecName = (c: Codec) => (c === 'gzip' ? 'gzip 1' : c === 'zstd' ? 'zstd 1' : 'no compression');
const SIDECAR_BUILTIN_MULTILINE = process.env.BENCH_SIDECAR_MULTILINE === 'builtin';
/**
 * The record-shaping settings both sides get: the corpus's start-of-event
 * pattern and the sidecar's documented defaults for the bounds and the flush
 * period (set explicitly on the sidecar too, so a change of default does not
 * silently make the two sides differ).
 */
const SHAPING: Shaping = {
  eventStart: SHAPED_EVENT_START,
  maxLines: Number(ENV.MULTILINE_MAX_LINES.default),
  maxBytes: Number(ENV.MULTILINE_MAX_BYTES.default),
  flushMs: Number(ENV.MULTILINE_FLUSH_MS.default),
};
/**
 * A shaping row whose records stopped short of one per line ends after this
 * long without a request: longer than the joiners' flush period plus a batch's
 * wait, so the last held event has surely been sent.
 */
const SETTLE_QUIET_MS = SHAPING.flushMs + Number(ENV.BATCH_MAX_WAIT_MS.default) + 1000;

const log = (m: string) => console.log(`[bench] ${m}`);
const fmt = (n: number, d = 1) => n.toFixed(d);

const hasTaskset = spawnSync('taskset', ['-V']).status === 0;
const oneCore = hasTaskset && cpus().length > 1;
const SENDER_CPUS = oneCore ? '0' : undefined;
if (oneCore) {
  // Keep the receivers off the senders' core.
  spawnSync('taskset', ['-pc', '1', String(process.pid)], { stdio: 'ignore' });
}

type Row = Sample & { key?: RowKey };

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

async function benchSidecar(corpus: ReturnType<typeof ensureCorpus>, codec: Codec = 'gzip'): Promise<Row> {
  const receiver = await CountingHttpReceiver.start(0, { captureBytes: captures.has('http') ? 0 : CAPTURE_BYTES });
  const state = mkdtempSync(join(tmpdir(), 'jh-bench-state-'));
  try {
    const sidecar = SidecarProcess.start({
      identity: corpus.identity,
      logDir: corpus.podDir,
      stateDir: state,
      sink: 'http',
      endpoint: `${receiver.url}/ingest`,
      settings: { COMPRESSION: codec },
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
    if (!captures.has('http')) captures.set('http', { bodies: receiver.captured, logBytes: corpus.bytes, bodyBytes: receiver.stats.bytes });
    log(`sidecar ${codecName(codec)}: received ${receiver.stats.lines} of ${corpus.lines} lines in ${receiver.stats.requests} requests (${fmt(receiver.stats.wireBytes / MiB)} MiB on the wire); summary lines_shipped=${shipped}`);
    return row(codec === 'gzip' ? 'jobharvest sidecar' : `jobharvest sidecar (http ${codecName(codec)})`, corpus.bytes, corpus.lines, sidecar.startedAt, receiver.stats.firstRequestAt, doneAt, { cpuSeconds: usage.cpuSeconds, peakRssMiB: final.peakRssMiB });
  } finally {
    await receiver.close();
    rmSync(state, { recursive: true, force: true });
  }
}

async function benchSidecarOtlp(corpus: ReturnType<typeof ensureCorpus>, codec: Codec = 'gzip'): Promise<Row> {
  const receiver = await CountingOtlpReceiver.start({ captureBytes: captures.has('otlp') ? 0 : CAPTURE_BYTES });
  const state = mkdtempSync(join(tmpdir(), 'jh-bench-state-'));
  try {
    const sidecar = SidecarProcess.start({
      identity: corpus.identity,
      logDir: corpus.podDir,
      stateDir: state,
      sink: 'otlp',
      endpoint: receiver.url,
      settings: { OTLP_ENCODING: 'protobuf', COMPRESSION: codec },
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
    if (!captures.has('otlp')) captures.set('otlp', { bodies: receiver.captured, logBytes: corpus.bytes, bodyBytes: receiver.stats.bodyBytes });
    log(`sidecar otlp ${codecName(codec)}: received ${receiver.stats.records} of ${corpus.lines} records in ${receiver.stats.requests} requests (${fmt(receiver.stats.wireBytes / MiB)} MiB on the wire); summary lines_shipped=${summaryNumber(exit.summary, 'lines_shipped')}`);
    return row(`jobharvest sidecar (otlp protobuf ${codecName(codec)})`, corpus.bytes, corpus.lines, sidecar.startedAt, receiver.stats.firstRequestAt, doneAt, { cpuSeconds: usage.cpuSeconds, peakRssMiB: final.peakRssMiB });
  } finally {
    await receiver.close();
    rmSync(state, { recursive: true, force: true });
  }
}

/** `compression` undefined: the exporter's documented default compression (gzip at its default level). */
async function benchOtelcol(corpus: ReturnType<typeof ensureCorpus>, compression: PeerCompression | undefined, shaping?: Shaping): Promise<Row> {
  const receiver = await CountingOtlpReceiver.start({ shapes: shaping !== undefined });
  const work = mkdtempSync(join(tmpdir(), 'jh-bench-otelcol-'));
  let peer: ReturnType<typeof startOtelcolPeer> | undefined;
  try {
    peer = startOtelcolPeer({ file: corpus.file, logsUrl: `${receiver.url}/v1/logs`, workDir: work, cpus: SENDER_CPUS, compression, shaping });
    const version = pinnedVersion(OTELCOL, 'go.opentelemetry.io/collector/otelcol');
    const gzip = compression === undefined ? 'default gzip' : `${compression.codec} ${compression.level}`;
    if (shaping) return await measureShapedPeer(peer, receiver, corpus, `otelcol ${version} (${gzip}, recombine+json)`);
    return await measurePeer(peer, receiver, corpus, `otelcol ${version} (${gzip})`);
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

/**
 * Waits for a shaping row's records: first `corpus.events` (every multi-line
 * event joined), then until either `corpus.lines` arrived (the sender joined
 * nothing) or no request came for SETTLE_QUIET_MS. The CPU reading is the one
 * taken when the last records arrived, so the quiet wait is not counted.
 */
async function settle(receiver: CountingOtlpReceiver, corpus: Corpus, sampler: Sampler, exited: Promise<never>): Promise<ProcSample> {
  await Promise.race([receiver.waitForRecords(corpus.events, TIMEOUT_MS), exited]);
  let usage = sampler.poll();
  let seen = receiver.stats.records;
  let progressAt = Date.now();
  const deadline = Date.now() + TIMEOUT_MS;
  while (receiver.stats.records < corpus.lines && Date.now() - progressAt < SETTLE_QUIET_MS) {
    if (Date.now() > deadline) throw new Error(`received ${receiver.stats.records} records, still coming after ${TIMEOUT_MS} ms`);
    await Promise.race([new Promise((r) => setTimeout(r, 50)), exited]);
    await receiver.waitForRecords(0, TIMEOUT_MS); // rejects once a request was malformed
    if (receiver.stats.records !== seen) {
      seen = receiver.stats.records;
      usage = sampler.poll();
      progressAt = Date.now();
    }
  }
  return usage;
}

/** Shaping rows whose records were not the corpus's events, for a warning under the ratios. */
const unjoined: string[] = [];

/**
 * What a shaping row's records say: joined as expected, not joined at all, or
 * something else; and how much structure they carry (parsed JSON shows as
 * attributes or map bodies, against the same sender with shaping off).
 */
function joinedNote(name: string, receiver: CountingOtlpReceiver, corpus: Corpus, expectJoined: boolean): string {
  const { records, attributes, mapBodies } = receiver.stats;
  const structure = `${fmt(attributes / Math.max(1, records), 2)} attributes/record, ${mapBodies} map bodies`;
  if (records === corpus.events) return `${records} records = the ${corpus.events} events: multi-line events joined; ${structure}`;
  if (expectJoined) unjoined.push(name);
  if (records === corpus.lines) return `${records} records = one per line: NOT joined; ${structure}`;
  return `${records} records, expected ${corpus.events} events (or ${corpus.lines} lines unjoined): joined differently; ${structure}`;
}

/**
 * The OTLP sink on the shaped corpus; `parse`: multiline joining and JSON
 * parsing on (SHAPING), otherwise shaping off; `always`: the line as written
 * beside every JSON record, not only where the fields do not hold it exactly;
 * `masks`: every built-in mask on as well.
 */
async function benchSidecarShaped(corpus: Corpus, parse: boolean, always = false, masks = false, codec: Codec = 'gzip'): Promise<Row> {
  const family = parse && !always && !masks;
  const receiver = await CountingOtlpReceiver.start({ shapes: true, captureBytes: family && !captures.has('otlp-parse') ? CAPTURE_BYTES : 0 });
  const state = mkdtempSync(join(tmpdir(), 'jh-bench-state-'));
  const settings: Partial<Record<EnvKey, string>> = { OTLP_ENCODING: 'protobuf', COMPRESSION: codec };
  if (parse) {
    // Default: the same start pattern the Collector's recombine gets (RE2 on both sides).
    if (SIDECAR_BUILTIN_MULTILINE) settings.MULTILINE = 'python,java';
    else settings.MULTILINE_START = SHAPING.eventStart;
    settings.MULTILINE_MAX_LINES = String(SHAPING.maxLines);
    settings.MULTILINE_MAX_BYTES = String(SHAPING.maxBytes);
    settings.MULTILINE_FLUSH_MS = String(SHAPING.flushMs);
    settings.PARSE = 'json';
    settings.JSON_MAX_FIELDS = ENV.JSON_MAX_FIELDS.default;
    settings.JSON_MAX_DEPTH = ENV.JSON_MAX_DEPTH.default;
    if (always) settings.JSON_ORIGINAL = 'always';
    if (masks) settings.MASK = 'all';
  }
  try {
    const sidecar = SidecarProcess.start({
      identity: corpus.identity,
      logDir: corpus.podDir,
      stateDir: state,
      sink: 'otlp',
      endpoint: receiver.url,
      settings,
      cpus: SENDER_CPUS,
      extraEnv: process.env.SC_NODE_OPTIONS ? { NODE_OPTIONS: process.env.SC_NODE_OPTIONS } : {},
    });
    const sampler = new Sampler(sidecar.pid);
    let usage: ProcSample;
    try {
      usage = await settle(
        receiver,
        corpus,
        sampler,
        sidecar.exited().then((e) => Promise.reject(new Error(`sidecar exited early (${e.code ?? e.signal}):\n${sidecar.tail()}`))),
      );
    } catch (err) {
      sampler.stop();
      await sidecar.kill();
      throw err;
    }
    const doneAt = receiver.stats.lastRequestAt ?? Date.now();
    const exit = await sidecar.stop();
    const final = sampler.stop();
    if (exit.code !== 0) log(`sidecar exit ${exit.code ?? exit.signal}:\n${sidecar.tail()}`);
    if (family && !captures.has('otlp-parse')) captures.set('otlp-parse', { bodies: receiver.captured, logBytes: corpus.bytes, bodyBytes: receiver.stats.bodyBytes });
    const what = parse ? `multiline (${SIDECAR_BUILTIN_MULTILINE ? 'built-in python,java' : 'start pattern'}) + json${always ? ', the line beside every JSON record' : ''}${masks ? ', every mask on' : ''}, ${codecName(codec)}` : 'shaping off';
    const codecNote = codec === 'gzip' ? '' : `, ${codecName(codec)}`;
    const name = parse ? `jobharvest sidecar (otlp, multiline+json${always ? '+line' : ''}${masks ? ', every mask on' : ''}${codecNote})` : 'jobharvest sidecar (otlp, shaped corpus)';
    log(`sidecar otlp, shaped corpus, ${what}: ${joinedNote(name, receiver, corpus, parse)}; ${receiver.stats.requests} requests (${fmt(receiver.stats.wireBytes / MiB)} MiB on the wire); summary lines_shipped=${summaryNumber(exit.summary, 'lines_shipped')}`);
    return row(name, corpus.bytes, corpus.lines, sidecar.startedAt, receiver.stats.firstRequestAt, doneAt, { cpuSeconds: usage.cpuSeconds, peakRssMiB: final.peakRssMiB });
  } finally {
    await receiver.close();
    rmSync(state, { recursive: true, force: true });
  }
}

async function measureShapedPeer(peer: PeerRun, receiver: CountingOtlpReceiver, corpus: Corpus, name: string): Promise<Row> {
  const sampler = new Sampler(peer.pid);
  let usage: ProcSample;
  try {
    usage = await settle(
      receiver,
      corpus,
      sampler,
      peer.exited().then((e) => Promise.reject(new Error(`${name} exited early (${e.code ?? e.signal})`))),
    );
  } finally {
    sampler.stop();
  }
  const doneAt = receiver.stats.lastRequestAt ?? Date.now();
  log(`${name}: ${joinedNote(name, receiver, corpus, true)}; ${receiver.stats.requests} requests (${fmt(receiver.stats.wireBytes / MiB)} MiB on the wire)`);
  return row(name, corpus.bytes, corpus.lines, peer.startedAt, receiver.stats.firstRequestAt, doneAt, { cpuSeconds: usage.cpuSeconds, peakRssMiB: sampler.last.peakRssMiB });
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

const wants = (keys: readonly RowKey[]) => keys.some((k) => ROWS.has(k));
// Each corpus only when a row needs it: generating one takes a while.
const corpus = wants(PLAIN_ROWS) ? ensureCorpus(MIN_BYTES, LINE_BYTES, log) : undefined;
const shaped = wants(SHAPED_ROWS) ? ensureCorpus(MIN_BYTES, LINE_BYTES, log, 'shaped') : undefined;
ensureSidecarBundle();
if (ROWS.has('rsyslog')) ensureRsyslog(log);
if ([...ROWS].some((k) => k.startsWith('otelcol'))) ensureGoProgram(OTELCOL, log);
if (corpus) log(`corpus ${corpus.file}: ${corpus.lines} lines, ${fmt(corpus.bytes / MiB, 0)} MiB, ~${fmt(corpus.bytes / corpus.lines, 0)} B/line`);
if (shaped) log(`shaped corpus ${shaped.file}: ${shaped.lines} lines in ${shaped.events} events, ${fmt(shaped.bytes / MiB, 0)} MiB, ~${fmt(shaped.bytes / shaped.lines, 0)} B/line; event start ${SHAPED_EVENT_START}`);
log(oneCore ? 'senders pinned to CPU 0, receivers to CPU 1' : 'taskset unavailable or one CPU: not pinned');

const plain = () => corpus ?? ensureCorpus(MIN_BYTES, LINE_BYTES, log);
const shapedCorpus = () => shaped ?? ensureCorpus(MIN_BYTES, LINE_BYTES, log, 'shaped');
const runners: Record<RowKey, () => Promise<Row>> = {
  sidecar: () => benchSidecar(plain()),
  'sidecar-otlp': () => benchSidecarOtlp(plain()),
  'sidecar-otlp-zstd': () => benchSidecarOtlp(plain(), 'zstd'),
  'sidecar-http-zstd': () => benchSidecar(plain(), 'zstd'),
  'sidecar-otlp-none': () => benchSidecarOtlp(plain(), 'none'),
  'sidecar-none': () => benchSidecar(plain(), 'none'),
  otelcol: () => benchOtelcol(plain(), undefined),
  'otelcol-gzip1': () => benchOtelcol(plain(), GZIP1),
  'otelcol-zstd': () => benchOtelcol(plain(), ZSTD1),
  rsyslog: () => benchRsyslog(plain()),
  'sidecar-shaped': () => benchSidecarShaped(shapedCorpus(), false),
  'sidecar-parse': () => benchSidecarShaped(shapedCorpus(), true),
  'sidecar-parse-zstd': () => benchSidecarShaped(shapedCorpus(), true, false, false, 'zstd'),
  'sidecar-parse-none': () => benchSidecarShaped(shapedCorpus(), true, false, false, 'none'),
  'sidecar-parse-mask': () => benchSidecarShaped(shapedCorpus(), true, false, true),
  'sidecar-parse-original': () => benchSidecarShaped(shapedCorpus(), true, true),
  // The exporter as in the otelcol-gzip1 row, which the headline ratio uses.
  'otelcol-parse': () => benchOtelcol(shapedCorpus(), GZIP1, SHAPING),
  'otelcol-parse-zstd': () => benchOtelcol(shapedCorpus(), ZSTD1, SHAPING),
};
// Each row runs REPEATS times. A round runs every chosen row once, and each
// round starts one row further down the list, so a drift of the machine over
// the run (another process, the CPU's clock, the page cache) hits every arm
// alike instead of the rows that happen to come last.
const order = ALL_ROWS.filter((k) => ROWS.has(k));
const samples = new Map<RowKey, Row[]>(order.map((k) => [k, []]));
for (let round = 0; round < REPEATS; round++) {
  for (let i = 0; i < order.length; i++) {
    const key = order[(i + round) % order.length]!;
    log(`round ${round + 1}/${REPEATS}: ${key}`);
    samples.get(key)!.push({ ...(await runners[key]()), key });
  }
}
const perCpu = (r: Row) => (r.MiBps * r.seconds) / r.cpuSeconds;
const rows = order.map((k) => summarize(samples.get(k)!, perCpu));
console.log('');
console.log(`medians over ${REPEATS} repeat(s); MiB/cpu_s also as min-max and spread (max/min)`);
console.log('sender                                                     seconds   MiB/s     lines/s   cpu_s  MiB/cpu_s  min-max          spread  peak_rss_MiB  startup_ms');
for (const r of rows) {
  console.log(
    `${r.name.padEnd(58)} ${fmt(r.seconds, 2).padStart(7)} ${fmt(r.MiBps).padStart(7)} ${fmt(r.linesPerSec, 0).padStart(11)} ${fmt(r.cpuSeconds, 2).padStart(6)} ${fmt(r.perCpu).padStart(10)}  ${`${fmt(r.perCpuMin)}-${fmt(r.perCpuMax)}`.padEnd(15)} ${fmt(r.perCpuMax / r.perCpuMin, 2).padStart(6)} ${fmt(r.peakRssMiB).padStart(13)} ${fmt(r.startupMs, 0).padStart(11)}`,
  );
}
// Wall-clock MiB/s suffers when other work shares the machine; MiB per CPU second much less so.
console.log(`load average at the end of the run: ${loadavg().map((l) => fmt(l, 2)).join(' ')}`);
const has = (k: RowKey) => samples.has(k);
/**
 * "<median ratio>x (per repeat <min>-<max>, spread <max/min>)": the figure is
 * the ratio of the two rows' medians; the spread is that of the ratios of the
 * rows' samples taken in the same round, so it shows how far one round's
 * comparison can be trusted.
 */
function ratio(a: RowKey, b: RowKey, metric: (r: Row) => number = perCpu): string {
  const sa = samples.get(a)!;
  const sb = samples.get(b)!;
  const med = median(sa.map(metric)) / median(sb.map(metric));
  const rounds = sa.map((r, i) => metric(r) / metric(sb[i]!));
  const lo = Math.min(...rounds);
  const hi = Math.max(...rounds);
  return `${fmt(med, 2)}x (per repeat ${fmt(lo, 2)}-${fmt(hi, 2)}, spread ${fmt(hi / lo, 2)})`;
}
const throughput = (r: Row) => r.MiBps;
if (has('sidecar-parse') && has('otelcol-parse')) console.log(`ratio sidecar/otelcol per CPU-second with parsing: ${ratio('sidecar-parse', 'otelcol-parse')}`);
if (has('sidecar-parse-mask') && has('otelcol-parse')) console.log(`ratio sidecar/otelcol per CPU-second with parsing, every mask on: ${ratio('sidecar-parse-mask', 'otelcol-parse')}`);
if (has('sidecar-parse-mask') && has('sidecar-parse')) console.log(`ratio sidecar otlp with parsing, every mask on/masks off per CPU-second: ${ratio('sidecar-parse-mask', 'sidecar-parse')}`);
if (has('sidecar-parse-original') && has('otelcol-parse')) console.log(`ratio sidecar/otelcol per CPU-second with parsing, the line beside every JSON record: ${ratio('sidecar-parse-original', 'otelcol-parse')}`);
if (has('sidecar-parse') && (has('sidecar-shaped') || has('sidecar-otlp'))) {
  const base: RowKey = has('sidecar-shaped') ? 'sidecar-shaped' : 'sidecar-otlp';
  const note = base === 'sidecar-shaped' ? 'both on the shaped corpus' : 'without: the otlp row on the plain corpus';
  console.log(`ratio sidecar otlp with parsing/without per CPU-second: ${ratio('sidecar-parse', base)} (${note})`);
}
if (unjoined.length > 0) console.log(`warning: not joined into the corpus's events, so not yet a like-for-like parsing row: ${[...new Set(unjoined)].join('; ')}`);
if (has('sidecar') && has('rsyslog')) console.log(`ratio sidecar/rsyslog throughput: ${ratio('sidecar', 'rsyslog', throughput)}`);
if (has('sidecar-otlp') && has('otelcol')) console.log(`ratio sidecar/otelcol per CPU-second at the collector's default gzip: ${ratio('sidecar-otlp', 'otelcol')}`);
// The codecs: each against the sidecar's gzip row, the Collector at the same
// codec, rsyslog (uncompressed), and the codec's own floor on the sidecar's bodies.
if (has('sidecar-otlp-zstd') && has('sidecar-otlp')) console.log(`ratio sidecar otlp zstd/gzip 1 per CPU-second: ${ratio('sidecar-otlp-zstd', 'sidecar-otlp')}`);
if (has('sidecar-http-zstd') && has('sidecar')) console.log(`ratio sidecar http zstd/gzip 1 per CPU-second: ${ratio('sidecar-http-zstd', 'sidecar')}`);
if (has('sidecar-otlp-none') && has('sidecar-otlp')) console.log(`ratio sidecar otlp none/gzip 1 per CPU-second: ${ratio('sidecar-otlp-none', 'sidecar-otlp')}`);
if (has('sidecar-otlp-zstd') && has('otelcol-zstd')) console.log(`ratio sidecar/otelcol per CPU-second at zstd: ${ratio('sidecar-otlp-zstd', 'otelcol-zstd')}`);
if (has('sidecar-parse-zstd') && has('otelcol-parse-zstd')) console.log(`ratio sidecar/otelcol per CPU-second with parsing at zstd: ${ratio('sidecar-parse-zstd', 'otelcol-parse-zstd')}`);
if (has('sidecar-parse-none') && has('otelcol-parse')) console.log(`ratio sidecar (no compression)/otelcol (gzip 1) per CPU-second with parsing: ${ratio('sidecar-parse-none', 'otelcol-parse')}`);
if (has('sidecar-none') && has('rsyslog')) console.log(`ratio sidecar http no compression/rsyslog per CPU-second: ${ratio('sidecar-none', 'rsyslog')}`);
if (has('sidecar') && has('rsyslog')) console.log(`ratio sidecar http gzip 1/rsyslog per CPU-second: ${ratio('sidecar', 'rsyslog')}`);
const FLOOR_ROWS: ReadonlyArray<readonly [Family, Exclude<Codec, 'none'>, RowKey]> = [
  ['otlp', 'gzip', 'sidecar-otlp'],
  ['otlp', 'zstd', 'sidecar-otlp-zstd'],
  ['http', 'gzip', 'sidecar'],
  ['http', 'zstd', 'sidecar-http-zstd'],
  ['otlp-parse', 'gzip', 'sidecar-parse'],
  ['otlp-parse', 'zstd', 'sidecar-parse-zstd'],
];
for (const [family, codec, key] of FLOOR_ROWS) {
  const cap = captures.get(family);
  if (!cap || !has(key) || cap.bodies.length === 0) continue;
  const floor = measureFloor(cap.bodies, codec);
  const floorPerCpu = floorMiBPerCpuSecond(floor, cap.logBytes, cap.bodyBytes);
  const sidecar = median(samples.get(key)!.map(perCpu));
  console.log(
    `codec floor ${codecName(codec)} on the sidecar's ${family} bodies (${fmt(cap.bodyBytes / cap.logBytes, 2)} body bytes per log byte, compressed to ${fmt(floor.sizeRatio * 100)}%): ${fmt(floorPerCpu)} MiB of log per CPU-second; the sidecar's row at ${fmt(sidecar / floorPerCpu, 2)} of it`,
  );
}
const byKey = (k: RowKey) => rows.find((r) => r.key === k);
const me = byKey('sidecar');
const otlp = byKey('sidecar-otlp');
const collectorGzip1 = byKey('otelcol-gzip1');
const rsyslog = byKey('rsyslog');
if (otlp && collectorGzip1) {
  console.log(`peak RSS sidecar (otlp) ${fmt(otlp.peakRssMiB)} MiB vs otelcol ${fmt(collectorGzip1.peakRssMiB)} MiB`);
  console.log(`ratio sidecar/otelcol per CPU-second: ${ratio('sidecar-otlp', 'otelcol-gzip1')}`);
}
if (me) console.log(`MiBps=${fmt(me.MiBps)} peak_rss_MiB=${fmt(me.peakRssMiB)} startup_ms=${fmt(me.startupMs, 0)} peer_MiBps=${rsyslog ? fmt(rsyslog.MiBps) : 'n/a'}`);
