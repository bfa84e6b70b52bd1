import type { V1Job } from '@kubernetes/client-node';
import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { checkSignature, keyId, PURPOSE, sign, SIGNATURE_ANNOTATION, verify } from '../../src/contract/signature.ts';
import { mutateJob } from '../../src/core/mutate.ts';
import { verifyInjection } from '../../harvester/trust.ts';
import { durableConfig, job, optedIn } from './fixtures.ts';

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
    expect(checkSignature(KEY, PURPOSE.injection, parts, sign(KEY, PURPOSE.injection, parts))).toEqual({ ok: true });
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
