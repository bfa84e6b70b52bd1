// `npm run servers:build`: builds or installs every real server the
// integration tests, the e2e tests and the benchmarks use. Idempotent: cached
// builds are reused, installed packages are left alone. `--go-only` skips the
// benchmark's rsyslog and the e2e tests' JobSet, vmauth, KWOK, Prometheus and
// promtool (the integration tests need none of them); `--only a,b` builds just
// the named Go programs (`test:e2e` builds jobset, vmauth, kwok, prometheus and
// promtool that way).
import { JOBSET, KWOK, OTELCOL, PROMETHEUS, PROMTOOL, VICTORIA_LOGS, VMAUTH, ensureGoProgram, pinnedVersion, type GoProgram } from './go-build.ts';
import { ensureOpenSearch, openSearchBuildable } from './opensearch.ts';
import { ensureRsyslog, rsyslogVersion } from './rsyslog.ts';
import { ensureRsyslogReceiver } from './rsyslog-receiver.ts';

const log = (msg: string): void => console.log(`[servers] ${msg}`);

const GO: Array<{ program: GoProgram; pin: string; integration: boolean }> = [
  { program: VICTORIA_LOGS, pin: 'github.com/VictoriaMetrics/VictoriaLogs', integration: true },
  { program: OTELCOL, pin: 'go.opentelemetry.io/collector/otelcol', integration: true },
  { program: JOBSET, pin: 'sigs.k8s.io/jobset', integration: false },
  { program: VMAUTH, pin: 'github.com/VictoriaMetrics/VictoriaMetrics', integration: false },
  { program: KWOK, pin: 'sigs.k8s.io/kwok', integration: false },
  { program: PROMETHEUS, pin: 'github.com/prometheus/prometheus', integration: false },
  { program: PROMTOOL, pin: 'github.com/prometheus/prometheus', integration: false },
];
const goOnly = process.argv.includes('--go-only');

const onlyAt = process.argv.indexOf('--only');
const only = onlyAt >= 0 ? (process.argv[onlyAt + 1] ?? '').split(',').filter(Boolean) : undefined;
if (only) {
  const unknown = only.filter((n) => !GO.some((g) => g.program.name === n));
  if (unknown.length > 0 || only.length === 0) {
    throw new Error(`--only takes a comma-separated list of ${GO.map((g) => g.program.name).join(', ')}; got ${JSON.stringify(process.argv[onlyAt + 1] ?? '')}`);
  }
}

for (const { program, pin, integration } of GO) {
  if (only ? !only.includes(program.name) : goOnly && !integration) continue;
  const bin = ensureGoProgram(program, log);
  log(`${program.name} ${pinnedVersion(program, pin)}: ${bin}`);
}
if (!only) {
  // Needs Java 17 and Maven; without them its tests skip and say why.
  if (openSearchBuildable()) log(`opensearch 2.19 launcher: ${ensureOpenSearch(log)}`);
  else log('opensearch: skipped (java 17 and mvn are needed)');
}
if (!only && !goOnly) {
  const rs = ensureRsyslog(log);
  log(`rsyslogd ${rsyslogVersion()}: ${rs}`);
  // The syslog sink's tests also need the TLS driver and the RELP input.
  ensureRsyslogReceiver(log);
  log('rsyslog TLS (gtls) and RELP modules: present');
}
