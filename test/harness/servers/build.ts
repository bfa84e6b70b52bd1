// `npm run servers:build`: builds or installs every real server the
// integration tests and the benchmarks use. Idempotent: cached builds are
// reused, installed packages are left alone. `--go-only` skips the benchmark's
// rsyslog (the integration tests need only the Go-built servers).
import { OTELCOL, VICTORIA_LOGS, ensureGoProgram, pinnedVersion } from './go-build.ts';
import { ensureOpenSearch, openSearchBuildable } from './opensearch.ts';
import { ensureRsyslog, rsyslogVersion } from './rsyslog.ts';
import { ensureRsyslogReceiver } from './rsyslog-receiver.ts';

const log = (msg: string): void => console.log(`[servers] ${msg}`);

const vl = ensureGoProgram(VICTORIA_LOGS, log);
log(`victoria-logs ${pinnedVersion(VICTORIA_LOGS, 'github.com/VictoriaMetrics/VictoriaLogs')}: ${vl}`);
const oc = ensureGoProgram(OTELCOL, log);
log(`otelcol ${pinnedVersion(OTELCOL, 'go.opentelemetry.io/collector/otelcol')}: ${oc}`);
// Needs Java 17 and Maven; without them its tests skip and say why.
if (openSearchBuildable()) log(`opensearch 2.19 launcher: ${ensureOpenSearch(log)}`);
else log('opensearch: skipped (java 17 and mvn are needed)');
if (!process.argv.includes('--go-only')) {
  const rs = ensureRsyslog(log);
  log(`rsyslogd ${rsyslogVersion()}: ${rs}`);
  // The syslog sink's tests also need the TLS driver and the RELP input.
  ensureRsyslogReceiver(log);
  log('rsyslog TLS (gtls) and RELP modules: present');
}
