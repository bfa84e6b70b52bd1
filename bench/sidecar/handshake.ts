// `npx tsx bench/sidecar/handshake.ts`: what the start-up handshake costs the
// sidecar's container. Starts the bundled sidecar (with the injected node
// flags) and, at the same moment, its postStart hook, as the kubelet does, and
// measures the hook: its duration, its peak RSS (VmHWM), and the peak of
// sidecar + hook RSS while it runs (both share the container's memory limit).
// Compares the configured hook (the sidecar bundle with --wait-started) with
// a `node -e` script doing the same wait. Either must return only once the
// sidecar wrote its marker (SIGTERM handler in place): checked on every run.
//
// Not a test: it prints medians over BENCH_HANDSHAKE_RUNS runs (default 10).
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defaultConfig } from '../../src/core/config.ts';
import { ENV } from '../../src/contract/env.ts';
import { SIDECAR_BUNDLE, SidecarProcess, ensureSidecarBundle } from '../../test/support/sidecar.ts';
import { exited, track } from '../../test/support/process.ts';

const RUNS = Number(process.env.BENCH_HANDSHAKE_RUNS ?? 10);
const IDENTITY = { namespace: 'bench', pod: 'handshake-x', uid: '0b1c2d3e-4f50-4617-8829-3a4b5c6d7e8f' };

/** The same wait as sidecar/started.ts's waitStarted, without loading the sidecar. */
const INLINE_HOOK =
  `const f=require("path").join(process.env.${ENV.STATE_DIR.name}||${JSON.stringify(ENV.STATE_DIR.default)},"started"),fs=require("fs"),t=Date.now()+10000;` +
  '(function w(){if(fs.existsSync(f))return;if(Date.now()>t)return;setTimeout(w,20)})()';

function kB(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  try {
    const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

interface Run {
  hookMs: number;
  hookPeakMiB: number;
  togetherPeakMiB: number;
  sidecarRssMiB: number;
}

async function once(command: string[]): Promise<Run> {
  const dir = mkdtempSync(join(tmpdir(), 'jh-handshake-'));
  const logDir = join(dir, 'pods', `${IDENTITY.namespace}_${IDENTITY.pod}_${IDENTITY.uid}`);
  const stateDir = join(dir, 'state');
  mkdirSync(logDir, { recursive: true });
  mkdirSync(stateDir);
  const sidecar = SidecarProcess.start({ identity: IDENTITY, logDir, stateDir, sink: 'stdout' });
  // The image's paths, mapped to this machine.
  const [bin, ...args] = command.map((a) => (a === '/nodejs/bin/node' ? process.execPath : a === '/app/sidecar.mjs' ? SIDECAR_BUNDLE : a));
  const started = performance.now();
  const hook = spawn(bin!, args, { env: { PATH: process.env.PATH ?? '/usr/bin:/bin', [ENV.STATE_DIR.name]: stateDir }, stdio: 'ignore' });
  track(hook);
  let hookPeak = 0;
  let together = 0;
  const sample = () => {
    const h = kB(hook.pid!, 'VmHWM');
    hookPeak = Math.max(hookPeak, h);
    together = Math.max(together, kB(hook.pid!, 'VmRSS') + kB(sidecar.pid, 'VmRSS'));
  };
  const timer = setInterval(sample, 2);
  const exit = await exited(hook);
  const hookMs = performance.now() - started;
  clearInterval(timer);
  const markerThere = existsSync(join(stateDir, 'started'));
  // Settle: the sidecar's own RSS once started, for scale.
  await new Promise((r) => setTimeout(r, 300));
  const sidecarRss = kB(sidecar.pid, 'VmRSS');
  await sidecar.stop();
  rmSync(dir, { recursive: true, force: true });
  if (exit.code !== 0) throw new Error(`hook exited ${exit.code ?? exit.signal}`);
  if (!markerThere) throw new Error('the hook returned before the sidecar reported started');
  return { hookMs, hookPeakMiB: hookPeak / 1024, togetherPeakMiB: together / 1024, sidecarRssMiB: sidecarRss / 1024 };
}

const median = (xs: number[]) => xs.toSorted((a, b) => a - b)[Math.floor(xs.length / 2)]!;

ensureSidecarBundle();
const variants: Array<[string, string[]]> = [
  ['configured: bundle --wait-started', [...defaultConfig().sidecar.startedCommand]],
  ['node -e script', ['/nodejs/bin/node', '-e', INLINE_HOOK]],
];
const results = new Map<string, Run[]>(variants.map(([n]) => [n, []]));
for (let i = 0; i < RUNS; i++) {
  // Alternate, so drift in the machine's load hits both alike.
  for (const [name, cmd] of variants) results.get(name)!.push(await once(cmd));
}
console.log(`medians of ${RUNS} runs`);
console.log('hook                                  hook_ms  hook_peak_MiB  sidecar+hook_peak_MiB  sidecar_started_MiB');
for (const [name, runs] of results) {
  console.log(
    `${name.padEnd(36)} ${median(runs.map((r) => r.hookMs)).toFixed(0).padStart(8)} ${median(runs.map((r) => r.hookPeakMiB)).toFixed(1).padStart(14)} ${median(runs.map((r) => r.togetherPeakMiB)).toFixed(1).padStart(22)} ${median(runs.map((r) => r.sidecarRssMiB)).toFixed(1).padStart(20)}`,
  );
}
