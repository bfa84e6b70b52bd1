// `npx tsx bench/webhook/profile-file.ts <file.cpuprofile> [requests]`: the
// top self-time functions and modules of any profile, source-mapped where a
// bundle has a map; with a request count, also per request. A profile of
// bench:burst's webhooks (BURST_CPU_PROF=<dir>) is restricted to that
// webhook's own bursts, and per Job, through <dir>/windows.json.
import { existsSync, readFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { formatSummary, sourceMapResolver, summarize, type CpuProfile, type Window } from './profile-summary.ts';

const [file, requests] = process.argv.slice(2);
if (!file) throw new Error('usage: profile-file.ts <file.cpuprofile> [requests]');
const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
// CPU.<date>.<time>.<pid>.<thread>.<seq>.cpuprofile
const pid = basename(file).split('.')[3];
const windowsFile = join(dirname(file), 'windows.json');
const burst = existsSync(windowsFile) ? (JSON.parse(readFileSync(windowsFile, 'utf8')) as Record<string, { arm: string; jobs: number; windows: Window[] }>)[pid ?? ''] : undefined;
if (burst) console.log(`${burst.arm}: ${burst.windows.length} bursts, ${burst.jobs} Jobs`);
const n = requests ? Number(requests) : burst?.jobs;
console.log(formatSummary(summarize(profile, Number(process.env.PROFILE_TOP ?? 25), burst?.windows, sourceMapResolver()), n));
