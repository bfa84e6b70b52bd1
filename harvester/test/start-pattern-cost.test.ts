// A tenant's start pattern through the harvester's shipping path (the pod's
// signed shaping on the sidecar's engine, reading pods/log of the fake API
// server): the report's pattern is dropped with a warning, the worst accepted
// one ships 256 KiB lines within a few times what `^\d` takes on the same
// lines. Ratios in the same run, not absolute times.
import { readFile } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { FakeKube } from '../../test/support/fake-kube.ts';
import { costlyLines, HOSTILE, LINE, PLAIN, worstAccepted } from '../../test/support/start-pattern-lines.ts';
import { NdjsonReceiver } from '../../test/support/ndjson-receiver.ts';
import { parseDestinations } from '../destinations.ts';
import { DEFAULT_LIMITS, podShaping, shipPod } from '../ship.ts';

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const ts = (i: number): string => new Date(Date.UTC(2026, 0, 1, 0, 0, 0) + i * 250).toISOString().replace('Z', '000000Z');
const sidecarEnv = (pattern: string) => [
  { name: 'JOBHARVEST_MULTILINE_START', value: pattern },
  { name: 'JOBHARVEST_MULTILINE_MAX_BYTES', value: String(LINE) },
];

/** Milliseconds for the harvester to ship a finished pod's `lines` (no sidecar position: all of them) with this start pattern in its sidecar's env. */
async function harvestTime(pattern: string, lines: string[]): Promise<number> {
  const kube = await new FakeKube({ main: ['main'] }).start();
  cleanups.push(() => kube.stop());
  const sink = await new NdjsonReceiver().start();
  cleanups.push(() => sink.stop());
  kube.run('main', 0);
  kube.append('main', 0, lines.map((msg, i) => ({ ts: ts(i), msg })));
  kube.terminate('main');
  const ca = await readFile(`${kube.tokenDir}/ca.crt`);
  const t = performance.now();
  const r = await shipPod({
    pod: { metadata: { name: kube.name, namespace: kube.namespace, uid: kube.uid, labels: { 'batch.kubernetes.io/job-name': 'job-abc' } }, spec: { containers: [{ name: 'jobharvest', env: sidecarEnv(pattern) }], nodeName: 'n1' } },
    sidecar: 'jobharvest',
    message: undefined,
    destination: parseDestinations([{ name: 'logs', sink: 'http', endpoint: sink.url, allow: ['loopback'] }])[0]!,
    kube: { apiUrl: new URL(kube.url), credentials: async () => ({ token: 'token-1', ca }) },
    limits: { ...DEFAULT_LIMITS, batchMaxWaitMs: 20 },
    deadlineMs: 60_000,
    signal: new AbortController().signal,
  });
  const ms = performance.now() - t;
  expect(r).toEqual({ missing: lines.length, shipped: lines.length, lost: 0 });
  expect(sink.accepted.map((d) => String(d.message).length)).toEqual(lines.map((l) => l.length));
  return ms;
}

describe('harvester: a tenant\'s start pattern', () => {
  it('the report\'s pattern is not applied: the pod ships unshaped (its masks kept), within 3x the time of ^\\d on the same lines', async () => {
    const pod = { spec: { containers: [{ name: 'jobharvest', env: [...sidecarEnv(HOSTILE), { name: 'JOBHARVEST_MASK', value: 'bearer' }] }] } };
    expect(podShaping(pod, 'jobharvest', LINE)).toEqual({ mask: { rules: ['bearer'], patterns: [], replacement: '[MASKED]' } });
    const lines = costlyLines(16);
    const plain: number[] = [];
    const hostile: number[] = [];
    for (let i = 0; i < 2; i++) {
      plain.push(await harvestTime(PLAIN, lines));
      hostile.push(await harvestTime(HOSTILE, lines));
    }
    const ratio = Math.min(...hostile) / Math.min(...plain);
    console.log(`harvester, report's pattern: ^\\d ${plain.map((x) => x.toFixed(0)).join(', ')} ms; ${hostile.map((x) => x.toFixed(0)).join(', ')} ms; ratio ${ratio.toFixed(2)}`);
    expect(ratio).toBeLessThan(3);
  }, 120_000);

  it('the worst accepted pattern ships 256 KiB lines within 3x the time of ^\\d on the same lines', async () => {
    const worst = worstAccepted();
    const pod = { spec: { containers: [{ name: 'jobharvest', env: sidecarEnv(worst) }] } };
    expect(podShaping(pod, 'jobharvest', LINE)?.multiline?.start).toBe(worst);
    const lines = costlyLines(16);
    const plain: number[] = [];
    const hostile: number[] = [];
    for (let i = 0; i < 2; i++) {
      plain.push(await harvestTime(PLAIN, lines));
      hostile.push(await harvestTime(worst, lines));
    }
    const ratio = Math.min(...hostile) / Math.min(...plain);
    console.log(`harvester, worst accepted: ^\\d ${plain.map((x) => x.toFixed(0)).join(', ')} ms; ${hostile.map((x) => x.toFixed(0)).join(', ')} ms; ratio ${ratio.toFixed(2)}`);
    expect(ratio).toBeLessThan(3);
  }, 120_000);
});
