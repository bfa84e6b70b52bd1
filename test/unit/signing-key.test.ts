import type { V1Job } from '@kubernetes/client-node';
import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { checkSignature, keyId, keyRing, PURPOSE, sign, SIGNATURE_ANNOTATION, signingKeyOf, verify } from '../../src/contract/signature.ts';
import { deliveryRecordOf, encodeDeliveryRecord, HOLD_ANNOTATION, holdOf, holdPatch, releasePatch } from '../../harvester/hold.ts';
import { DELIVERY_ANNOTATION } from '../../harvester/report.ts';
import { mutateJob } from '../../src/core/mutate.ts';
import { signedJson, verifiedJson, verifyInjection } from '../../harvester/trust.ts';
import { durableConfig, job, optedIn } from '../support/fixtures.ts';

const KEY = Buffer.from('0123456789abcdef0123456789abcdef');
const OLD_KEY = Buffer.from('an-older-key-an-older-key-32-byt');

function injected(key: Buffer): V1Job {
  const r = mutateJob(job('build') as never, { config: durableConfig(), namespace: optedIn('team-a'), signingKey: key, now: 0 });
  const j = r.job as V1Job;
  return { ...j, metadata: { ...j.metadata, namespace: 'team-a' } };
}

describe('the signature names its key', () => {
  it('carries the key id, which differs between keys and does not contain the key', () => {
    const sig = sign(KEY, PURPOSE.hold, ['uid', 'body']);
    expect(sig.split('.')).toEqual(['v2', keyId(KEY), expect.stringMatching(/^[A-Za-z0-9_-]{43}$/)]);
    expect(keyId(KEY)).not.toBe(keyId(OLD_KEY));
    expect(KEY.toString()).not.toContain(keyId(KEY));
  });

  it('a signature made with another key reads "key changed", naming both ids; a forged one does not', () => {
    const parts = ['team-a', 'status', 'digest'];
    expect(checkSignature(KEY, PURPOSE.injection, parts, sign(KEY, PURPOSE.injection, parts))).toEqual({ ok: true, keyId: keyId(KEY) });
    expect(checkSignature(KEY, PURPOSE.injection, parts, sign(OLD_KEY, PURPOSE.injection, parts))).toEqual({ ok: false, keyChanged: keyId(OLD_KEY) });
    // A MAC made up under this key's id: altered or forged, not a key change.
    const forged = `v2.${keyId(KEY)}.${'A'.repeat(43)}`;
    expect(checkSignature(KEY, PURPOSE.injection, parts, forged)).toEqual({ ok: false, keyChanged: undefined });
    expect(checkSignature(KEY, PURPOSE.injection, parts, 'v2.nodot')).toEqual({ ok: false, keyChanged: undefined });
    expect(checkSignature(KEY, PURPOSE.injection, parts, 42)).toEqual({ ok: false, keyChanged: undefined });
    // The MAC decides; a key id edited onto a genuine signature changes nothing.
    const genuine = sign(KEY, PURPOSE.injection, parts).split('.');
    expect(verify(KEY, PURPOSE.injection, parts, `v2.zzzzzzzz.${genuine[2]}`)).toBe(true);
  });

  it('still verifies a signature written before key ids (v1.<mac>)', () => {
    const parts = ['uid', 'body'];
    const h = createHmac('sha256', KEY);
    for (const p of [PURPOSE.hold, ...parts]) h.update(`${Buffer.byteLength(p)}:${p};`);
    const legacy = `v1.${h.digest('base64url')}`;
    expect(verify(KEY, PURPOSE.hold, parts, legacy)).toBe(true);
    expect(verify(OLD_KEY, PURPOSE.hold, parts, legacy)).toBe(false);
  });

  it('the harvester says "another signing key" for a Job injected before the key changed, and "does not match … (forged, …)" for a forgery', () => {
    const before = injected(OLD_KEY);
    const v = verifyInjection(before, KEY);
    expect(v).toMatchObject({ ok: false, why: expect.stringContaining(`signed with another signing key (key id ${keyId(OLD_KEY)}, this one's is ${keyId(KEY)})`) });
    expect(v.ok ? '' : v.why).not.toMatch(/forged/);
    const forged = injected(KEY);
    forged.metadata!.annotations![SIGNATURE_ANNOTATION] = `v2.${keyId(KEY)}.${'A'.repeat(43)}`;
    expect(verifyInjection(forged, KEY)).toMatchObject({ ok: false, why: expect.stringContaining('does not match this Job and its sidecar (forged') });
  });
});

