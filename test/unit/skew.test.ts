/**
 * The skew contract (docs/operations.md, "Upgrading"): the harvester and the
 * logs command of this release accept what the sidecars, webhooks and
 * harvesters of the two previous minor versions wrote. Each such release's
 * writings are recorded by its own code in test/golden/skew/<version>/
 * (`npm run golden:skew -- <version>`; recorded.json says how and from
 * which commit); this file reads them with this release's code.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { V1Job, V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { deliveryRecordOf, holdOf } from '../../harvester/hold.ts';
import { deliveryOf, injectionStatus, needsHarvest, podOutcome } from '../../harvester/report.ts';
import { ownedPods, verifyInjection } from '../../harvester/trust.ts';
import { checkRecord } from '../../src/cli/status/rows.ts';
import { NAMES } from '../../src/contract/env.ts';
import { parseDelivery } from '../../src/contract/harvest.ts';
import { DOCUMENT_FIELDS } from '../../src/contract/record.ts';
import { keyFromText, keyRing } from '../../src/contract/signature.ts';
import { decodeTermination } from '../../src/contract/termination.ts';
import { VERSION } from '../../src/contract/version.ts';
import { compareVersions, releases } from '../harness/release/release.ts';

const SKEW = new URL('../golden/skew/', import.meta.url).pathname;
/** How many minor versions back the policy reaches. */
const SUPPORTED_MINORS_BACK = 2;

const recorded = readdirSync(SKEW, { withFileTypes: true })
  .filter((e) => e.isDirectory())
  .map((e) => e.name)
  .sort(compareVersions);
const read = (version: string, file: string) => readFileSync(join(SKEW, version, file), 'utf8');
const readJson = <T>(version: string, file: string) => JSON.parse(read(version, file)) as T;

/** Released versions the policy covers for `current`: same major, at most two minors back. */
function covered(current: string): string[] {
  const [major, minor] = current.split('.').map(Number) as [number, number];
  return releases()
    .map((r) => r.version)
    .filter((v) => {
      const [ma, mi] = v.split('.').map(Number) as [number, number];
      return compareVersions(v, current) < 0 && ma === major && mi >= minor - SUPPORTED_MINORS_BACK;
    });
}

/** A pod of the Job as the Job controller creates it: the template, owned by the Job, its sidecar terminated with `message`. */
function podOf(job: V1Job, message: string, n: number): V1Pod {
  return {
    metadata: { name: `${job.metadata!.name}-${n}`, namespace: job.metadata!.namespace, uid: `pod-${n}`, ownerReferences: [{ apiVersion: 'batch/v1', kind: 'Job', name: job.metadata!.name!, uid: job.metadata!.uid!, controller: true }] },
    spec: job.spec!.template.spec!,
    status: {
      phase: 'Succeeded',
      initContainerStatuses: [{ name: NAMES.container, image: '', imageID: '', ready: false, restartCount: 0, state: { terminated: { exitCode: 0, message } } }],
    },
  };
}

describe('the skew policy', () => {
  it(`has golden files for every release ${SUPPORTED_MINORS_BACK} minor versions back from ${VERSION}, each from a listed commit`, () => {
    expect(covered(VERSION).length, 'a release before this one to check against').toBeGreaterThan(0);
    for (const v of covered(VERSION)) expect(recorded, `test/golden/skew/${v}/ (npm run golden:skew -- ${v})`).toContain(v);
    const commits = new Map(releases().map((r) => [r.version, r.sha]));
    for (const v of recorded) {
      expect(commits.has(v), `${v} is in releases.json`).toBe(true);
      expect(readJson<{ version: string; commit: string }>(v, 'recorded.json')).toMatchObject({ version: v, commit: commits.get(v) });
    }
  });
});

