import type { AdmissionregistrationV1Api, V1MutatingWebhookConfiguration } from '@kubernetes/client-node';
import { INJECT_LABEL } from '../core/annotations.ts';
import { excludedNamespaces, type Config } from '../core/config.ts';
import { statusOf } from './errors.ts';
import { managedByLabels } from './labels.ts';

export interface UrlWebhookOptions {
  name: string;
  url: string;
  caBundle: string;
  config: Config;
  failurePolicy?: 'Ignore' | 'Fail';
  timeoutSeconds?: number;
}

/**
 * The MutatingWebhookConfiguration the chart would install, pointing at a URL
 * instead of a Service: for running the webhook out of cluster against a real
 * API server (development, and the end-to-end tests).
 */
export function urlWebhookConfiguration(o: UrlWebhookOptions): V1MutatingWebhookConfiguration {
  return {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'MutatingWebhookConfiguration',
    metadata: { name: o.name, labels: managedByLabels() },
    webhooks: [
      {
        name: 'jobs.jobharvest.io',
        admissionReviewVersions: ['v1'],
        clientConfig: { url: o.url, caBundle: Buffer.from(o.caBundle).toString('base64') },
        rules: [{ apiGroups: ['batch'], apiVersions: ['v1'], operations: ['CREATE'], resources: ['jobs'], scope: 'Namespaced' }],
        failurePolicy: o.failurePolicy ?? 'Ignore',
        matchPolicy: 'Equivalent',
        reinvocationPolicy: 'IfNeeded',
        sideEffects: 'NoneOnDryRun',
        timeoutSeconds: o.timeoutSeconds ?? 10,
        namespaceSelector: {
          matchExpressions: [
            { key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: [...excludedNamespaces(o.config)].sort() },
            { key: INJECT_LABEL, operator: 'NotIn', values: ['disabled'] },
          ],
        },
      },
    ],
  };
}

export async function registerUrlWebhook(api: AdmissionregistrationV1Api, o: UrlWebhookOptions): Promise<void> {
  const body = urlWebhookConfiguration(o);
  try {
    const cur = await api.readMutatingWebhookConfiguration({ name: o.name });
    body.metadata = { ...body.metadata, resourceVersion: cur.metadata?.resourceVersion };
    await api.replaceMutatingWebhookConfiguration({ name: o.name, body });
  } catch (err) {
    if (statusOf(err) !== 404) throw err;
    await api.createMutatingWebhookConfiguration({ body });
  }
}
