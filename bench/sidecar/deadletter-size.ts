// `npx tsx bench/sidecar/deadletter-size.ts`: how large the dead-letter file
// grows when the log server refuses everything for good. About 21.9 MB of CRI
// log goes through the bundled sidecar to an HTTP endpoint answering every
// request 401 with a ~190-byte body (what an expired token gets from a typical
// gateway). The state volume is a 64Mi emptyDir in an injected pod; a
// dead-letter file past that gets the pod evicted.
//
// Not a test: it prints figures, and its last line is
//   log_MB=<x> dead_letter_MB=<y> dead_lettered=<n> overflow_lines=<n> outcome=<o> exit=<c>
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SidecarProcess, ensureSidecarBundle, summaryNumber } from '../../test/support/sidecar.ts';
import { ensureCorpus } from './corpus.ts';

const LOG_BYTES = Number(process.env.BENCH_DEADLETTER_BYTES ?? 21.9e6);
const LINE_BYTES = 80;
const BODY = JSON.stringify({ error: 'unauthorized', message: 'The bearer token presented has expired or is not valid for this tenant; request a new token from the identity provider.', code: 'AUTH-401', id: '4f9c2a' });

const log = (m: string) => console.log(`[deadletter] ${m}`);
const MB = (n: number) => (n / 1e6).toFixed(1);

const corpus = ensureCorpus(LOG_BYTES, LINE_BYTES, log);
log(`corpus: ${corpus.lines} lines, ${MB(corpus.bytes)} MB; 401 body ${Buffer.byteLength(BODY)} bytes`);
ensureSidecarBundle();

let requests = 0;
const server = createServer((req, res) => {
  requests++;
  req.resume();
  req.on('end', () => res.writeHead(401, { 'content-type': 'application/json' }).end(BODY));
});
await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
const addr = server.address();
if (!addr || typeof addr === 'string') throw new Error('not listening');

const stateDir = mkdtempSync(join(tmpdir(), 'jh-deadletter-'));
const file = join(stateDir, 'dead-letter.ndjson');
const size = () => {
  try {
    return statSync(file).size;
  } catch {
    return 0;
  }
};
const started = Date.now();
const sidecar = SidecarProcess.start({
  identity: corpus.identity,
  logDir: corpus.podDir,
  stateDir,
  sink: 'http',
  endpoint: `http://127.0.0.1:${addr.port}/insert`,
  settings: { DRAIN_SECONDS: '120' },
  // To see the file without the cap: BENCH_DEADLETTER_MAX_BYTES=1073741824.
  extraEnv: process.env.BENCH_DEADLETTER_MAX_BYTES ? { JOBHARVEST_DEAD_LETTER_MAX_BYTES: process.env.BENCH_DEADLETTER_MAX_BYTES } : {},
});
await sidecar.waitForLog('sidecar started');
// Everything is refused at once; done when the file has stopped growing for a second.
let last = -1;
let stableSince = Date.now();
while (Date.now() - stableSince < 1000) {
  await new Promise((r) => setTimeout(r, 100));
  const now = size();
  if (now !== last || requests === 0) {
    last = now;
    stableSince = Date.now();
  }
}
const exit = await sidecar.stop();
const s = exit.summary ?? {};
log(`${requests} requests in ${((Date.now() - started) / 1000).toFixed(1)} s; summary: ${JSON.stringify(s)}`);
const dl = size();
log(`dead-letter file: ${dl} bytes (${(dl / 2 ** 20).toFixed(1)} MiB) for ${MB(corpus.bytes)} MB of log`);
server.close();
rmSync(stateDir, { recursive: true, force: true });
console.log(
  `log_MB=${MB(corpus.bytes)} dead_letter_MB=${MB(dl)} dead_lettered=${summaryNumber(s, 'lines_dead_lettered')} overflow_lines=${summaryNumber(s, 'dead_letter_overflow_lines') ?? 0} outcome=${String(s.outcome)} exit=${exit.code}`,
);
