import { Command, Option } from 'commander';
import { runLogs, type LogsFlags } from './logs.ts';

/** `logs`, shared by the CLI and the standalone kubectl plugin (src/cli/plugin.ts). */
export function logsCommand(): Command {
  return new Command('logs')
    .description("print a Job's logs from the log server, also after the Job is gone (kubectl jobharvest logs job/NAME); cronjob/NAME lists a CronJob's runs, newest first")
    .argument('<job>', 'job/NAME, or cronjob/NAME')
    .option('--run <n>', 'with cronjob/NAME: print this run\'s logs: 1 is the newest, 2 the one before, or a Job\'s name')
    .option('-n, --namespace <ns>', "the Job's namespace (default: the kubeconfig context's)")
    .option('-c, --container <name>', 'only this container (default: the Job\'s default container while it exists)')
    .option('--all-containers', 'every container of the pods, init containers included')
    .option('--since <duration>', 'only lines newer than this, e.g. 5s, 2m, 3h')
    .option('--since-time <time>', 'only lines at or after this RFC 3339 time')
    .option('--tail <n>', 'only the last n lines (-1: all)')
    .option('--timestamps', 'start each line with its CRI timestamp')
    .option('--prefix', 'start each line with [pod/NAME/CONTAINER]')
    .option('-p, --previous', "each container's run before its latest restart")
    .option('--pod <name>', 'only this pod (of an Indexed or retried Job)')
    .option('-o, --output <format>', 'json: one JSON object per line')
    .option('--raw', "on a terminal, print the lines' control characters (ESC, CR, ...) as they are instead of as escapes such as \\x1b")
    .option('--explain', 'print where the logs would be read from, and why, without querying')
    .option('--kubeconfig <file>', 'kubeconfig (default: $KUBECONFIG, then ~/.kube/config)')
    .option('--context <name>', 'kubeconfig context')
    .option('--chart-namespace <ns>', "with more than one release installed: the namespace of the one whose configuration to read (found through its MutatingWebhookConfiguration)")
    .option('--release <name>', 'with more than one release in a namespace: its Helm release name')
    .option('--query-endpoint <url>', 'query API base URL (overrides annotations and the chart)')
    .option('--query-type <type>', 'victorialogs, loki or elasticsearch')
    .option('--es-index <index>', 'elasticsearch: index or data stream')
    .option('--loki-tenant <tenant>', 'loki: X-Scope-OrgID')
    .option('--token-file <file>', 'bearer token for the query API (or $JOBHARVEST_QUERY_TOKEN)')
    .option('--username <name>', 'basic auth user for the query API, with --password-file')
    .option('--password-file <file>', 'basic auth password')
    .option('--ca-file <file>', 'CA certificate (PEM) of the query API')
    .option('-f, --follow', 'keep printing lines as they reach the log server, until the Job is done and its delivery is recorded')
    .addOption(new Option('--follow-lag <duration>', 'with --follow: print lines once they are this old (default 5s)').hideHelp())
    .addOption(new Option('--poll-interval <duration>', 'with --follow: how often to ask the log server (default 1s)').hideHelp())
    .option('--trust-endpoint <url>', 'send the credentials to this query endpoint although an annotation chose it')
    .addOption(new Option('--page-size <n>', 'lines per query page').hideHelp())
    .action(async (ref: string, flags: LogsFlags) => {
      process.exitCode = await runLogs(ref, flags);
    });
}
