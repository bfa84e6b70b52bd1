// A tenant container that mounts one of the volumes jobharvest adds
// (docs/security.md, "Nothing else mounts what the sidecar mounts"), through
// the real webhook on the real node, in both modes: the webhook skips the Job
// (never refuses it), so the mount names a volume the template does not
// define and the API server refuses the Job; the tenant's container never
// sees the node's pod logs, the sidecar's token or its checkpoints. A Job
// without the mount, in the same namespace, is injected and runs.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { BUSYBOX_IMAGE } from '../harness/node/images.ts';
import { waitFor } from '../support/wait.ts';
import { createNamespace, startProductOnNode, type NodeEnv, type ProductOnNode } from '../support/node-env.ts';
import { describeRealNode } from './support.ts';

const VOLUMES = ['jobharvest-pod-logs', 'jobharvest-token', 'jobharvest-state', 'jobharvest-tls'];
const IMAGE = BUSYBOX_IMAGE.replace('docker.io/library/', '');

describeRealNode("a tenant container that mounts jobharvest's volumes, through the real webhook on the real node", () => {
  let env: NodeEnv;
  let product: ProductOnNode | undefined;
  let failed = false;

  beforeAll(async () => {
    product = await startProductOnNode('jobharvest-real-node-mounts');
    ({ env } = product);
  });
  afterAll(async () => {
    await product?.stop(failed);
  });

  it('each volume, in node and api mode: not injected, not admitted by the API server; a Job without the mount runs injected', async () => {
    try {
      const sinkHost = product!.sinkHost;
      for (const mode of ['node', 'api'] as const) {
        const namespace = await createNamespace(env.core, `mounts-${mode}`, {
          'jobharvest.io/inject': 'enabled',
          'jobharvest.io/mode': mode,
          'jobharvest.io/sink': 'loki',
          'jobharvest.io/endpoint': `http://${sinkHost}/insert/loki/api/v1/push`,
          'jobharvest.io/drain-seconds': '5',
        });
        for (const volume of VOLUMES) {
          const name = `peek-${volume.slice('jobharvest-'.length)}`;
          const outcome = await env.batch
            .createNamespacedJob({
              namespace,
              body: {
                metadata: { name },
                spec: {
                  backoffLimit: 0,
                  template: {
                    spec: {
                      restartPolicy: 'Never',
                      automountServiceAccountToken: false,
                      containers: [{ name: 'main', image: IMAGE, command: ['sh', '-c', 'ls -R /peek'], volumeMounts: [{ name: volume, mountPath: '/peek', readOnly: true }] }],
                    },
                  },
                },
              },
            })
            .then(() => 'created', (err: { code?: number; body?: string }) => `${err.code}: ${err.body ?? ''}`);
          // The API server's validation, not the webhook: jobharvest never answers allowed: false.
          expect(outcome, `${mode} ${volume}`).toMatch(new RegExp(`^422: .*volumeMounts\\[0\\]\\.name: Not found: \\\\"${volume}\\\\"`));
          expect(outcome, `${mode} ${volume}`).not.toContain('admission webhook');
        }
        await env.batch.createNamespacedJob({
          namespace,
          body: { metadata: { name: 'plain' }, spec: { backoffLimit: 0, template: { spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: IMAGE, command: ['sh', '-c', 'echo plain'] }] } } } },
        });
        const job = await waitFor(
          `the plain Job in ${mode} mode to finish`,
          async () => {
            const j = await env.batch.readNamespacedJob({ name: 'plain', namespace });
            return j.status?.conditions?.some((c) => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True') ? j : undefined;
          },
          { timeoutMs: 150_000, intervalMs: 1_000 },
        );
        expect(job.spec?.template.spec?.initContainers?.map((c) => c.name), mode).toEqual(['jobharvest']);
        // SuccessCriteriaMet comes before Complete: look for Complete itself.
        expect(job.status?.conditions?.filter((c) => c.status === 'True').map((c) => c.type), mode).toContain('Complete');
      }
    } catch (err) {
      failed = true;
      throw err;
    }
  });
});
