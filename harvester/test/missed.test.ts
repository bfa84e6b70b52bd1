// Which Jobs of the watch without the injected label become work: the filter
// that keeps the harvester's memory to the Jobs that missed injection, whatever
// the number of Jobs that are not opted in.
import type { V1Job } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { encodeDeliveryRecord } from '../hold.ts';
import { missedJobKey } from '../missed.ts';
import { DELIVERY_ANNOTATION } from '../../src/contract/harvest.ts';
import type { NamespaceMeta } from '../../src/core/kube.ts';
import { durableConfig, job as jobFixture, optedIn } from '../../test/support/fixtures.ts';

const KEY = Buffer.from('0123456789abcdef0123456789abcdef');
const CONFIG = durableConfig();

function finishedJob(namespace: string, name: string, over: { annotations?: Record<string, string>; running?: boolean; deleting?: boolean } = {}): V1Job {
  const j = jobFixture(name) as V1Job;
  return {
    ...j,
    metadata: { ...j.metadata, namespace, uid: `${namespace}-${name}`, ...(over.annotations ? { annotations: over.annotations } : {}), ...(over.deleting ? { deletionTimestamp: new Date() } : {}) },
    status: over.running ? { active: 1 } : { conditions: [{ type: 'Complete', status: 'True', lastTransitionTime: new Date() }], succeeded: 1 },
  };
}

describe('missedJobKey', () => {
  it('5,000 Jobs of namespaces that do not inject, opted out, unfinished, being deleted or recorded become no key; the missed ones do', () => {
    const injecting = new Map<string, NamespaceMeta>([['team-a', optedIn('team-a')]]);
    let keys = 0;
    for (let i = 0; i < 5000; i++) if (missedJobKey(finishedJob(`other-${i % 50}`, `j${i}`), injecting, CONFIG, KEY) !== undefined) keys++;
    expect(keys).toBe(0);
    const recorded = finishedJob('team-a', 'recorded');
    recorded.metadata!.annotations = { [DELIVERY_ANNOTATION]: encodeDeliveryRecord(recorded, KEY, { sink: 'http', pods: 1, shipped: 1, lost: 0, unaccounted: 0, injection: 'missed' }) };
    const none = [
      finishedJob('team-a', 'opted-out', { annotations: { 'jobharvest.io/inject': 'false' } }),
      finishedJob('team-a', 'running', { running: true }),
      finishedJob('team-a', 'deleting', { deleting: true }),
      finishedJob('team-a', 'status', { annotations: { 'jobharvest.io/status': '{}' } }),
      recorded,
    ];
    expect(none.map((j) => missedJobKey(j, injecting, CONFIG, KEY))).toEqual([undefined, undefined, undefined, undefined, undefined]);
    // A record a tenant wrote (no valid signature) does not silence it.
    const forgedRecord = finishedJob('team-a', 'forged-record', { annotations: { [DELIVERY_ANNOTATION]: '{"sink":"http","pods":1,"shipped":1,"lost":0,"unaccounted":0,"sig":"v2.x"}' } });
    expect([finishedJob('team-a', 'missed'), forgedRecord].map((j) => missedJobKey(j, injecting, CONFIG, KEY))).toEqual(['team-a/missed', 'team-a/forged-record']);
  });
});
