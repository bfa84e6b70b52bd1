import type { Command } from 'commander';
import { ERROR_CODES, JobharvestError } from '../core/errors.ts';
import { applyPolicy, controlPolicy, isTerminal } from './terminal.ts';

// An error may quote what a server answered (the log server's error body, say): escaped on a terminal.
const printable = (s: string) => applyPolicy(controlPolicy(isTerminal(process.stderr)), s);

/** Runs a command line; errors become one line on stderr and an exit code. */
export async function runProgram(prog: Command, argv: string[]): Promise<void> {
  try {
    await prog.parseAsync(argv);
  } catch (e) {
    if (e instanceof JobharvestError) {
      process.stderr.write(`jobharvest: error ${e.code}: ${printable(e.message)}\n`);
      process.exitCode = 2;
      process.stdout.write('', () => process.exit());
      return;
    }
    process.stderr.write(`jobharvest: error ${ERROR_CODES.INTERNAL}: ${printable((e as Error)?.message ?? String(e))}\n`);
    process.exitCode = 1;
    // A webhook that failed to start may still hold watches and timers open;
    // exit once stdout is flushed so that the kubelet restarts it.
    process.stdout.write('', () => process.exit());
  }
}
