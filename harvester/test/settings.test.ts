// The harvester's flags that are not about harvesting: its metrics endpoint,
// its log level (the chart's harvester.logLevel arrives as JOBHARVEST_LOG_LEVEL)
// and the bound of its kept pod reports (harvester.podReportsMiB).
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseSettings } from '../main.ts';

const keyFile = (): string => {
  const f = join(mkdtempSync(join(tmpdir(), 'hv-settings-')), 'key');
  writeFileSync(f, 'MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY');
  return f;
};

describe('harvester settings', () => {
  it('--previous-signing-key-file, repeatable: keys kept to verify, the --signing-key-file one signs', () => {
    const dir = mkdtempSync(join(tmpdir(), 'hv-settings-'));
    const file = (name: string, text: string): string => {
      writeFileSync(join(dir, name), text);
      return join(dir, name);
    };
    const current = file('current', 'the-new-key-the-new-key-32-bytes\n');
    const a = file('a', 'an-older-key-an-older-key-32-byt\n');
    const b = file('b', 'an-oldest-key-an-oldest-key-32by');
    expect(parseSettings(['--signing-key-file', current], {}).signingKeys.previous).toEqual([]);
    const s = parseSettings(['--signing-key-file', current, '--previous-signing-key-file', a, '--previous-signing-key-file', b], {});
    expect(s.signingKeys.current.toString()).toBe('the-new-key-the-new-key-32-bytes');
    expect(s.signingKeys.previous.map(String)).toEqual(['an-older-key-an-older-key-32-byt', 'an-oldest-key-an-oldest-key-32by']);
    // A guessable previous key is refused like a guessable current one.
    expect(() => parseSettings(['--signing-key-file', current, '--previous-signing-key-file', file('short', 'short')], {})).toThrow(/at least 16 bytes/);
  });

  it('no metrics endpoint and info logs unless asked', () => {
    const s = parseSettings(['--signing-key-file', keyFile()], {});
    expect(s.metricsPort).toBe(0);
    expect(s.logLevel).toBe('info');
  });

  it('--metrics-port, and the log level from the flag over JOBHARVEST_LOG_LEVEL', () => {
    const f = keyFile();
    expect(parseSettings(['--signing-key-file', f, '--metrics-port', '9464'], {}).metricsPort).toBe(9464);
    expect(parseSettings(['--signing-key-file', f], { JOBHARVEST_LOG_LEVEL: 'debug' }).logLevel).toBe('debug');
    expect(parseSettings(['--signing-key-file', f, '--log-level', 'warn'], { JOBHARVEST_LOG_LEVEL: 'debug' }).logLevel).toBe('warn');
  });

  it('--pod-reports-mib: the kept reports\' heap, 32 MiB unless asked, at least 1', () => {
    const f = keyFile();
    expect(parseSettings(['--signing-key-file', f], {}).podReportsBytes).toBe(32 * 2 ** 20);
    expect(parseSettings(['--signing-key-file', f, '--pod-reports-mib', '64'], {}).podReportsBytes).toBe(64 * 2 ** 20);
    expect(() => parseSettings(['--signing-key-file', f, '--pod-reports-mib', '0'], {})).toThrow();
  });

  it("--config: the webhook's configuration file, which tells a missed injection as admission would; the webhook's defaults without it", async () => {
    const { missedInjection } = await import('../missed.ts');
    const f = keyFile();
    const cfg = join(mkdtempSync(join(tmpdir(), 'hv-config-')), 'config.yaml');
    writeFileSync(cfg, 'webhookNamespace: logging\nexcludedNamespaces: [batch-legacy]\nsink:\n  type: http\n  endpoint: http://logs.example:8080/ingest\n');
    const s = parseSettings(['--signing-key-file', f, '--config', cfg], {});
    const job = { metadata: { name: 'j', namespace: 'batch-legacy' }, spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: 'busybox' }] } } } };
    const ns = (name: string) => ({ name, annotations: { 'jobharvest.io/inject': 'enabled' } });
    expect(missedInjection(job, ns('batch-legacy'), s.config).missed).toBe(false);
    expect(missedInjection(job, ns('logging'), s.config).missed).toBe(false);
    expect(missedInjection({ ...job, metadata: { name: 'j', namespace: 'team-a' } }, ns('team-a'), s.config)).toEqual({ missed: true, sink: 'http', endpoint: 'http://logs.example:8080/ingest' });
    // Without it: the webhook's defaults, where the chart's own namespace is jobharvest.
    expect(parseSettings(['--signing-key-file', f], {}).config.webhookNamespace).toBe('jobharvest');
    writeFileSync(cfg, 'sink: [not, a, map]\n');
    expect(() => parseSettings(['--signing-key-file', f, '--config', cfg], {})).toThrow();
  });

  it('refuses a level it does not know', () => {
    const f = keyFile();
    expect(() => parseSettings(['--signing-key-file', f], { JOBHARVEST_LOG_LEVEL: 'verbose' })).toThrow(/JOBHARVEST_LOG_LEVEL/);
    expect(() => parseSettings(['--signing-key-file', f, '--log-level', 'trace'], {})).toThrow();
  });
});
