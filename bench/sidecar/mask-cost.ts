// `npx tsx bench/sidecar/mask-cost.ts`: what every built-in mask costs the
// shaping stage, in CPU, against the same stage with masks off. In process,
// no sink: the lines of bench:sidecar's shaped corpus (corpus.ts) go through
// the Shaper with the settings of its sidecar-parse row (the start pattern,
// JSON parsing at the default bounds), as CRI records as the tailer makes
// them, once with JOBHARVEST_MASK unset and once with JOBHARVEST_MASK=all.
// Rounds alternate the two, and each figure is the median of its rounds.
//
// A second pair of rows runs the same corpus with every JSON line serialized
// once more inside a JSON string (`{"log":"{\"ts\":…}","caller":"w\u00f6rker…"}`,
// non-ASCII escaped as Python's json.dumps writes it), so that every such line
// has an escape that may spell a rule's word: the masks then read each string
// decoded, the costly path, which the plain corpus never takes.
//
// Knobs: BENCH_SIDECAR_BYTES (corpus size, default 64 MiB; the corpus is
// cached, shared with bench:sidecar at the same size), BENCH_MASK_ROUNDS
// (default 3).
//
// Not a test: it prints figures. Its last lines are
//   ratio masks on/off per CPU-second, shaped corpus: <r>x
//   ratio masks on/off per CPU-second, JSON serialized in JSON: <r>x
import { readFileSync } from 'node:fs';
import { ENV } from '../../src/contract/env.ts';
import { VERSION } from '../../src/contract/version.ts';
import { testConfig } from '../../test/support/sidecar-helpers.ts';
import { FileProgress } from '../../sidecar/records/progress.ts';
import { CriRecord, type FileMeta, type LogRecord, type Stream } from '../../sidecar/records/record.ts';
import { OtlpEncoder } from '../../sidecar/encode/otlp.ts';
import { Shaper } from '../../sidecar/shape/shaper.ts';
import { parseShaping, type ShapingSettings } from '../../sidecar/shaping-settings.ts';
import { newStats } from '../../sidecar/stats.ts';
import { SHAPED_EVENT_START, ensureCorpus } from './corpus.ts';

const BYTES = Number(process.env.BENCH_SIDECAR_BYTES ?? 64 * 2 ** 20);
const ROUNDS = Number(process.env.BENCH_MASK_ROUNDS ?? 3);
const BATCH = 512;
const log = (m: string) => console.error(`[mask-cost] ${m}`);

const corpus = ensureCorpus(BYTES, 200, log, 'shaped');

function settings(mask: boolean): ShapingSettings {
  const env: Record<string, string> = {
    [ENV.MULTILINE_START.name]: SHAPED_EVENT_START,
    [ENV.MULTILINE_MAX_LINES.name]: '500',
    [ENV.MULTILINE_MAX_BYTES.name]: '262144',
    [ENV.PARSE.name]: 'json',
  };
  if (mask) env[ENV.MASK.name] = 'all';
  const { settings: s, problems } = parseShaping(env, 262_144);
  if (problems.length > 0) throw new Error(problems.join('; '));
  return s;
}

const meta = (): FileMeta => ({ container: 'main', restart: 0, fingerprint: 'fp0000000000000a', key: 'main/0/fp', idPrefix: 'bench-', progress: new FileProgress(0) });

/** The CRI file's lines as CriRecords over one buffer, as the tailer hands them on. */
function records(buf: Buffer, file: FileMeta): LogRecord[] {
  const out: LogRecord[] = [];
  let at = 0;
  while (at < buf.length) {
    let nl = buf.indexOf(10, at);
    if (nl < 0) nl = buf.length;
    const s1 = buf.indexOf(32, at);
    const s2 = buf.indexOf(32, s1 + 1);
    const s3 = buf.indexOf(32, s2 + 1);
    const stream = buf.toString('latin1', s1 + 1, s2) as Stream;
    out.push(CriRecord.of(file, at, stream, buf, at, s1, s3 + 1, nl, nl - at + 1, nl + 1, 0));
    at = nl + 1;
  }
  return out;
}

/** The corpus with each JSON line serialized once more, inside the string of a one-key object. */
function escapedCorpus(buf: Buffer): Buffer {
  const lines = buf.toString('utf8').split('\n');
  for (let i = 0; i < lines.length; i++) {
    const l = lines[i]!;
    const s3 = l.indexOf(' ', l.indexOf(' ', l.indexOf(' ') + 1) + 1);
    // Non-ASCII escaped as Python's json.dumps writes it (`\u00f6`): every such line then has an escape that may spell a rule's word, and no shortcut applies.
    if (l[s3 + 1] === '{') lines[i] = l.slice(0, s3 + 1) + JSON.stringify({ log: l.slice(s3 + 1), caller: 'w\u00f6rker/main.py:42' }).replace('\u00f6', '\\u00f6');
  }
  return Buffer.from(lines.join('\n'));
}

async function run(buf: Buffer, mask: boolean): Promise<{ cpu: number; masked: number; out: number }> {
  const file = meta();
  const all = records(buf, file);
  const stats = newStats();
  let out = 0;
  const shaper = new Shaper(
    settings(mask),
    stats,
    async (r) => {
      out += r.length;
    },
    undefined,
    { jsonPreparer: new OtlpEncoder(testConfig().identity, 'jobharvest', VERSION) },
  );
  const before = process.cpuUsage();
  for (let i = 0; i < all.length; i += BATCH) await shaper.push(all.slice(i, i + BATCH));
  await shaper.flush();
  const used = process.cpuUsage(before);
  return { cpu: (used.user + used.system) / 1e6, masked: stats.masked, out };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const plain = readFileSync(corpus.file);
const escaped = escapedCorpus(plain);
const MiB = 2 ** 20;
const rows: { name: string; bytes: number; off: number; on: number }[] = [];
for (const [name, buf] of [
  ['shaped corpus', plain],
  ['JSON serialized in JSON', escaped],
] as const) {
  const off: number[] = [];
  const on: number[] = [];
  let seen = '';
  for (let r = 0; r < ROUNDS; r++) {
    const a = await run(buf, false);
    const b = await run(buf, true);
    off.push(a.cpu);
    on.push(b.cpu);
    seen = `records ${a.out} (masks off) / ${b.out} (on), matches masked ${b.masked}`;
  }
  log(`${name}: ${seen}`);
  rows.push({ name, bytes: buf.length, off: median(off), on: median(on) });
}
console.log('');
console.log('corpus                      MiB   cpu_s off  cpu_s on  MiB/cpu_s off  MiB/cpu_s on');
for (const r of rows) {
  console.log(`${r.name.padEnd(25)} ${(r.bytes / MiB).toFixed(0).padStart(5)} ${r.off.toFixed(2).padStart(11)} ${r.on.toFixed(2).padStart(9)} ${(r.bytes / MiB / r.off).toFixed(1).padStart(14)} ${(r.bytes / MiB / r.on).toFixed(1).padStart(13)}`);
}
for (const r of rows) console.log(`ratio masks on/off per CPU-second, ${r.name}: ${(r.off / r.on).toFixed(2)}x`);
