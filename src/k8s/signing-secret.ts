import { randomBytes } from 'node:crypto';
import type { CoreV1Api, V1Secret } from '@kubernetes/client-node';
import { keyFromText, keyId, type SigningKey } from '../contract/signature.ts';
import { statusOf } from './errors.ts';
import type { Log } from '../contract/log.ts';

export const SIGNING_KEY_FIELD = 'key';

/**
 * The signing key lives in one Secret of the release namespace, created once
 * by the first webhook replica that finds it absent, as the certificate
 * Secret is. A key rendered by the chart would change on every
 * `helm template` (Argo CD, Flux renders), and the harvester would then call
 * every earlier injection foreign. An existing Secret is never rewritten:
 * an operator's key (`signing.existingSecret`, or a Secret an earlier chart
 * version generated) stays.
 */
export async function ensureSigningKey(core: Pick<CoreV1Api, 'readNamespacedSecret' | 'createNamespacedSecret'>, o: { namespace: string; name: string; labels: Record<string, string>; log: Log }): Promise<SigningKey> {
  const read = async (): Promise<SigningKey | undefined> => {
    try {
      return keyOf(await core.readNamespacedSecret({ name: o.name, namespace: o.namespace }), o);
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      throw err;
    }
  };
  const found = await read();
  if (found) return found;
  const text = randomBytes(32).toString('base64url');
  const body: V1Secret = {
    metadata: { name: o.name, namespace: o.namespace, labels: o.labels },
    type: 'Opaque',
    data: { [SIGNING_KEY_FIELD]: Buffer.from(text).toString('base64') },
  };
  try {
    await core.createNamespacedSecret({ namespace: o.namespace, body });
    const key = keyFromText(text);
    o.log('info', 'created the signing key Secret', { secret: `${o.namespace}/${o.name}`, keyId: keyId(key) });
    return key;
  } catch (err) {
    // 409: another replica created it first; theirs is the key.
    if (statusOf(err) !== 409) throw err;
    const theirs = await read();
    if (!theirs) throw new Error(`the signing key Secret ${o.namespace}/${o.name} was created by another replica but cannot be read`, { cause: err });
    return theirs;
  }
}

function keyOf(s: V1Secret, o: { namespace: string; name: string }): SigningKey {
  const b64 = s.data?.[SIGNING_KEY_FIELD];
  // A Secret without a usable key is the operator's to fix: replacing it would change the key under the harvester.
  if (!b64) throw new Error(`the signing key Secret ${o.namespace}/${o.name} has no "${SIGNING_KEY_FIELD}"`);
  return keyFromText(Buffer.from(b64, 'base64'));
}
