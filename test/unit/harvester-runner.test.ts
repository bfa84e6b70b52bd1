import type { CoreV1Api, V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { encodeTermination, decodeTermination } from '../../src/contract/termination.ts';
import { checkpointOf, sidecarEnv } from '../../src/k8s/harvest-runner.ts';

const counts = { state: 'incomplete' as const, mode: 'api' as const, sink: 'loki', shipped: 10, unsent: 5, dead_lettered: 0 };

describe('harvest checkpoint', () => {
  it('api mode: resumes each run at its line number and timestamp; finished runs are skipped; runs from the start get no entry', () => {
    const m = decodeTermination(encodeTermination(counts, [['main', 0, '2024-01-01T00:00:01.5Z', 2, 41], ['main', 1, null, 0]], ['init/0']));
    expect(checkpointOf('uid-1', m)).toMatchObject({
      version: 1,
      podUid: 'uid-1',
      files: { 'init/0/api': { offset: 0, done: true }, 'main/0/api': { offset: 41, done: false, ts: '2024-01-01T00:00:01.5Z', n: 2 } },
    });
    expect(Object.keys((checkpointOf('uid-1', m) as { files: object }).files)).toEqual(['init/0/api', 'main/0/api']);
  });

  it('node mode (no line numbers): still resumes by timestamp; no message at all: everything from the start', () => {
    const m = decodeTermination(encodeTermination({ ...counts, mode: 'node' }, [['main', 0, '2024-01-01T00:00:01Z', 1]], []));
    expect((checkpointOf('u', m) as { files: object }).files).toEqual({ 'main/0/api': { offset: 1, done: false, ts: '2024-01-01T00:00:01Z', n: 1 } });
    expect((checkpointOf('u', undefined) as { files: object }).files).toEqual({});
  });
});

describe("the sidecar's env as the kubelet resolves it", () => {
  const pod: V1Pod = { metadata: { name: 'p', namespace: 'team-a', uid: 'u-1', labels: { 'batch.kubernetes.io/job-name': 'j' } }, spec: { nodeName: 'n1', containers: [] } };
  it('plain values with $(VAR), Downward API fields and Secret keys', async () => {
    const reads: string[] = [];
    const core = {
      readNamespacedSecret: async ({ name, namespace }: { name: string; namespace: string }) => {
        reads.push(`${namespace}/${name}`);
        return { data: { token: Buffer.from('s3cret').toString('base64') } };
      },
    } as unknown as CoreV1Api;
    const env = await sidecarEnv(core, pod, {
      name: 'jobharvest',
      env: [
        { name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
        { name: 'JOBHARVEST_JOB_NAME', valueFrom: { fieldRef: { fieldPath: "metadata.labels['batch.kubernetes.io/job-name']" } } },
        { name: 'NODE_NAME', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
        { name: 'JOBHARVEST_SINK', value: 'loki' },
        { name: 'X', value: 'pod=$(POD_NAME)' },
        { name: 'JOBHARVEST_AUTH_TOKEN', valueFrom: { secretKeyRef: { name: 'creds', key: 'token' } } },
      ],
    });
    expect(env).toEqual({ POD_NAME: 'p', JOBHARVEST_JOB_NAME: 'j', NODE_NAME: 'n1', JOBHARVEST_SINK: 'loki', X: 'pod=p', JOBHARVEST_AUTH_TOKEN: 's3cret' });
    expect(reads).toEqual(['team-a/creds']);
  });

  it('an optional Secret that cannot be read is left out; a required one fails the harvest', async () => {
    const core = { readNamespacedSecret: async () => Promise.reject(Object.assign(new Error('forbidden'), { code: 403 })) } as unknown as CoreV1Api;
    const ref = (optional: boolean) => ({ name: 'jobharvest', env: [{ name: 'T', valueFrom: { secretKeyRef: { name: 's', key: 'k', optional } } }] });
    expect(await sidecarEnv(core, pod, ref(true))).toEqual({});
    await expect(sidecarEnv(core, pod, ref(false))).rejects.toThrow('forbidden');
  });
});
