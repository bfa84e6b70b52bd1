import { Command, Option } from 'commander';
import { readFileSync } from 'node:fs';
import { ERROR_CODES, JobharvestError } from '../core/errors.ts';
import { VERSION } from '../contract/version.ts';
import { injectManifests, parseManifests, renderManifests } from './manifests.ts';
import { runProgram } from './entry.ts';
import { logsCommand } from './logs-command.ts';
import { statusCommand } from './status-command.ts';
import { loadConfig, type SettingFlags } from './options.ts';
import { webhookOptions, type WebhookFlags } from './webhook-flags.ts';
import type { Settings } from '../core/settings.ts';

function readInput(file: string): { text: string; source: string } {
  try {
    if (file === '-') return { text: readFileSync(0, 'utf8'), source: '<stdin>' };
    return { text: readFileSync(file, 'utf8'), source: file };
  } catch (e) {
    throw new JobharvestError(ERROR_CODES.BAD_INPUT, `cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? String(e)}`);
  }
}

function settingOptions(cmd: Command): Command {
  return cmd
    .requiredOption('-f, --filename <file>', 'manifest file, - for stdin (multi-document YAML or JSON)')
    .addOption(new Option('--mode <mode>', 'log source mode').choices(['node', 'api', 'auto']))
    .option('--sink <sink>', 'sink type (http, loki, elasticsearch, otlp, syslog, forward, stdout)')
    .option('--endpoint <url>', 'sink endpoint')
    .option('--ttl <seconds>', 'ttlSecondsAfterFinished for Jobs that have none')
    .option('--config <file>', 'the configuration file the chart gives the webhook');
}

type FileFlags = SettingFlags & { filename: string };

export function program(): Command {
  const prog = new Command('jobharvest')
    .description('Ships every Kubernetes Job\'s logs before TTL garbage collection deletes it.')
    .version(VERSION)
    .showHelpAfterError(false);

  settingOptions(prog.command('inject').description('print the manifests with the log sidecar injected, as the webhook would'))
    .action((flags: FileFlags) => {
      const config = loadConfig(flags);
      const { text, source } = readInput(flags.filename);
      const { objects, visits } = injectManifests(parseManifests(text, source), config);
      for (const v of visits) for (const w of v.result.warnings) process.stderr.write(`warning: ${v.ref}: ${w}\n`);
      process.stdout.write(renderManifests(objects));
    });

  settingOptions(prog.command('explain').description('say for each Job whether it would be injected, and why'))
    .action((flags: FileFlags) => {
      const config = loadConfig(flags);
      const { text, source } = readInput(flags.filename);
      const { visits } = injectManifests(parseManifests(text, source), config);
      if (visits.length === 0) process.stdout.write('no Job or CronJob found\n');
      for (const v of visits) {
        const d = v.result.decision;
        const line =
          d.action === 'inject'
            ? `${v.ref}: inject (mode=${d.mode}, sink=${d.settings.sink}, ttlSecondsAfterFinished=${d.ttlSecondsAfterFinished ?? `unset (sink ${d.settings.sink} is not durable)`}, drainSeconds=${d.settings.drainSeconds}${d.settings.tenant !== undefined ? `, tenant=${d.settings.tenant}` : ''}${shapingSummary(d.settings)})`
            : `${v.ref}: skip (${d.reason}): ${d.detail}`;
        process.stdout.write(line + '\n');
        for (const w of v.result.warnings) process.stdout.write(`  warning: ${w}\n`);
      }
    });

  prog
    .command('webhook')
    .description('serve the admission webhook (with --standalone: no cluster, a self-generated certificate; without a kubeconfig or token otherwise it refuses to start)')
    .option('--config <file>', 'configuration file')
    .option('--host <host>', 'listen address', '127.0.0.1')
    .option('--port <port>', 'listen port', '8443')
    .option('--kubeconfig <file>', 'kubeconfig (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)')
    .option('--standalone', 'never talk to a cluster: every namespace not excluded counts as opted in')
    .option('--ca-out <file>', 'standalone: write the generated CA here')
    .option('--webhook-url <url>', 'out of cluster: register a URL-based webhook at this address, with a local certificate')
    .option('--failure-policy <policy>', 'with --webhook-url: Ignore or Fail', 'Ignore')
    .option('--cert-mode <mode>', 'in cluster: auto, cert-manager or provided', 'auto')
    .option('--namespace <ns>', 'the webhook\'s namespace (default $POD_NAMESPACE)')
    .option('--service-name <name>', 'Service name, for the certificate SANs', 'jobharvest')
    .option('--cert-secret <name>', 'auto mode: Secret holding CA and serving certificate (default <service-name>-tls)')
    .option('--extra-dns-names <list>', 'more DNS SANs, comma-separated')
    .option('--extra-ips <list>', 'IP SANs, comma-separated')
    .option('--webhook-config-name <name>', 'MutatingWebhookConfiguration whose caBundle is reconciled (auto) or checked')
    .option('--tls-cert <file>', 'cert-manager/provided: serving certificate (PEM), reloaded on change')
    .option('--tls-key <file>', 'cert-manager/provided: serving key (PEM)')
    .option('--log-reader-clusterrole <name>', 'api mode: ClusterRole bound in opted-in namespaces', 'jobharvest-log-reader')
    .option('--no-api-rbac', 'do not manage the api-mode RoleBindings')
    .option('--signing-key-file <file>', 'sign each injection with this key, so the harvester can tell it from a forgery (without it, no Job is ever harvested)')
    .option('--signing-secret <name>', 'in cluster: the Secret (in --namespace) holding the signing key; created once with a random key if absent')
    .option('--harvester-service-account <name>', "the harvester's service account in the webhook's namespace, bound to the log reader in opted-in namespaces (default: no binding, e.g. out of cluster)")
    .option('--cert-interval-seconds <s>', 'how often the certificate Secret is checked', '30')
    .option('--cabundle-interval-seconds <s>', 'how often the caBundle is checked', '30')
    .option('--timeout-seconds <s>', "the webhook configuration's timeoutSeconds (1-30): request, connection and keep-alive timeouts and the connection cap follow from it", '10')
    .option('--shutdown-delay-seconds <s>', 'after SIGTERM, keep serving (not ready) this long before closing, so the API server stops sending reviews first (0-60)', '0')
    .action(async (flags) => {
      const options = webhookOptions(flags as WebhookFlags);
      const { runWebhook } = await import('../webhook/run.ts');
      await runWebhook(options);
    });

  prog.addCommand(logsCommand());
  prog.addCommand(statusCommand());

  prog
    .command('sidecar')
    .description('run the log-shipping sidecar (configured through JOBHARVEST_* env; see sidecar --help)')
    .allowUnknownOption(true)
    .helpOption(false)
    .argument('[args...]')
    .action(async () => {
      // The sidecar is its own bundle so it starts without loading the webhook's modules.
      const url = new URL('./sidecar.mjs', import.meta.url);
      await import(url.href);
    });
  return prog;
}

export async function main(argv: string[]): Promise<void> {
  await runProgram(program(), argv);
}

/** Shaping appears only when on, so the line of a Job without it reads as before. */
function shapingSummary(s: Settings): string {
  const parts: string[] = [];
  if (s.multiline.length) parts.push(`multiline=${s.multiline.join(',')}`);
  if (s.multilineStart !== undefined) parts.push(`multilineStart=${JSON.stringify(s.multilineStart)}`);
  if (s.parse === 'json') parts.push('parse=json');
  return parts.map((p) => `, ${p}`).join('');
}
