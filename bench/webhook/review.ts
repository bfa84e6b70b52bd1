// The AdmissionReview the webhook benches send: bench/webhook/job.yaml, a
// realistic CronJob-driven batch Job, created in team-a.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';

export function reviewBody(uid = '705ab4f5-6393-11e8-b7cc-42010a800002'): string {
  const job = parse(readFileSync(fileURLToPath(new URL('job.yaml', import.meta.url)), 'utf8'));
  return JSON.stringify({
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid,
      kind: { group: 'batch', version: 'v1', kind: 'Job' },
      resource: { group: 'batch', version: 'v1', resource: 'jobs' },
      requestKind: { group: 'batch', version: 'v1', kind: 'Job' },
      requestResource: { group: 'batch', version: 'v1', resource: 'jobs' },
      namespace: 'team-a',
      operation: 'CREATE',
      userInfo: { username: 'system:serviceaccount:kube-system:cronjob-controller', groups: ['system:serviceaccounts', 'system:authenticated'] },
      object: job,
      oldObject: null,
      dryRun: false,
      options: { apiVersion: 'meta.k8s.io/v1', kind: 'CreateOptions' },
    },
  });
}
