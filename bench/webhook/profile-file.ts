// `npx tsx bench/webhook/profile-file.ts <file.cpuprofile> [requests]`: the
// top self-time functions and modules of any profile (bench:burst's webhooks
// with BURST_CPU_PROF=<dir>, for one), source-mapped where a bundle has a
// map; with a request count, also per request.
import { readFileSync } from 'node:fs';
import { formatSummary, sourceMapResolver, summarize, type CpuProfile } from './profile-summary.ts';

const [file, requests] = process.argv.slice(2);
if (!file) throw new Error('usage: profile-file.ts <file.cpuprofile> [requests]');
const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
console.log(formatSummary(summarize(profile, Number(process.env.PROFILE_TOP ?? 25), undefined, sourceMapResolver()), requests ? Number(requests) : undefined));
