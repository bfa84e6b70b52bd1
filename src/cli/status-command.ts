import { Command, Option } from 'commander';
import type { StatusFlags } from './status/options.ts';

/** `status`, shared by the CLI and the standalone kubectl plugin (src/cli/plugin.ts). */
export function statusCommand(): Command {
  return new Command('status')
    .description("list Jobs with where their logs went: injected, sink, lines shipped / harvested / lost, the delivery record verified or not, the TTL, the logs link (kubectl jobharvest status; exit code 1 when a listed Job lost lines)")
    .argument('[job]', 'job/NAME for one Job, cronjob/NAME for a CronJob\'s runs (default: every Job of the namespace)')
    .option('-n, --namespace <ns>', "the namespace (default: the kubeconfig context's)")
    .option('-A, --all-namespaces', 'every namespace')
    .option('-l, --selector <selector>', 'label selector, as kubectl takes it (e.g. team=a,tier!=batch)')
    .option('-o, --output <format>', 'wide, json or yaml')
    .option('-w, --watch', 'after the list, print a row each time a Job changes')
    .option('--raw', "on a terminal, print control characters in annotations as they are instead of as escapes such as \\x1b")
    .option('--kubeconfig <file>', 'kubeconfig (default: $KUBECONFIG, then ~/.kube/config)')
    .option('--context <name>', 'kubeconfig context')
    .option('--chart-namespace <ns>', 'with more than one release installed: the namespace of the one whose signing key checks the records')
    .option('--release <name>', 'with more than one release in a namespace: its Helm release name')
    .option('--signing-secret <name>', "the signing key Secret in the release's namespace, when the chart's signing.existingSecret names it (default: <release>-signing)")
    .addOption(new Option('--page-size <n>', 'Jobs per list call (default 500)').hideHelp())
    .action(async (ref: string | undefined, flags: StatusFlags) => {
      const { runStatus } = await import('./status/run.ts');
      process.exitCode = await runStatus(ref, flags);
    });
}