describe.each(recorded)('what release %s wrote, read by this one', (version) => {
  const key = keyFromText(read(version, 'key.txt'));
  // After an upgrade that also rotated the key, the old one verifies as a previous key.
  const rings = { 'the same key': key, 'a previous key': keyRing(keyFromText('another signing key, rotated in since'), [key]) };

  it.each(['node', 'api'])('a Job its webhook injected in %s mode: the injection verifies and its status reads', (mode) => {
    const job = readJson<V1Job>(version, `job-${mode}.json`);
    for (const [name, keys] of Object.entries(rings)) {
      const v = verifyInjection(job, keys);
      expect(v, name).toMatchObject({ ok: true, value: { status: { version, mode, sink: 'loki', container: NAMES.container } } });
    }
    expect(injectionStatus(job)).toMatchObject({ version, mode });
    // Its pods carry exactly the signed sidecar: the harvester owns them.
    const signed = verifyInjection(job, key);
    if (!signed.ok) throw new Error(signed.why);
    expect(ownedPods(job, [podOf(job, '', 0)], { name: signed.value.status.container, digest: signed.value.sidecarDigest })).toMatchObject({ foreign: 0 });
  });

  it("its sidecar's termination messages: the counts after a drain, the resume position after a kill", () => {
    const job = readJson<V1Job>(version, 'job-node.json');
    const { written, summary } = readJson<{ written: number; summary: Record<string, number> }>(version, 'summary-complete.json');
    const complete = decodeTermination(read(version, 'termination-complete.txt'));
    expect(complete).toMatchObject({ state: 'complete', mode: 'node', shipped: written, unsent: 0, dead_lettered: 0, runs: [] });
    expect(summary.lines_shipped).toBe(written);
    const running = decodeTermination(read(version, 'termination-running.txt'));
    expect(running?.state).toBe('running');
    expect(running!.runs.length + running!.done.length).toBeGreaterThan(0);

    const done = podOutcome(podOf(job, read(version, 'termination-complete.txt'), 0), NAMES.container);
    const killed = podOutcome(podOf(job, read(version, 'termination-running.txt'), 1), NAMES.container);
    expect(done.sidecar.kind).toBe('reported');
    expect(needsHarvest(done.sidecar)).toBe(false);
    expect(needsHarvest(killed.sidecar)).toBe(true);
    expect(deliveryOf('loki', [done])).toEqual({ sink: 'loki', pods: 1, shipped: written, lost: 0, unaccounted: 0 });
  });

  it("its sidecar's records carry every field the logs command queries by", () => {
    const lines = read(version, 'records.ndjson').trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.length).toBe(readJson<{ written: number }>(version, 'summary-complete.json').written);
    const always = [DOCUMENT_FIELDS.time, DOCUMENT_FIELDS.message, DOCUMENT_FIELDS.namespace, DOCUMENT_FIELDS.job, DOCUMENT_FIELDS.pod, DOCUMENT_FIELDS.podUid, DOCUMENT_FIELDS.container, DOCUMENT_FIELDS.restart, DOCUMENT_FIELDS.node, DOCUMENT_FIELDS.stream, DOCUMENT_FIELDS.id];
    for (const r of lines) for (const f of always) expect(r, f).toHaveProperty([f]);
    expect(new Set(lines.map((r) => r[DOCUMENT_FIELDS.id])).size).toBe(lines.length);
  });

  it("its harvester's delivery record and hold verify, for the harvester and for the status command", () => {
    const d = readJson<{ job: V1Job; value: Record<string, unknown>; annotation: string }>(version, 'delivery.json');
    const h = readJson<{ job: V1Job; value: Record<string, unknown>; annotation: string }>(version, 'hold.json');
    for (const [name, keys] of Object.entries(rings)) {
      const job: V1Job = { metadata: { ...d.job.metadata, annotations: { 'jobharvest.io/delivery': d.annotation } } };
      expect(deliveryRecordOf(job, keys), name).toEqual(d.value);
      expect(parseDelivery(deliveryRecordOf(job, keys))).toEqual(d.value);
      const held: V1Job = { metadata: { ...h.job.metadata, annotations: { 'jobharvest.io/hold': h.annotation } } };
      expect(holdOf(held, keys), name).toEqual(h.value);
    }
    const job: V1Job = { metadata: { ...d.job.metadata, annotations: { 'jobharvest.io/delivery': d.annotation } } };
    expect(checkRecord(job as never, [key])).toMatchObject({ state: 'verified', delivery: d.value });
    // Bound to its Job: not another's.
    expect(deliveryRecordOf({ metadata: { ...job.metadata, uid: 'another' } }, key)).toBeUndefined();
  });

  it('is recorded whole', () => {
    for (const f of ['key.txt', 'job-node.json', 'job-api.json', 'termination-complete.txt', 'termination-running.txt', 'summary-complete.json', 'records.ndjson', 'delivery.json', 'hold.json', 'recorded.json']) {
      expect(existsSync(join(SKEW, version, f)), f).toBe(true);
    }
  });
});