describe('a rotated key: previous keys verify, only the current key signs', () => {
  const NEW = Buffer.from('the-new-key-the-new-key-32-bytes');
  const STRANGER = Buffer.from('a-key-nobody-here-holds-32-bytes');
  const ring = keyRing(NEW, [OLD_KEY]);
  const parts = ['team-a', 'status', 'digest'];

  it('verifies with the current key and with a previous one, and names the key that verified', () => {
    expect(checkSignature(ring, PURPOSE.injection, parts, sign(NEW, PURPOSE.injection, parts))).toEqual({ ok: true, keyId: keyId(NEW) });
    expect(checkSignature(ring, PURPOSE.injection, parts, sign(OLD_KEY, PURPOSE.injection, parts))).toEqual({ ok: true, keyId: keyId(OLD_KEY) });
    // Bound to what was signed, whichever key signed it.
    expect(verify(ring, PURPOSE.injection, ['team-b', 'status', 'digest'], sign(OLD_KEY, PURPOSE.injection, parts))).toBe(false);
    expect(verify(ring, PURPOSE.hold, parts, sign(OLD_KEY, PURPOSE.injection, parts))).toBe(false);
  });

  it('a key id the ring does not hold reads "key changed"; a made-up MAC under a held id, forged', () => {
    expect(checkSignature(ring, PURPOSE.injection, parts, sign(STRANGER, PURPOSE.injection, parts))).toEqual({ ok: false, keyChanged: keyId(STRANGER) });
    expect(checkSignature(ring, PURPOSE.injection, parts, `v2.${keyId(OLD_KEY)}.${'A'.repeat(43)}`)).toEqual({ ok: false, keyChanged: undefined });
    // Dropped from the ring, the old key is as unknown as any other.
    expect(checkSignature(keyRing(NEW), PURPOSE.injection, parts, sign(OLD_KEY, PURPOSE.injection, parts))).toEqual({ ok: false, keyChanged: keyId(OLD_KEY) });
  });

  it('the harvester verifies a Job injected under the previous key, and once the key is dropped says it was signed by a key it does not hold', () => {
    const before = injected(OLD_KEY);
    const kept = verifyInjection(before, ring);
    expect(kept.ok).toBe(true);
    const dropped = verifyInjection(before, keyRing(NEW));
    expect(dropped).toMatchObject({ ok: false, why: expect.stringContaining(`signed with another signing key (key id ${keyId(OLD_KEY)}, this one's is ${keyId(NEW)})`) });
    // A key nobody listed: the message names every key the harvester holds.
    expect(verifyInjection(injected(STRANGER), ring)).toMatchObject({ ok: false, why: expect.stringContaining(`(key id ${keyId(STRANGER)}, this one's is ${keyId(NEW)}; previous keys ${keyId(OLD_KEY)})`) });
  });

  it('a previous key never signs: holds, releases and records are signed with the current key', () => {
    expect(signingKeyOf(ring).equals(NEW)).toBe(true);
    const value = { a: 1 };
    const text = signedJson(ring, PURPOSE.delivery, 'uid-1', value);
    expect((JSON.parse(text) as { sig: string }).sig.split('.')[1]).toBe(keyId(NEW));
    expect(verifiedJson(NEW, PURPOSE.delivery, 'uid-1', text)).toEqual(value);
    expect(verifiedJson(OLD_KEY, PURPOSE.delivery, 'uid-1', text)).toBeUndefined();

    const job = (annotations: Record<string, string> = {}): V1Job => ({ metadata: { name: 'j', uid: 'job-uid-1', resourceVersion: '7', annotations }, spec: { template: {}, ttlSecondsAfterFinished: 3 } });
    const finishedAt = Date.parse('2026-01-01T00:00:00Z');
    // A hold placed before the rotation is still this harvester's: not placed again, and released.
    const oldHold = holdPatch(job(), OLD_KEY, finishedAt, finishedAt, 600)!;
    const heldJob = job({ [HOLD_ANNOTATION]: (oldHold.patch as { metadata: { annotations: Record<string, string> } }).metadata.annotations[HOLD_ANNOTATION]! });
    expect(holdOf(heldJob, ring)).toEqual(oldHold.hold);
    expect(holdPatch(heldJob, ring, finishedAt, finishedAt, 600)).toBeUndefined();
    const d = { sink: 'loki', pods: 1, shipped: 5, lost: 0, unaccounted: 0 };
    const release = releasePatch(heldJob, ring, oldHold.hold, d) as { metadata: { annotations: Record<string, string | null> }; spec: object };
    expect(release.spec).toEqual({ ttlSecondsAfterFinished: 3 });
    const record = release.metadata.annotations[DELIVERY_ANNOTATION]!;
    expect((JSON.parse(record) as { sig: string }).sig.split('.')[1]).toBe(keyId(NEW));
    expect(deliveryRecordOf(job({ [DELIVERY_ANNOTATION]: record }), NEW)).toEqual(d);
    expect(deliveryRecordOf(job({ [DELIVERY_ANNOTATION]: record }), OLD_KEY)).toBeUndefined();
    // A new hold under the ring is the current key's too.
    const newHold = holdPatch(job(), ring, finishedAt, finishedAt, 600)!;
    const sig = (JSON.parse((newHold.patch as { metadata: { annotations: Record<string, string> } }).metadata.annotations[HOLD_ANNOTATION]!) as { sig: string }).sig;
    expect(sig.split('.')[1]).toBe(keyId(NEW));
    // A record written before the rotation still counts as written.
    expect(deliveryRecordOf(job({ [DELIVERY_ANNOTATION]: encodeDeliveryRecord(job(), OLD_KEY, d) }), ring)).toEqual(d);
  });

  it('a previous key equal to the current one, or listed twice, is kept once', () => {
    const r = keyRing(NEW, [OLD_KEY, Buffer.from(NEW), Buffer.from(OLD_KEY)]);
    expect(r.previous.map(keyId)).toEqual([keyId(OLD_KEY)]);
  });
});

