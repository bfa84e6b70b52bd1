// The kubectl plugin as a standalone executable (scripts/plugin.mjs builds it
// into a Node single-executable application): kubectl runs
// `kubectl-jobharvest logs ...` for `kubectl jobharvest logs ...`. Only the
// logs and status commands, so the executable carries neither the webhook nor
// the sidecar.
import { Command } from 'commander';
import { VERSION } from '../contract/version.ts';
import { runProgram } from './entry.ts';
import { logsCommand } from './logs-command.ts';
import { statusCommand } from './status-command.ts';

export function pluginProgram(): Command {
  return new Command('kubectl-jobharvest')
    .description("jobharvest's kubectl plugin: kubectl jobharvest logs job/NAME reads a Job's logs from the log server, also after the Job is gone; kubectl jobharvest status lists where each Job's logs went")
    .version(VERSION)
    .showHelpAfterError(false)
    .addCommand(logsCommand())
    .addCommand(statusCommand());
}

void runProgram(pluginProgram(), process.argv);