describe('the signing key Secret is created once', () => {
  type Secret = { metadata?: { name?: string }; data?: Record<string, string> };
  function fakeCore(initial?: Secret, opts: { raceWith?: Secret } = {}) {
    let stored = initial;
    const calls: string[] = [];
    return {
      calls,
      stored: () => stored,
      readNamespacedSecret: async ({ name }: { name: string }) => {
        calls.push(`get ${name}`);
        if (!stored) throw Object.assign(new Error('not found'), { code: 404 });
        return stored;
      },
      createNamespacedSecret: async ({ body }: { body: Secret }) => {
        calls.push(`create ${body.metadata?.name}`);
        if (opts.raceWith) {
          stored = opts.raceWith;
          throw Object.assign(new Error('already exists'), { code: 409 });
        }
        if (stored) throw Object.assign(new Error('already exists'), { code: 409 });
        stored = body;
        return body;
      },
    };
  }
  const o = { namespace: 'jobharvest', name: 'jh-signing', labels: {}, log: () => {} };

  it('creates a random key when the Secret is absent, and every later start reads that same key', async () => {
    const { ensureSigningKey } = await import('../../src/k8s/signing-secret.ts');
    const core = fakeCore();
    const first = await ensureSigningKey(core as never, o);
    expect(first.length).toBeGreaterThanOrEqual(32);
    expect(core.calls).toEqual(['get jh-signing', 'create jh-signing']);
    const again = await ensureSigningKey(core as never, o);
    expect(again.equals(first)).toBe(true);
    expect(core.calls.slice(2)).toEqual(['get jh-signing']);
    // Another install gets another key.
    expect((await ensureSigningKey(fakeCore() as never, o)).equals(first)).toBe(false);
  });

  it("keeps an existing Secret's key (an earlier chart's, or the operator's), and takes the winner's after a create race", async () => {
    const { ensureSigningKey } = await import('../../src/k8s/signing-secret.ts');
    const existing = { metadata: { name: 'jh-signing' }, data: { key: Buffer.from('an-operator-chosen-key-of-32-byt\n').toString('base64') } };
    const core = fakeCore(existing);
    expect((await ensureSigningKey(core as never, o)).toString()).toBe('an-operator-chosen-key-of-32-byt');
    expect(core.calls).toEqual(['get jh-signing']);
    const race = fakeCore(undefined, { raceWith: existing });
    expect((await ensureSigningKey(race as never, o)).toString()).toBe('an-operator-chosen-key-of-32-byt');
    expect(race.calls).toEqual(['get jh-signing', 'create jh-signing', 'get jh-signing']);
  });

  it('never replaces a Secret without a usable key: that is the operator\'s to fix', async () => {
    const { ensureSigningKey } = await import('../../src/k8s/signing-secret.ts');
    const empty = fakeCore({ metadata: { name: 'jh-signing' }, data: {} });
    await expect(ensureSigningKey(empty as never, o)).rejects.toThrow(/has no "key"/);
    const short = fakeCore({ metadata: { name: 'jh-signing' }, data: { key: Buffer.from('short').toString('base64') } });
    await expect(ensureSigningKey(short as never, o)).rejects.toThrow(/at least 16 bytes/);
    expect([...empty.calls, ...short.calls].filter((c) => c.startsWith('create'))).toEqual([]);
  });
});

describe('the webhook\'s signing flags', () => {
  it('takes one key source, and --signing-secret only with a cluster', async () => {
    const { webhookOptions } = await import('../../src/cli/webhook-flags.ts');
    const base = { host: '127.0.0.1', port: '0', serviceName: 'jh', logReaderClusterrole: 'r', apiRbac: true };
    expect(webhookOptions({ ...base, signingSecret: 'jh-signing' }).signingSecret).toBe('jh-signing');
    expect(() => webhookOptions({ ...base, signingSecret: 'jh-signing', signingKeyFile: '/k' })).toThrow(/--signing-key-file and --signing-secret cannot both be given/);
    expect(() => webhookOptions({ ...base, signingSecret: 'jh-signing', standalone: true })).toThrow(/--signing-secret needs a cluster/);
  });
});
